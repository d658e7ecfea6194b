"""`windvane export`: a stream to Parquet, Arrow, CSV, zarr or netCDF."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from windvane.cli.root import STORE_OPTION, BadInput, cli, interrupted

if TYPE_CHECKING:
    from windvane.export.run import ExportResult


@cli.command(
    name="export", short_help="Export a stream to Parquet, Arrow, CSV, zarr or netCDF; incremental with --job."
)
@click.argument("stream")
@STORE_OPTION
@click.option(
    "--to",
    "target",
    required=True,
    metavar="PATH",
    help="The file to write (a directory for zarr); with --job, the directory of its part files.",
)
@click.option(
    "--format",
    "format_name",
    required=True,
    metavar="FORMAT",
    help="parquet, arrow (IPC file), csv, zarr (v3 directory) or netcdf (netCDF-4).",
)
@click.option(
    "--start",
    default=None,
    metavar="TIME",
    help="Only rows at or after TIME: ISO 8601 (no zone means UTC) or epoch seconds.",
)
@click.option("--stop", default=None, metavar="TIME", help="Only rows before TIME.")
@click.option(
    "--at",
    default=None,
    metavar="TIME|TID",
    help="Export the stream as it was then: what had been committed at TIME (ISO 8601, no zone means UTC, or "
    "epoch seconds), or as commit TID left it (0x and 16 hex digits, as windvane prints tids). Not with --job.",
)
@click.option(
    "--job",
    default=None,
    metavar="NAME",
    help="Incremental: export the rows committed since job NAME's last run, as a new part file in --to.",
)
@click.option("--overwrite", is_flag=True, help="Replace --to if it exists (without --job).")
@click.option("--quarantine", is_flag=True, help="Export the stream's quarantine stream (rejected records).")
def export_stream(
    stream: str,
    store_url: str,
    target: str,
    format_name: str,
    start: str | None,
    stop: str | None,
    at: str | None,
    job: str | None,
    overwrite: bool,
    quarantine: bool,
) -> None:
    """Export STREAM from one snapshot (the newest commit when it starts, or --at's), block by block, in bounded memory.

    With --job, each run writes the rows committed since the job's last run
    to part-<first row>-<stop row>.<ext> in --to, exactly once even if a run
    is killed (the next run rewrites the part it left unfinished); the job's
    state is kept in the store.
    """
    from windvane import export as exporting
    from windvane import neostore

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=max(total, 1), label=f"exporting {stream}", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        result = exporting.export(
            store_url,
            stream,
            target,
            format_name,
            start=start,
            stop=stop,
            at=at,
            job=job,
            overwrite=overwrite,
            quarantine=quarantine,
            progress=progress,
        )
    except exporting.ExportError as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        interrupted("interrupted: no file was left half-written; with --job, run it again to finish")
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    click.echo(_export_summary(result))


def _export_summary(result: ExportResult) -> str:
    """One line: rows, raw and written bytes, MB/s, files; for a job, the rows it covered."""
    if result.job is not None and not result.files and result.redone is None and result.first_row == result.stop_row:
        return f"job {result.job}: nothing new in stream {result.stream} since row {result.stop_row:,}"
    where = ", ".join(result.files) or "none (no row in the time range)"
    line = (
        f"exported {result.rows:,} rows of {result.stream} ({result.nbytes / 1e6:.1f} MB raw, "
        f"{result.file_bytes / 1e6:.1f} MB written) in {result.seconds:.1f} s ({result.mbps:.1f} MB/s) "
        f"to {len(result.files)} file{'s' if len(result.files) != 1 else ''}: {where}"
    )
    if result.job is not None:
        line += f"; job {result.job}: rows {result.first_row:,} to {result.stop_row:,}"
        if result.redone is not None:
            line += f", after redoing rows {result.redone[0]:,} to {result.redone[1]:,} an interrupted run left"
    return line
