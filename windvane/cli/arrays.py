"""`windvane arrays`: the arrays a store holds and their commits."""

from __future__ import annotations

import click

from windvane.cli.root import BadInput, cli, open_store, store_option


@cli.group(name="arrays")
def arrays_group() -> None:
    """Look at the chunked arrays a store holds (read-only: exit code 2 if there is no store at --store).

    The store is --store URL (or WINDVANE_STORE); a URL given before the
    other arguments, as in `windvane arrays ls URL`, is the same.
    """


@arrays_group.command(name="ls", short_help="List the arrays, with shape, type and chunks.")
@store_option(alias=True)
@click.argument("prefix", default="")
def list_arrays(store_url: str, prefix: str) -> None:
    """List the arrays whose names start with PREFIX (all by default)."""
    from windvane import arrays

    with open_store(store_url, read_only=True) as st:
        names = arrays.array_names(st, prefix)
        if not names:
            click.echo(f"no arrays{' under ' + repr(prefix) if prefix else ''}")
        for name in names:
            with arrays.open(st, name) as a:
                shape = "x".join(map(str, a.shape))
                chunks = "x".join(map(str, a.chunks))
                codec = "+".join(c["name"] for c in a.codec)
                click.echo(
                    f"{name}  {shape} {arrays.dtype_name(a.dtype)}  chunks {chunks}  {codec}  {a.nbytes:,} bytes"
                )


@arrays_group.command(short_help="List the commits that changed an array.")
@store_option(alias=True)
@click.argument("name", required=False, metavar="NAME")
def history(store_url: str, name: str | None) -> None:
    """List the commits that changed array NAME, oldest first: tid, time, message.

    A commit older than the store's last pack ends with "(packed: cannot be
    opened)": pack removed the state it left.
    """
    from windvane import arrays

    if name is None:
        raise click.UsageError("Missing argument 'NAME': the array whose commits to list.")
    with open_store(store_url, read_only=True) as st:
        try:
            commits = arrays.history(st, name)
        except arrays.ArrayNotFoundError as exc:
            raise BadInput(str(exc)) from exc
        for c in commits:
            meta = f"  {c.metadata}" if c.metadata else ""
            packed = "" if c.openable else "  (packed: cannot be opened)"
            click.echo(f"0x{c.tid.hex()}  {c.time:%Y-%m-%d %H:%M:%S.%f} UTC  {c.message}{meta}{packed}")
