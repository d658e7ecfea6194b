"""`windvane serve`'s defaults are held once, by each component's config class; docs/serve.md states them as those hold them.

The command line takes its option defaults from the classes (so `--help`
shows them); docs/serve.md is prose, so this checks each default it states
against the class that holds it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from click.testing import CliRunner

from windvane.cli import cli as windvane_cli
from windvane.connectors.forward import ForwardConfig
from windvane.connectors.http import HttpConfig
from windvane.connectors.limits import Limits
from windvane.connectors.mqtt import MqttConfig
from windvane.ingest.config import MAX_DECODE_WORKERS, CommitterConfig
from windvane.ingest.ledger import KeyLedger

SERVE_DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


def _serve_section() -> str:
    """The page on `windvane serve`, its whitespace (line breaks, indents) as single spaces."""
    return re.sub(r"\s+", " ", SERVE_DOC.read_text())


def test_the_serve_page_states_the_defaults_the_config_classes_hold():
    section = _serve_section()
    stated = [
        f"--forward 0.0.0.0:{ForwardConfig.port} --http 0.0.0.0:{HttpConfig.port}",
        f"forward: 0.0.0.0:{ForwardConfig.port} (TCP, and UDP for heartbeats;",
        f"http: 0.0.0.0:{HttpConfig.port} (TCP: posts,",
        f"A malformed or oversize message ({ForwardConfig.chunk_size_limit >> 20} MiB,",
        f"413 above {HttpConfig.body_size_limit >> 20} MiB",
        f"`--mqtt-topic PATTERN` (repeatable, default `{' '.join(MqttConfig.topics)}`)",
        f"is recognised for {CommitterConfig.key_window / 3600:g} h",
        f"(`--memory-budget`, {Limits.memory_budget >> 20} MiB)",
        f"not done in {Limits.handshake_timeout:g} s (`--handshake-timeout`",
        f"for {Limits.idle_timeout / 60:g} minutes (`--idle-timeout`",
        f"within {Limits.header_timeout:g} s (`--header-timeout`)",
        f"within {Limits.body_timeout:g} s (`--body-timeout`",
        f"whole within {Limits.frame_timeout:g} s of its first byte plus a second per "
        f"{Limits.frame_min_rate >> 10} KiB of it (`--frame-timeout`, `--frame-min-rate`",
        f"`--trim-after` seconds ({Limits.trim_after:g})",
        f"At most {Limits.max_connections:,} connections per listener",
        f"(`--decode-workers N`, by default one per core, at most {MAX_DECODE_WORKERS};",
        f"Reconnects with backoff ({MqttConfig.min_retry:g}-{MqttConfig.max_retry:g} s); "
        f"past {MqttConfig.max_pending_bytes >> 20} MiB waiting for commits it stops reading",
    ]
    missing = [phrase for phrase in stated if phrase not in section]
    assert not missing, f"docs/serve.md does not say: {missing}"


def test_serve_help_shows_the_defaults_of_the_config_classes():
    result = CliRunner().invoke(windvane_cli, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = re.sub(r"\s+", " ", result.output)
    for option, default in [
        ("--forward HOST:PORT", f"127.0.0.1:{ForwardConfig.port}"),
        ("--http HOST:PORT", f"127.0.0.1:{HttpConfig.port}"),
        ("--commit-interval MS", f"{CommitterConfig.interval * 1000}"),
        ("--memory-budget MIB", f"{Limits.memory_budget >> 20}"),
        ("--idle-timeout SECONDS", f"{Limits.idle_timeout}"),
        ("--frame-timeout SECONDS", f"{Limits.frame_timeout}"),
        ("--frame-min-rate KIB", f"{Limits.frame_min_rate >> 10}"),
        ("--trim-after SECONDS", f"{Limits.trim_after}"),
    ]:
        assert re.search(re.escape(option) + r" [^\[]*\[default: " + re.escape(default) + r"[;\]]", text), option
    assert "Default: '#', every topic." in text
    assert f"Default: one per core (at most {MAX_DECODE_WORKERS}), 0 on one core." in text


def test_the_committer_and_the_memory_budget_default_to_one_budget():
    assert CommitterConfig().max_pending_bytes == Limits().memory_budget == 256 << 20
    assert KeyLedger().window == CommitterConfig.key_window == 24 * 3600


def test_the_mqtt_session_settings_are_the_subscribers_keyword_arguments():
    from windvane.connectors.mqtt import MqttSubscriber

    parameters = inspect.signature(MqttSubscriber).parameters
    config = MqttConfig("mqtt://localhost")
    assert {name: parameters[name].default for name in config.session()} == config.session()
    keywords = {name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY and name != "client_id"}
    assert keywords == set(config.session())
