"""`windvane info` and `windvane demo`: what a store holds, and the demo that fills one."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from windvane.cli.root import STORE_OPTION, BadInput, cli, open_store


@cli.command(name="info", short_help="What a store's streams hold: rows, shapes, bytes raw and stored, dedup.")
@STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines instead of text.")
def store_contents(store_url: str, as_json: bool) -> None:
    """Describe the store at --store and every stream in it, quarantine streams included.

    Per stream: rows, earliest and latest time (the least and greatest of
    its rows, which arrive in any time order), each column's dtype, shape and
    codec, bytes raw (uncompressed) and stored (compressed, after dedup),
    and with history (the revisions a pack would drop). For the store: the
    dedup ratio and the last commit. Reads only: exit code 2 if there is no
    store at --store (none is created).
    """
    from windvane import neostore
    from windvane.ops import info as contents

    with open_store(store_url, read_only=True) as st:
        try:
            found = contents.describe(st)
        except neostore.NeoStoreError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(contents.to_json(found), indent=2))
        return
    for line in contents.report_lines(found):
        click.echo(line)


def _port(flag: str, listener: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``demo`` option: the port on 127.0.0.1 of the service's ``listener``."""
    return click.option(
        flag,
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        help=f"Port on 127.0.0.1 of the service's {listener}; 0: a free one.",
    )


@cli.command(short_help="Serve a fresh SQLite store, send it sample data with real clients, show what it stored.")
@click.option(
    "--dir",
    "directory",
    default="var",
    show_default=True,
    type=click.Path(file_okay=False, path_type=str),
    help="Where the demo's store (demo.db) and the service's log (demo-serve.log) go.",
)
@click.option("--keep", is_flag=True, help="Add to the store an earlier demo left in --dir instead of starting afresh.")
@_port("--forward-port", "Forward listener (TCP, and UDP heartbeats)")
@_port("--http-port", "HTTP listener")
def demo(directory: str, keep: bool, forward_port: int, http_port: int) -> None:
    """Start `windvane serve` on DIR/demo.db (SQLite, made afresh) and send it the shipped samples.

    A week of real wind-turbine SCADA data (ENGIE's La Haute Borne) and a
    synthetic drive-train vibration recording go over the Forward protocol
    with fluent-logger, a synthetic nginx access log over HTTP as NDJSON
    (sources: windvane/ops/samples/README.md). Once the service
    has committed them and stopped, this prints what the store holds (streams,
    rows, shapes, bytes raw and stored, dedup ratio), the throughput of each
    stage, and how to open the data in a notebook. The service listens on
    127.0.0.1 only, on free ports unless --forward-port and --http-port say
    which; the demo prints them as it starts.
    """
    from windvane import neostore
    from windvane.ops import demo as walkthrough
    from windvane.ops import info as contents

    try:
        result = walkthrough.run(
            directory,
            keep=keep,
            ports=(forward_port, http_port),
            say=lambda line: click.echo(line, err=True),
            progress=lambda label, length: click.progressbar(length=length, label=label, file=sys.stderr),
        )
    except walkthrough.DemoDirectoryError as exc:
        raise BadInput(str(exc)) from exc
    except (walkthrough.DemoError, neostore.NeoStoreError) as exc:
        raise click.ClickException(str(exc)) from exc
    for line in (
        *contents.report_lines(result.info),
        "",
        *walkthrough.throughput_lines(result),
        "",
        *walkthrough.notebook_lines(result),
    ):
        click.echo(line)
