"""AWS credentials and region as the AWS tools find them, for the S3 client.

The client itself reads the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, instance and web-identity roles). What it does not read
is the shared files the AWS CLI writes: ``~/.aws/credentials`` and
``~/.aws/config`` (or ``AWS_SHARED_CREDENTIALS_FILE``/``AWS_CONFIG_FILE``),
profile ``AWS_PROFILE`` or ``default``. Those are read here, only when the
environment names no key, so the environment always wins as with the AWS CLI.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path


def shared_file_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Client settings (``access_key_id``, ``secret_access_key``, ``token``, ``region``) from the shared files."""
    if environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    home = Path(environ.get("HOME", "~")).expanduser()
    found: dict[str, str] = {}
    credentials = _section(environ.get("AWS_SHARED_CREDENTIALS_FILE", home / ".aws/credentials"), profile)
    config = _section(
        environ.get("AWS_CONFIG_FILE", home / ".aws/config"), profile if profile == "default" else f"profile {profile}"
    )
    for ours, theirs in (
        ("access_key_id", "aws_access_key_id"),
        ("secret_access_key", "aws_secret_access_key"),
        ("token", "aws_session_token"),
    ):
        value = credentials.get(theirs) or config.get(theirs)
        if value:
            found[ours] = value
    region = config.get("region")
    if region and not (environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")):
        found["region"] = region
    return found


def _section(path: str | os.PathLike[str], name: str) -> Mapping[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error:
        return {}
    return parser[name] if parser.has_section(name) else {}
