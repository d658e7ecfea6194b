"""`windvane store`: describe, pack a store, and move its big values between its database and an object store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click

from windvane import ingest
from windvane.cli.root import BadInput, cli, open_store, store_option

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.neostore.pack import PackStats


def _tid_text(tid: bytes) -> str:
    from windvane import neostore

    if tid == neostore.ZERO:
        return "none"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(neostore.tids.tid_time(neostore.u64(tid))))
    return f"0x{tid.hex()} ({when})"


class Duration(click.ParamType[float, "str | float"]):
    """A duration as schemas' retentions are written (``30m``, ``1h``, ``2d``; a bare number is seconds), in seconds."""

    name = "DURATION"

    def convert(self, value: str | float, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        from windvane.ingest.times import duration_seconds  # loads numpy: only when the option is given

        seconds = duration_seconds(value, unit_required=False)
        if seconds is None:
            self.fail(
                f"{value!r} is not a duration: give a number and a unit, s, m, h, d or w (30m, 1h, 0)", param, ctx
            )
        return seconds


@cli.group(short_help="Describe a store, pack it, move its big values to an object store and back.")
def store() -> None:
    """Inspect and maintain a store: the one --store names (or WINDVANE_STORE, or a URL given first).

    \b
    URL is one of:
        sqlite:///relative.db   sqlite:////abs/path.db
        mariadb://user:pw@host:port/db
        mariadb://user@/db?unix_socket=/path/sock[&engine=rocksdb]
    """


@store.command(short_help="Describe a store: engine, row counts, bytes, last commit and pack.")
@store_option(alias=True)
def info(store_url: str) -> None:
    """Describe the store at --store (read-only: none is created).

    Exit code 2 if there is no store there, or the URL lacks the store's
    ?blobs= (or names another location): the message gives the URL to use.

    `windvane info --store URL` adds what its streams hold.
    """
    from windvane.ops import info as contents

    with open_store(store_url, read_only=True) as st:
        for line in contents.report_lines(contents.describe(st, streams=False)):
            click.echo(line)


@store.command(short_help="Drop old revisions and unreferenced values, and give the disk back.")
@store_option(alias=True)
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
@click.option(
    "--blob-grace",
    type=Duration(),
    default="1h",
    show_default=True,
    help="With an object store (?blobs=): delete its objects no value uses only once they are older than this. "
    "Uploads of transactions not committed yet are younger: 0 is safe only while no writer runs.",
)
def pack(
    store_url: str,
    keep_days: float | None,
    before: str | None,
    zodb_gc: bool,
    reclaim: bool,
    vacuum: bool,
    schemas_dir: str | None,
    blob_grace: float,
) -> None:
    """Remove the history older than --keep-days (or --before), and values nothing uses,
    then give the disk they took back to the file system.

    Pack removes history for good: say how much to keep, with --keep-days DAYS
    or --before TIME (one of them, exit code 2 without). The states from that
    point on stay readable; older commits can no longer be opened (`arrays
    history` marks them). Works in small batches: writers wait for at most one
    batch, readers never (on MariaDB, statements on a table being rebuilt may
    wait as the rebuild starts and ends, 10 s at most). With an object store
    (?blobs=), last deletes its objects no value uses (see --blob-grace).
    """
    from windvane import neostore

    if vacuum and not reclaim:
        raise BadInput("--vacuum gives space back to the file system: drop --no-reclaim to use it")
    kept_since = _pack_since(keep_days, before)  # bad flags are refused before anything is done
    with open_store(store_url, create=False, blob_grace=blob_grace) as st:
        if schemas_dir is not None:
            _apply_retention(st, schemas_dir)
        since = kept_since()
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
        _pack_report(stats, reclaim, store_url)


def _pack_with_progress(
    st: neostore.Store,
    tid: bytes,
    references: Callable[[bytes], Iterable[bytes]] | None,
    *,
    reclaim: bool,
    vacuum: bool,
) -> PackStats:
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
            elif phase == "blobs":
                bar.label = "deleting the object store's unused objects"
                bar.render_progress()
            else:
                bar.update(n)

        return st.pack(
            tid, references=references, keep=pack_keep(st, tid), reclaim=reclaim, vacuum=vacuum, progress=progress
        )


def _pack_report(stats: PackStats, reclaim: bool, url: str) -> None:
    """What pack removed and what the store takes now (and at what URL, once its object store holds nothing)."""
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
    if stats.blobs is not None:
        b = stats.blobs
        click.echo(
            f"object store: deleted {b.deleted} unused objects ({b.deleted_bytes / 1e6:.1f} MB) of {b.listed}; "
            f"kept {b.referenced} in use, {b.young} younger than the grace, {b.foreign} not the store's"
        )
        if b.location_forgotten:
            from windvane import neostore

            click.echo(
                f"the object store keeps nothing of the store's any more: open it as "
                f"'{neostore.redacted(neostore.with_tier(url, None))}' from now on"
            )


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


def _pack_since(keep_days: float | None, before: str | None) -> Callable[[], float]:
    """The Unix time from which `store pack` keeps history (--keep-days or --before: exactly one of the two).

    --keep-days counts back from when it is asked, after the retention's trims: a pack keeping 0 days drops them too.
    """
    if keep_days is not None and before is None:
        days = keep_days
        return lambda: time.time() - days * 86400
    if keep_days is not None or before is None:
        raise BadInput(
            "say how much history to keep, with one of --keep-days DAYS (every state of the last DAYS "
            "days stays readable; 0 keeps only the latest) or --before TIME (the states before TIME "
            "are removed): pack removes history for good"
        )
    from windvane.export.errors import BadTime
    from windvane.export.times import parse_time

    try:
        before_time = parse_time(before, "--before") / 1e9
    except BadTime as exc:
        raise BadInput(str(exc)) from exc
    return lambda: before_time


@store.command(short_help="Move big values between the database and an object store (S3).")
@store_option(alias=True)
@click.option(
    "--to",
    "to",
    required=True,
    metavar="s3://BUCKET/PREFIX|db",
    help="Where the values go: an object store location, or db to bring every value kept in one back.",
)
@click.option("--endpoint", metavar="URL", help="The S3 service's address when not AWS (as the URL's &endpoint=).")
@click.option(
    "--threshold",
    type=click.IntRange(min=1),
    metavar="BYTES",
    help="With --to s3://...: move values of at least BYTES (as the URL's &blob_threshold=; default 65536).",
)
def tier(store_url: str, to: str, endpoint: str | None, threshold: int | None) -> None:
    """Move the store's values of at least --threshold bytes into the object store --to names,
    or, with --to db, every value kept there back into the database.

    Writers keep running: values move in batches of at most 64 MiB, each
    rewritten under the commit lock for a moment. Killed at any point, every
    value stays readable; run the command again to finish. It ends with the
    URL to open the store with from then on: with
    ?blobs=s3://BUCKET/PREFIX&endpoint=... once values are in an object
    store, without it after --to db. The objects --to db leaves behind are
    deleted by `windvane store pack` given the URL with ?blobs= (see
    --blob-grace); once it leaves none, the store no longer needs ?blobs=.

    \b
    Exit codes: 0 done; 1 the database or the object store failed (run it
    again); 2 a usage problem (bad --to, no store at URL, URL without the
    store's ?blobs= for --to db, or another location than the store's);
    130 interrupted (what was moved stays moved).
    """
    from windvane import neostore

    url = store_url
    out = to != "db"
    if out and "blobs=" in url:
        raise BadInput("--to s3://...: give the location with --to only, not also as the URL's ?blobs=")
    if out:
        from windvane.neostore.blobs import parse_location

        try:
            parse_location(to)
        except neostore.InvalidURLError as exc:
            raise BadInput(f"--to {to!r}: give s3://bucket/prefix or db") from exc
        url = neostore.with_tier(url, to, endpoint, threshold)
    else:
        _require_location(url)  # without the store's ?blobs=, refused with the URL to give
    with _open_for_tier(url, create=False) as st:
        _move(st, out, url)


def _open_for_tier(url: str, **options: Any) -> neostore.Store:
    """The store at ``url``; exit code 2 if there is none or its recorded location is not the URL's."""
    from windvane import neostore

    try:
        return neostore.open(url, **options)
    except (neostore.StoreNotFoundError, neostore.InvalidURLError, neostore.BlobStoreError) as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _require_location(url: str) -> None:
    """--to db: refuse a store that keeps no values in an object store (opening it writable would record one)."""
    from windvane.neostore.blobs import migrate

    with _open_for_tier(url, read_only=True) as st:
        if migrate.recorded_location(st) is None:
            raise BadInput(f"{st.url.display_name} keeps no values in an object store: there is nothing to move back")


def _move(st: neostore.Store, out: bool, url: str) -> None:
    """Run the move under a progress bar of the bytes to move, then say what was done and the URL to use."""
    from windvane import neostore
    from windvane.neostore.blobs import migrate

    count, size = migrate.to_move(st, out)
    where = st.tier.location if st.tier is not None else ""
    label = f"moving {count} values to {where}" if out else f"moving {count} values from {where} to the database"
    try:
        with click.progressbar(length=max(size, 1), label=label, file=None) as bar:
            move = migrate.move_out if out else migrate.move_in
            stats = move(st, progress=bar.update)
    except KeyboardInterrupt:
        from windvane.cli.root import interrupted

        interrupted("interrupted: the values moved so far stay moved; run it again to finish")
    except neostore.NeoStoreError as exc:
        raise click.ClickException(f"{exc} (what was moved stays moved: run it again to finish)") from exc
    click.echo(f"moved {stats.values} values ({stats.bytes / 1e6:.1f} MB stored) in {stats.batches} batches")
    if out:
        click.echo(f"open the store as '{neostore.redacted(url)}' from now on")
    elif stats.location_forgotten:
        click.echo(
            f"no value is kept in {where} any more: open the store as "
            f"'{neostore.redacted(neostore.with_tier(url, None))}' from now on; "
            f"`windvane store pack '{neostore.redacted(url)}' --keep-days DAYS` deletes the objects left there"
        )
