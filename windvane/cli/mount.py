"""`windvane mount`: a store's streams as files of raw column values, for numpy.memmap."""

from __future__ import annotations

import os

import click

from windvane.cli.root import BadInput, cli, open_store


@cli.command(short_help="Serve a store's columns as files (FUSE), until unmounted.")
@click.argument("store_url")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
def mount(store_url: str, directory: str) -> None:
    """Serve STORE_URL's streams under DIRECTORY, read-only, until it is unmounted (umount DIRECTORY).

    DIRECTORY/@<tid>/<stream>/<column> holds the column's values at commit
    <tid> as a C-ordered little-endian array, <column>.json its dtype and
    shape; DIRECTORY/head is the newest commit. A @<tid> file never changes:
    every process that maps it shares one page cache. Exit code 2 if FUSE or
    pyfuse3 is missing here, or there is no store.
    """
    if not os.path.exists("/dev/fuse"):
        raise BadInput("this machine has no /dev/fuse: load the fuse module, or give the container the device")
    try:
        from windvane.arrays.mount.server import serve
    except ImportError as exc:
        raise BadInput(
            f"pyfuse3 cannot be imported ({exc}): apt-get install fuse3 libfuse3-dev; pip install pyfuse3"
        ) from None
    from windvane.arrays.mount.tree import Snapshots

    os.makedirs(directory, exist_ok=True)
    with open_store(store_url, read_only=True) as store:
        snapshots = Snapshots(store)
        try:
            serve(snapshots, directory)
        finally:
            snapshots.close()
