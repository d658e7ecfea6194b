"""`windvane store`: describe and pack a store."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from windvane import ingest
from windvane.cli.root import STORE_URL, BadInput, cli, open_store

if TYPE_CHECKING:
    from windvane import neostore


def _tid_text(tid: bytes) -> str:
    from windvane import neostore

    if tid == neostore.ZERO:
        return "none"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(neostore.tids.tid_time(neostore.u64(tid))))
    return f"0x{tid.hex()} ({when})"


@cli.group()
def store() -> None:
    """Inspect and maintain a store.

    \b
    URL is one of:
        sqlite:///relative.db   sqlite:////abs/path.db
        mariadb://user:pw@host:port/db
        mariadb://user@/db?unix_socket=/path/sock[&engine=rocksdb]
    """


@store.command(short_help="Describe a store: engine, row counts, bytes, last commit and pack.")
@STORE_URL
def info(url: str) -> None:
    """Describe the store at URL (read-only: exit code 2 if there is no store there, none is created).

    `windvane info --store URL` adds what its streams hold.
    """
    from windvane.ops import info as contents

    with open_store(url, read_only=True) as st:
        for line in contents.report_lines(contents.describe(st, streams=False)):
            click.echo(line)


@store.command(short_help="Drop old revisions and unreferenced values, and give the disk back.")
@STORE_URL
@click.option(
    "--keep-days",
    type=click.FloatRange(min=0),
    default=None,
    metavar="DAYS",
    help="Keep every state of the last DAYS days readable (0: keep only the latest). This or --before is required.",
)
@click.option(
    "--before",
    "before",
    default=None,
    metavar="TIME",
    help="Remove the states before TIME (ISO 8601, no zone means UTC, or epoch seconds); those from TIME on "
    "stay readable.",
)
@click.option(
    "--zodb-gc/--no-zodb-gc",
    default=False,
    help="Also delete objects unreachable from the root. Only for stores written through ZODB (values are pickles).",
)
@click.option(
    "--reclaim/--no-reclaim",
    default=True,
    show_default=True,
    help="Give the space freed back to the file system (SQLite: moves pages off the end of the file and "
    "cuts it; MariaDB: rebuilds online each table that lost at least an eighth of its rows). With "
    "--no-reclaim it stays inside the store for new data.",
)
@click.option(
    "--vacuum",
    is_flag=True,
    help="Also rewrite what cannot give space back in place: a SQLite file made before stores had "
    "incremental vacuum is rewritten once (needs free disk of twice its data; writers wait until it is "
    "done); on MariaDB every table pack deletes from is rebuilt, however little it lost.",
)
@click.option(
    "--schemas",
    "schemas_dir",
    type=click.Path(exists=True, file_okay=False, path_type=str),
    help="Directory of stream schemas: first trim each stream whose schema has a retention "
    '(retention = "90d") of its rows older than that, one commit per stream, and say what was trimmed.',
)
def pack(
    url: str,
    keep_days: float | None,
    before: str | None,
    zodb_gc: bool,
    reclaim: bool,
    vacuum: bool,
    schemas_dir: str | None,
) -> None:
    """Remove the history older than --keep-days (or --before), and values nothing uses,
    then give the disk they took back to the file system.

    Pack removes history for good: say how much to keep, with --keep-days DAYS
    or --before TIME (one of them, exit code 2 without). The states from that
    point on stay readable; older commits can no longer be opened (`arrays
    history` marks them). Works in small batches: writers wait for at most one
    batch, readers never (on MariaDB, statements on a table being rebuilt may
    wait as the rebuild starts and ends, 10 s at most).
    """
    from windvane import neostore

    if vacuum and not reclaim:
        raise BadInput("--vacuum gives space back to the file system: drop --no-reclaim to use it")
    before_time = _pack_before(keep_days, before)  # bad flags are refused before anything is done
    with open_store(url, create=False) as st:
        if schemas_dir is not None:
            _apply_retention(st, schemas_dir)
        # --keep-days counts back from now, after the retention's trims: a pack keeping 0 days drops them too.
        since = before_time if before_time is not None else time.time() - keep_days * 86400
        last = st.last_transaction()
        if last == neostore.ZERO:
            click.echo("nothing to pack: the store has no transactions")
            return
        # Tids count from 1970 and no commit is later than now: the clamp keeps the time in their range.
        cutoff = neostore.p64(neostore.tids.tid_from_time(min(max(since, 0.0), time.time())))
        tid = min(cutoff, last)
        references = None
        if zodb_gc:
            from ZODB.serialize import referencesf

            references = referencesf
        stats = _pack_with_progress(st, tid, references, reclaim=reclaim, vacuum=vacuum)
        _pack_report(stats, reclaim)


def _pack_with_progress(st: neostore.Store, tid: bytes, references, *, reclaim: bool, vacuum: bool):
    """``st.pack`` up to ``tid`` under a progress bar; its statistics."""
    counts = st.counts()
    with click.progressbar(
        length=counts["obj"] + counts["data"], label=f"packing up to {_tid_text(tid)}", file=None
    ) as bar:
        from windvane.arrays.row_log import pack_keep  # streams' row logs keep the revisions readers still need

        def progress(phase: str, n: int) -> None:
            if phase == "reclaim":
                bar.label = "giving the space back to the file system"
                bar.render_progress()
            else:
                bar.update(n)

        return st.pack(
            tid, references=references, keep=pack_keep(st, tid), reclaim=reclaim, vacuum=vacuum, progress=progress
        )


def _pack_report(stats, reclaim: bool) -> None:
    """What pack removed and what the store takes now."""
    click.echo(
        f"removed {stats.revisions_deleted} revisions ({stats.objects_collected} unreachable objects) "
        f"and {stats.data_deleted} values in {stats.batches} batches, {stats.seconds:.1f} s"
    )
    if reclaim:
        click.echo(
            f"gave back {stats.bytes_freed / 1e6:.1f} MB of disk: the store takes "
            f"{stats.disk_after / 1e6:.1f} MB (it took {stats.disk_before / 1e6:.1f} MB)"
        )
    else:
        click.echo(f"the store takes {stats.disk_after / 1e6:.1f} MB; the space pack freed stays in it for new data")
    for note in stats.notes:
        click.echo(note)


def _apply_retention(st: neostore.Store, schemas_dir: str) -> None:
    """``store pack --schemas``: trim the streams whose schema has a retention, saying what was trimmed."""
    from windvane.ingest import retention
    from windvane.ingest.schema import load_schemas

    try:
        done = retention.apply_retention(st, load_schemas(schemas_dir))
    except ingest.IngestError as exc:
        raise BadInput(str(exc)) from exc
    for line in retention.report_lines(done):
        click.echo(line)


def _pack_before(keep_days: float | None, before: str | None) -> float | None:
    """--before as a Unix time (None with --keep-days): `store pack` takes exactly one of the two."""
    if (keep_days is None) == (before is None):
        raise BadInput(
            "say how much history to keep, with one of --keep-days DAYS (every state of the last DAYS "
            "days stays readable; 0 keeps only the latest) or --before TIME (the states before TIME "
            "are removed): pack removes history for good"
        )
    if before is None:
        return None
    from windvane.export.times import BadTime, parse_time

    try:
        return parse_time(before, "--before") / 1e9
    except BadTime as exc:
        raise BadInput(str(exc)) from exc
