"""What arrays and streams are opened on (a URL, a Store or a Transaction), and closing what they opened."""

from __future__ import annotations

from windvane import neostore

from .errors import ArrayError
from .transaction import Transaction

#: A store URL, a Store, or an open Transaction to join.
Target = str | neostore.Store | Transaction


def resolve(target: Target, *, create: bool = False) -> tuple[neostore.Store, Transaction | None, bool]:
    """``(store, transaction, owns_store)`` for a URL, a Store or a Transaction.

    A URL's store is created only if ``create`` (for what makes arrays); otherwise
    neostore.StoreNotFoundError if there is none.
    """
    if isinstance(target, Transaction):
        if target.state != "open":
            raise ArrayError(f"the transaction is {target.state}; start a new one with arrays.transaction")
        return target.store, target, False
    if isinstance(target, neostore.Store):
        return target, None, False
    if isinstance(target, str):
        return neostore.open(target, create=create), None, True
    raise TypeError(f"expected a store URL, a neostore.Store or an arrays.Transaction, not {type(target).__name__}")


def previous(before: bytes) -> neostore.Tid:
    """The tid just before the snapshot bound ``before``: the last commit it shows."""
    return neostore.Tid(neostore.p64(neostore.u64(before) - 1))


class StoreHandle:
    """The Store an array or a stream reads, and whether closing it is theirs: a Store they opened from a
    URL closes with them; a given Store or Transaction stays open."""

    def __init__(self, store: neostore.Store, *, owns: bool):
        self.store = store
        self._owns = owns

    def close(self) -> None:
        """Close the store if it was opened from a URL; safe to call more than once."""
        if self._owns:
            self._owns = False
            self.store.close()
