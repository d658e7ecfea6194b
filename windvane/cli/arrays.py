"""`windvane arrays`: the arrays a store holds and their commits."""

from __future__ import annotations

import click

from windvane.cli.root import STORE_URL, BadInput, cli, open_store


@cli.group(name="arrays")
def arrays_group() -> None:
    """Look at the chunked arrays a store holds (read-only: exit code 2 if there is no store at URL)."""


@arrays_group.command(name="ls", short_help="List the arrays, with shape, type and chunks.")
@STORE_URL
@click.argument("prefix", default="")
def list_arrays(url: str, prefix: str) -> None:
    """List the arrays whose names start with PREFIX (all by default)."""
    from windvane import arrays

    with open_store(url, read_only=True) as st:
        names = arrays.array_names(st, prefix)
        if not names:
            click.echo(f"no arrays{' under ' + repr(prefix) if prefix else ''}")
        for name in names:
            with arrays.open(st, name) as a:
                shape = "x".join(map(str, a.shape))
                chunks = "x".join(map(str, a.chunks))
                codec = "+".join(c["name"] for c in a.codec)
                click.echo(f"{name}  {shape} {a.dtype}  chunks {chunks}  {codec}  {a.nbytes:,} bytes")


@arrays_group.command(short_help="List the commits that changed an array.")
@STORE_URL
@click.argument("name")
def history(url: str, name: str) -> None:
    """List the commits that changed array NAME, oldest first: tid, time, message.

    A commit older than the store's last pack ends with "(packed: cannot be
    opened)": pack removed the state it left.
    """
    from windvane import arrays

    with open_store(url, read_only=True) as st:
        try:
            commits = arrays.history(st, name)
        except arrays.ArrayNotFoundError as exc:
            raise BadInput(str(exc)) from exc
        for c in commits:
            meta = f"  {c.metadata}" if c.metadata else ""
            packed = "" if c.openable else "  (packed: cannot be opened)"
            click.echo(f"0x{c.tid.hex()}  {c.time:%Y-%m-%d %H:%M:%S.%f} UTC  {c.message}{meta}{packed}")
