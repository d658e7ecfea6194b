"""The users file: passwords, tokens and roles, and the messages for a file that is wrong."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from windvane.ingest import AuthError
from windvane.ingest.auth import DEFAULT_ROLES, CredentialsError, Users


def load(tmp_path: Path, text: str) -> Users:
    path = tmp_path / "users.toml"
    path.write_text(text)
    return Users.load(path)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_roles_are_read_and_a_user_without_them_may_send_and_read(tmp_path):
    users = load(
        tmp_path,
        '[users.a]\npassword = "pa"\nroles = ["read", "write"]\n\n'
        '[users.b]\npassword = "pb"\n\n[users.c]\ntokens = ["tc"]\nroles = []\n',
    )
    assert users.may("a", "write") and users.may("a", "read") and not users.may("a", "send")
    assert {r for r in ("send", "read", "write") if users.may("b", r)} == DEFAULT_ROLES
    assert not any(users.may("c", r) for r in ("send", "read", "write"))
    assert not users.may(None, "read")  # users configured, nobody authenticated
    assert Users().may(None, "write")  # no users: everyone may


def test_authenticate_names_what_is_wrong_never_what_was_expected(tmp_path):
    users = load(tmp_path, '[users.a]\npassword = "secret-a"\ntokens = ["token-a"]\n')
    assert users.authenticate(basic("a", "secret-a")) == "a"
    assert users.authenticate("Bearer token-a") == "a"
    for header, said in [
        (None, "credentials required"),
        (basic("a", "nope"), "wrong user or password"),
        ("Basic %%%", "not base64"),
        ("Bearer nope", "unknown bearer token"),
        ("Digest x", "'digest' is not supported"),
    ]:
        with pytest.raises(CredentialsError, match=said) as caught:
            users.authenticate(header)
        assert "secret-a" not in str(caught.value) and "token-a" not in str(caught.value)


@pytest.mark.parametrize(
    "entry, said",
    [
        ('roles = "read"', "must be a list of role names"),
        ('roles = ["read", "admin"]', "names admin: the roles are send, read, write"),
        ("roles = [1]", "must be a list of role names"),
    ],
)
def test_a_wrong_roles_entry_is_named(tmp_path, entry, said):
    with pytest.raises(AuthError, match=said):
        load(tmp_path, f'[users.a]\npassword = "p"\n{entry}\n')
