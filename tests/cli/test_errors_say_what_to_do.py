"""Errors of the CLI's parser options and of `serve`'s listeners say what is wrong and what to do, with exit code 2."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.serve_process import REPO
from windvane.cli import cli as windvane_cli


def run(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("fmt", "says"),
    [
        (
            "multiline",
            "--format multiline: Invalid regexp '': No named captures: the multiline parser needs format1 (to "
            "formatN, joined into one regexp) with (?<name>...) groups, and format_firstline for where an event "
            "starts; e.g. format_firstline = '/^\\d{4}-\\d{2}-\\d{2}/' and ",
        ),
        ("tsv", "--format tsv: tsv parser: 'keys' parameter is required: name each line's fields in order, e.g. "),
    ],
)
def test_format_alone_without_the_options_it_needs_says_how_to_give_them(sqlite_url, tmp_path, fmt, says):
    log = tmp_path / "app.log"
    log.write_text("2024-03-01 12:00:00 INFO started\n")
    result = run("import", str(log), "--format", fmt, "--store", sqlite_url, "--tag", "t")
    assert result.exit_code == 2
    assert says in result.output
    assert f'write them with type = "{fmt}" in a TOML file and give it as --parser FILE.toml' in result.output


def test_the_example_the_message_gives_works(sqlite_url, tmp_path):
    log = tmp_path / "app.log"
    log.write_text("2024-03-01 12:00:00 INFO started\n  at one\n2024-03-01 12:00:01 WARN slow\n")
    parser = tmp_path / "multiline.toml"
    parser.write_text(
        'type = "multiline"\n'
        "format_firstline = '/^\\d{4}-\\d{2}-\\d{2}/'\n"
        "format1 = '/^(?<time>\\S+ \\S+) (?<level>\\w+) (?<message>.*)/'\n"
        'time_format = "%Y-%m-%d %H:%M:%S"\n'
    )
    result = run("import", str(log), "--parser", str(parser), "--store", sqlite_url, "--tag", "t")
    assert result.exit_code == 0, result.output
    assert "2 rows" in result.output


def test_a_parser_file_without_keys_says_how_to_write_them(sqlite_url, tmp_path):
    parser = tmp_path / "tsv.toml"
    parser.write_text('type = "tsv"\n')
    log = tmp_path / "app.tsv"
    log.write_text("a\tb\n")
    result = run("import", str(log), "--parser", str(parser), "--store", sqlite_url, "--tag", "t")
    assert result.exit_code == 2
    assert 'keys = ["time", "host", "message"] (fluentd: keys time,host,message)' in result.output


def serve(sqlite_url: str, *listeners: str) -> subprocess.CompletedProcess:
    args = ["serve", "--store", sqlite_url, "--schemas", str(REPO / "schemas"), *listeners]
    return subprocess.run(
        [sys.executable, "-m", "windvane", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_serve_on_a_busy_address_names_the_listener_the_address_and_what_to_do(sqlite_url):
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("127.0.0.1", 0))
        busy, busy_udp = tcp.getsockname()[1], udp.getsockname()[1]
        cases = [
            (["--forward", f"127.0.0.1:{busy}", "--shared-key", "k", "--http", "off"], "Forward", busy, "TCP"),
            (["--forward", "off", "--http", f"127.0.0.1:{busy}", "--http-auth", "none"], "HTTP", busy, "TCP"),
            (
                ["--forward", f"127.0.0.1:{busy_udp}", "--shared-key", "k", "--http", "off"],
                "Forward",
                busy_udp,
                "UDP, for heartbeats",
            ),
        ]
        for listeners, name, port, protocol in cases:
            done = serve(sqlite_url, *listeners)
            option = f"--{name.lower()}"
            assert done.returncode == 2, done.stderr
            assert (
                f"Error: {name} cannot listen on 127.0.0.1:{port} ({protocol}): Address already in use; another "
                f"program listens there: stop it, or choose another port: {option} HOST:PORT, or {option} off"
            ) in done.stderr
