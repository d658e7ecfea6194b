"""`windvane mount`: a store's streams and arrays as files of raw values, for numpy.memmap."""

from __future__ import annotations

import logging
import os

import click

from windvane.cli.root import BadInput, cli, open_store, store_option


# The mount's modules load numpy and the store: imported when the command runs, so that `windvane --help`
# starts without them; the options' defaults are MountConfig's, applied there.
@cli.command(short_help="Serve a store's columns and arrays as files (FUSE), until unmounted.")
@store_option(alias=True)
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option(
    "--poll",
    type=click.FloatRange(min=0.01),
    default=None,
    help="Seconds between looks at the store's last commit: how far head may lag behind a commit "
    "(default: the mount config's).",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds after which a @<tid> directory nobody looked at is dropped from the kernel's cache "
    "(default: the mount config's).",
)
def mount(store_url: str, directory: str | None, poll: float | None, idle: float | None) -> None:
    """Serve STORE_URL's streams and arrays under DIRECTORY, read-only, until it is unmounted (umount DIRECTORY).

    \b
    DIRECTORY/@<tid>/<stream>/<column>     a column's values at commit <tid>
    DIRECTORY/@<tid>/arrays/<array path>   a plain BigArray's values (found by path, not listed)
    DIRECTORY/head/...                     the same at the newest commit

    Each file is a C-ordered little-endian array; <file>.json beside it holds
    its dtype, shape and chunking. A @<tid> file never changes: every process
    that maps it shares one page cache. Text and bytes columns have no file.

    Exit code 2 if FUSE is missing here (no /dev/fuse, no permission to open
    it, pyfuse3 not installed): the message names what is missing; read the
    data with BigArray.blocks() or dask instead. Exit code 2 too if there is
    no store.
    """
    from windvane.arrays.mount.client import FALLBACK, fuse_missing
    from windvane.arrays.mount.config import MountConfig

    if directory is None:
        raise BadInput("give the directory to serve the store under: windvane mount --store URL DIRECTORY")
    missing = fuse_missing()
    if missing is not None:
        raise BadInput(f"FUSE is missing: {missing}; {FALLBACK}")
    from windvane.arrays.mount.server import serve
    from windvane.arrays.mount.tree import Snapshots

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.makedirs(directory, exist_ok=True)
    with open_store(store_url, read_only=True) as store:
        snapshots = Snapshots(store)
        try:
            defaults = MountConfig()
            config = MountConfig(
                poll=defaults.poll if poll is None else poll, idle=defaults.idle if idle is None else idle
            )
            serve(snapshots, directory, config)
        finally:
            snapshots.close()
