"""A separate process racing on ``ZarrStore.set_if_not_exists``, for tests/arrays/test_zarr_store.py.

Run as ``python -m tests.arrays.zarr_store_worker URL NAME KEYS`` from the repo
root. It opens the store, prints ``ready``, waits for a ``go`` line on stdin
(so all racers start together), then for each key ``race/0`` ...
``race/KEYS-1`` calls ``set_if_not_exists`` with the value ``NAME`` and
prints ``done``. (No ``test_`` prefix: pytest must not collect it.)
"""

from __future__ import annotations

import sys

from zarr.core.buffer import cpu
from zarr.core.sync import sync

from windvane.arrays.zarr_store import ZarrStore


def main(url: str, name: str, keys: int) -> None:
    store = sync(ZarrStore.open(url))
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    value = cpu.Buffer.from_bytes(name.encode())
    for i in range(keys):
        sync(store.set_if_not_exists(f"race/{i}", value))
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
