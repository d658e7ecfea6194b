"""One shape for every command that works on a store: --store URL (or WINDVANE_STORE), a positional URL
kept as an alias where commands always took one, `streams ls` beside `arrays ls` and `quarantine ls`,
and one name for each dtype in every listing."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.cli.root import STORE_ENV


def run(*args: str, env: dict[str, str | None] | None = None):
    return CliRunner(env={STORE_ENV: None, **(env or {})}).invoke(windvane_cli, list(args))


@pytest.fixture
def store(sqlite_url):
    """A store with a stream of a number and a text column."""
    with arrays.create_stream(sqlite_url, "plant.a", [arrays.Column("speed", "float32"), arrays.Column("msg", "str")]):
        pass
    return sqlite_url


def store_commands() -> list[tuple[list[str], click.Command]]:
    found = []

    def walk(group: click.Group, words: list[str]) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                walk(command, [*words, name])
            elif any(p.name == "store_url" for p in command.params):
                found.append(([*words, name], command))

    walk(windvane_cli, [])
    return found


def test_every_command_on_a_store_takes_store_and_windvane_store():
    found = store_commands()
    names = {" ".join(words) for words, _ in found}
    assert {"store info", "store pack", "store tier", "arrays ls", "arrays history", "streams ls", "info"} <= names
    for words, command in found:
        option = next(p for p in command.params if p.name == "store_url")
        assert option.opts == ["--store"] and option.envvar == STORE_ENV, words


@pytest.mark.parametrize(
    "args",
    [["streams", "ls"], ["streams"], ["arrays", "ls"], ["store", "info"], ["info"]],
    ids=["streams-ls", "streams", "arrays-ls", "store-info", "info"],
)
def test_store_by_option_by_environment_and_by_position_alike(store, args):
    by_option = run(*args, "--store", store)
    assert by_option.exit_code == 0, by_option.output
    assert run(*args, env={STORE_ENV: store}).output == by_option.output
    if args[0] in ("arrays", "store"):  # these always took the URL first
        assert run(*args, store).output == by_option.output
        # the positional URL is what the user typed: it wins over the environment's
        assert run(*args, store, env={STORE_ENV: "sqlite:///elsewhere.db"}).output == by_option.output


def test_streams_ls_lists_the_streams(store):
    result = run("streams", "ls", "--store", store)
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()] == ["stream", "plant.a"]


def test_a_group_store_reaches_its_commands(store):
    result = run("streams", "--store", store, "ls")
    assert result.exit_code == 0 and "plant.a" in result.output


def test_positional_and_store_that_differ_are_a_usage_error(store, tmp_path):
    other = f"sqlite:///{tmp_path}/other.db"
    result = run("store", "info", store, "--store", other)
    assert result.exit_code == 2
    assert f"the store is given twice and differs: {store!r} and --store {other!r}" in result.output
    assert run("store", "info", store, "--store", store).exit_code == 0  # the same twice is fine
    secret = run("store", "info", "mariadb://u:hunter2@db/a", "--store", "mariadb://u:hunter2@db/b")
    assert secret.exit_code == 2 and "hunter2" not in secret.output


def test_no_store_given_is_a_usage_error_naming_both_ways():
    for args in (["arrays", "ls"], ["store", "pack", "--keep-days", "1"], ["streams", "ls"], ["info"]):
        result = run(*args)
        assert result.exit_code == 2, args
        assert "give the store: --store URL (or set WINDVANE_STORE)" in result.output


def test_arrays_arguments_after_a_store_given_by_option(store):
    names = run("arrays", "ls", "--store", store, "streams/plant.a/m").output.split()
    assert names[0] == "streams/plant.a/msg"
    same = run("arrays", "ls", store, "streams/plant.a/m").output
    assert same.split()[0] == "streams/plant.a/msg"
    history = run("arrays", "history", "--store", store, "streams/plant.a/msg")
    assert history.exit_code == 0 and history.output.count("\n") == 1
    assert run("arrays", "history", store, "streams/plant.a/msg").output == history.output
    missing = run("arrays", "history", "--store", store)
    assert missing.exit_code == 2 and "Missing argument 'NAME'" in missing.output
    extra = run("arrays", "ls", "--store", store, "streams", "plant")
    assert extra.exit_code == 2 and "'streams' is not a store URL" in extra.output


def test_a_text_column_is_str_in_every_listing(store):
    listed = run("arrays", "ls", "--store", store, "streams/plant.a/msg").output
    assert listed.split()[1:3] == ["0", "str"]
    described = json.loads(run("info", "--store", store, "--json").output)
    stream = next(s for s in described["streams"] if s["tag"] == "plant.a")
    assert {c["name"]: c["dtype"] for c in stream["columns"]} == {"time": "int64", "speed": "float32", "msg": "str"}
    with neostore.open(store, read_only=True) as st, arrays.open_stream(st, "plant.a") as s:
        assert arrays.dtype_name(s["msg"].dtype) == "str" and arrays.dtype_name(s["speed"].dtype) == "float32"
