"""`windvane streams` and `windvane quarantine`: list, remove, rename and trim streams; replay quarantine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from windvane import ingest
from windvane.cli.root import (
    STORE_ENV,
    STORE_OPTION,
    BadInput,
    cli,
    counted,
    open_store,
    schema_option,
    store_option,
)

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.ingest.replay import Summary
    from windvane.ingest.stream_admin import Change


@cli.group(name="streams", invoke_without_command=True, short_help="List, remove, rename or trim streams.")
@store_option(required=False)
@click.pass_context
def streams_group(ctx: click.Context, store_url: str | None) -> None:
    """List the streams of a store (rows, time range, bytes stored); remove, rename or trim one.

    \b
        windvane streams ls --store URL                    list them (also: windvane streams --store URL)
        windvane streams rm TAG --store URL                remove a stream
        windvane streams mv OLD NEW --store URL            rename it
        windvane streams trim TAG --before T --store URL   drop its rows older than T

    rm, mv and trim are each one commit. History keeps what they replace:
    a read at an earlier tid still sees the stream, its old name or its
    dropped rows, until `windvane store pack` drops them. A tag's
    quarantine stream and import records go with its stream (rm removes
    them, mv renames them; trim leaves the quarantine as it is).

    Exit codes: 0 done (or nothing to trim), 2 bad input (no such stream,
    a name taken, a TIME that is not one, no store at --store, a URL
    without the store's ?blobs= or with another), 1 the store failed.
    """
    if ctx.invoked_subcommand is None:
        if store_url is None:
            raise click.UsageError(f"give the store whose streams to list: --store URL (or set {STORE_ENV})")
        _list_streams(store_url)


@streams_group.command(name="ls", short_help="List the streams: rows, time range, bytes stored.")
@STORE_OPTION
def list_streams(store_url: str) -> None:
    """List the streams of the store at --store: rows, earliest and latest time, bytes stored.

    Rows arrive in any time order: earliest and latest are the least and
    greatest time of the rows (not the first and last rows'), kept per
    chunk so that no stream's data is read to list them.
    """
    _list_streams(store_url)


def _list_streams(store_url: str) -> None:
    from windvane.ops import info as contents

    with open_store(store_url, read_only=True) as st:
        found = contents.describe_streams(st)
    for line in contents.stream_table_lines(found):
        click.echo(line)


def _stream_change(store_url: str, change: Callable[[neostore.Store], Change]) -> Change:
    """Run ``change(store)`` on the store at ``store_url``, errors mapped to exit codes."""
    from windvane import arrays, neostore
    from windvane.ingest import stream_admin

    try:
        with open_store(store_url, create=False) as st:
            return change(st)
    except (stream_admin.StreamAdminError, arrays.InvalidTagError) as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _change_text(change: Change) -> str:
    extras = [counted(change.quarantined, "quarantined record")] if change.quarantined else []
    extras += [counted(change.records, "import record")] if change.records else []
    return counted(change.rows, "row") + "".join(f", {e}" for e in extras)


def _commit_of(change: Change) -> str:
    """The tid of the commit that made ``change``, in hex: rm and mv always commit (no stream is NoSuchStream)."""
    assert change.tid is not None, "a removal or a rename commits"
    return f"0x{change.tid.hex()}"


@streams_group.command(name="rm", short_help="Remove a stream (with its quarantine and import records).")
@click.argument("tag")
@STORE_OPTION
def remove_stream(tag: str, store_url: str) -> None:
    """Remove stream TAG, its quarantine stream and its import records, in one commit."""
    from windvane.ingest import stream_admin

    change = _stream_change(store_url, lambda st: stream_admin.remove(st, tag))
    click.echo(
        f"removed stream {tag} ({_change_text(change)}) in commit {_commit_of(change)}; "
        "earlier reads still see it until `windvane store pack`"
    )


@streams_group.command(name="mv", short_help="Rename a stream (with its quarantine and import records).")
@click.argument("old")
@click.argument("new")
@STORE_OPTION
def rename_stream(old: str, new: str, store_url: str) -> None:
    """Rename stream OLD to NEW (its quarantine stream and import records too), in one commit.

    NEW must not be a stream yet.
    """
    from windvane.ingest import stream_admin

    change = _stream_change(store_url, lambda st: stream_admin.rename(st, old, new))
    click.echo(f"renamed stream {old} to {new} ({_change_text(change)}) in commit {_commit_of(change)}")


@streams_group.command(name="trim", short_help="Drop a stream's rows older than a time.")
@click.argument("tag")
@click.option(
    "--before",
    required=True,
    metavar="TIME",
    help="Drop the rows whose time is before TIME: ISO 8601 (no zone means UTC) or epoch seconds.",
)
@STORE_OPTION
def trim_stream(tag: str, before: str, store_url: str) -> None:
    """Drop the rows of stream TAG whose time is before --before, in one commit (none if no row is that old).

    The rows stay in history (a read at an earlier tid sees them) until
    `windvane store pack` drops them.
    """
    from windvane.export.errors import BadTime
    from windvane.export.times import parse_time
    from windvane.ingest import stream_admin

    try:
        before_ns = parse_time(before, "--before")
    except BadTime as exc:
        raise BadInput(str(exc)) from exc
    change = _stream_change(store_url, lambda st: stream_admin.trim(st, tag, before_ns))
    if change.tid is None:
        click.echo(f"nothing to trim: no row of stream {tag} is before {before}")
    else:
        click.echo(
            f"trimmed {counted(change.rows, 'row')} of stream {tag} before {before} in commit 0x{change.tid.hex()}; "
            "they stay in history until `windvane store pack`"
        )


@cli.group(name="quarantine")
def quarantine_group() -> None:
    """See what was quarantined (records that did not fit their schema), and replay it after a schema fix.

    \b
        windvane quarantine ls [TAG] --store URL
        windvane quarantine replay TAG [--schema fixed.toml] --store URL

    Exit codes: 0 done, 2 bad input (no quarantine for TAG, no schema to
    replay with, a schema that contradicts the stream, no store at --store,
    a URL without the store's ?blobs= or with another), 1 the store failed.
    """


def _reason_lines(summary: Summary) -> list[str]:
    """The commonest reasons of a quarantine ``summary`` with their counts, a line each, the rest in one."""
    from windvane.ingest.replay import TOP_REASONS

    lines = [f"  {count:>10,}  {reason}" for reason, count in summary.reasons[:TOP_REASONS]]
    rest = summary.reasons[TOP_REASONS:]
    if rest:
        lines.append(f"  {sum(c for _, c in rest):>10,}  ({len(rest):,} other reasons)")
    return lines


@quarantine_group.command(name="ls", short_help="Quarantined records per tag, counted by reason.")
@STORE_OPTION
@click.argument("tag", required=False)
def list_quarantine(store_url: str, tag: str | None) -> None:
    """List the quarantine streams (or TAG's): records, and the commonest reasons with their counts."""
    from windvane import arrays
    from windvane.ingest import replay as replaying

    with open_store(store_url, read_only=True) as st:
        try:
            found = replaying.summarize(st, tag)
        except (replaying.ReplayError, arrays.InvalidTagError) as exc:
            raise BadInput(str(exc)) from exc
    if not found:
        click.echo("nothing is quarantined")
    for summary in found:
        click.echo(f"quarantine/{summary.tag}: {counted(summary.rows, 'record')}")
        for line in _reason_lines(summary):
            click.echo(line)


@quarantine_group.command(name="replay", short_help="Move the quarantined records that now fit into their stream.")
@STORE_OPTION
@click.argument("tag")
@schema_option("Schema file (TOML) to validate with. Default: the stream's columns as they are.")
def replay_quarantine(store_url: str, tag: str, schema_path: str | None) -> None:
    """Validate TAG's quarantined records again and move those that fit into stream TAG, exactly once.

    In one commit the records that fit are appended to the stream and
    removed from the quarantine; the others stay, with the reason they fail
    now. When none fits, nothing is committed. Run twice, or again after
    being killed, it never stores a record twice nor loses one. Replay reads
    records that arrived as msgpack or JSON (Forward, HTTP, MQTT, JSON
    imports); the time is the one the quarantine recorded, and records
    whose time was unreadable stay. Records it cannot read (a CSV or log
    line) keep the reason they were quarantined for, its line number with
    it, and replay's reason is said beside it.
    """
    from windvane import arrays, neostore
    from windvane.ingest import replay as replaying
    from windvane.ingest.schema import load_schema

    try:
        schema = load_schema(schema_path) if schema_path else None
        with open_store(store_url, create=False) as st:
            result = replaying.replay(
                st,
                tag,
                schema,
                started=lambda n: click.echo(f"replaying {counted(n, 'quarantined record')} of {tag} ...", err=True),
            )
    except (ingest.IngestError, arrays.InvalidTagError) as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    where = f"in commit 0x{result.tid.hex()}" if result.tid is not None else "(nothing changed, nothing committed)"
    click.echo(
        f"replayed {counted(result.replayed, 'record')} of quarantine/{tag} into stream {tag} {where}; "
        f"{result.remaining.rows:,} {'stays' if result.remaining.rows == 1 else 'stay'} in quarantine"
    )
    for line in _reason_lines(result.remaining):
        click.echo(line)
