"""`windvane import`'s and `windvane tail`'s defaults are held once, by the config classes the readers, the importer
and the follower take theirs from; the command line's options declare those."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import click
import pytest

from windvane.cli import cli as windvane_cli
from windvane.connectors.files import ReaderOptions
from windvane.connectors.files_config import TIME_FROM, FilesConfig
from windvane.connectors.tail.config import TailConfig
from windvane.connectors.tail.follow import Follower
from windvane.connectors.tail.run import TailSettings
from windvane.ingest.config import ImportConfig
from windvane.ingest.imports import import_source


def _option(command: str, name: str) -> click.Option:
    """The option ``name`` (its parameter name) of `windvane <command>`."""
    found = windvane_cli.get_command(click.Context(windvane_cli), command)
    assert found is not None, command
    option = next(p for p in found.params if p.name == name)
    assert isinstance(option, click.Option)
    return option


@pytest.mark.parametrize(
    ("command", "name", "default"),
    [
        ("import", "commit_mb", ImportConfig.commit_bytes >> 20),
        ("import", "time_from", FilesConfig.time_from),
        ("import", "row_interval", FilesConfig.row_interval / 1e9),
        ("tail", "commit_lines", TailConfig.commit_lines),
        ("tail", "commit_ms", TailConfig.commit_ms),
        ("tail", "poll_ms", TailConfig.poll_ms),
        ("tail", "rotate_wait", TailConfig.rotate_wait),
        ("tail", "multiline_flush_interval", TailConfig.flush_seconds),
    ],
)
def test_the_options_default_to_the_configs(command: str, name: str, default: Any):
    option = _option(command, name)
    assert option.default == default
    assert option.show_default


def test_time_from_offers_the_readers_choices():
    option = _option("import", "time_from")
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == TIME_FROM
    assert FilesConfig.time_from in TIME_FROM


def test_tail_help_names_the_default_format():
    assert f"(default {TailConfig.format})" in (_option("tail", "format_name").help or "")


def test_the_tail_settings_default_to_the_tail_config():
    config = TailConfig()
    defaults = {f.name: f.default for f in dataclasses.fields(TailSettings)}
    for name in ("commit_lines", "commit_ms", "poll_ms", "max_pending_bytes", "report_seconds", "flush_seconds"):
        assert defaults[name] == getattr(config, name), name
    assert inspect.signature(Follower).parameters["rotate_wait"].default == config.rotate_wait


def test_the_importer_and_the_readers_default_to_their_configs():
    assert inspect.signature(import_source).parameters["commit_bytes"].default == ImportConfig().commit_bytes
    options, config = ReaderOptions(), FilesConfig()
    assert (options.time_from, options.row_interval, options.block_bytes) == (
        config.time_from,
        config.row_interval,
        config.block_bytes,
    )
