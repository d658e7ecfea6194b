"""Every error neostore raises is a neostore.NeoStoreError, and those with a ZODB meaning stay ZODB's too."""

from __future__ import annotations

import inspect

import pytest
import transaction
import ZODB
from transaction.interfaces import TransientError
from ZODB import POSException
from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO

from windvane import neostore
import windvane.neostore.errors
import windvane.ops.mariadb_server
from windvane.neostore import p64

#: neostore's exceptions that ZODB (or ``transaction``) catches by its own class, and that class.
ZODB_MEANINGS = {
    neostore.ConflictError: POSException.ConflictError,
    neostore.ReadConflictError: POSException.ReadConflictError,
    neostore.POSKeyError: POSException.POSKeyError,
    neostore.ReadOnlyError: POSException.ReadOnlyError,
    neostore.UndoError: POSException.UndoError,
    neostore.Unsupported: POSException.Unsupported,
    neostore.TransactionError: POSException.StorageTransactionError,
    neostore.CommitLockTimeout: POSException.StorageError,
    neostore.CorruptDataError: POSException.StorageError,
    neostore.TransientDatabaseError: TransientError,
}


def exported_exceptions() -> dict[str, type]:
    """Every exception class neostore, its errors module and its server module export."""
    found = {}
    for module in (neostore, neostore.errors, windvane.ops.mariadb_server):
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException) and \
                    value.__module__.startswith("neostore"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exported_exception_is_a_neostore_error():
    classes = exported_exceptions()
    # The list is not empty by accident: the ZODB ones and the server's are in it.
    assert set(ZODB_MEANINGS) <= set(classes.values())
    assert windvane.ops.mariadb_server.ServerError in classes.values()
    assert [name for name, cls in classes.items() if not issubclass(cls, neostore.NeoStoreError)] == []


@pytest.mark.parametrize("ours, zodbs", list(ZODB_MEANINGS.items()), ids=lambda c: c.__name__)
def test_zodb_errors_stay_what_zodb_catches(ours, zodbs):
    assert issubclass(ours, zodbs) and issubclass(ours, neostore.NeoStoreError)


def test_conflicts_are_transient_so_transaction_retries_them():
    assert issubclass(neostore.ConflictError, TransientError)
    assert issubclass(neostore.ReadConflictError, TransientError)


def test_a_store_raises_neostore_errors_that_zodb_code_catches(sqlite_url):
    with neostore.open(sqlite_url) as store:
        oid = store.new_oid()
        with pytest.raises(neostore.NeoStoreError) as missing:
            store.load(oid)
        assert isinstance(missing.value, POSException.POSKeyError) and isinstance(missing.value, KeyError)

        first = store.begin()
        first.write(oid, None, b"one")
        first.vote()
        serial = first.finish()
        stale = store.begin()
        stale.write(oid, None, b"two")  # expects a new object: it exists now
        with pytest.raises(neostore.NeoStoreError) as conflict:
            stale.vote()
        assert isinstance(conflict.value, POSException.ConflictError)
        assert (conflict.value.oid, conflict.value.serials) == (oid, (serial, p64(0)))

        watcher = store.begin()
        watcher.check_current(oid, serial)
        changer = store.begin()
        changer.write(oid, serial, b"three")
        changer.vote()
        changer.finish()
        watcher.write(store.new_oid(), None, b"other")
        with pytest.raises(neostore.NeoStoreError) as read_conflict:
            watcher.vote()
        assert isinstance(read_conflict.value, POSException.ReadConflictError)
        assert read_conflict.value.oid == oid

        undoer = store.begin()
        with pytest.raises(neostore.NeoStoreError, match="no transaction 0x00000000000000ff to undo") as undo:
            undoer.undo(p64(255))
        assert isinstance(undo.value, POSException.UndoError)
        undoer.abort()

        txn = store.begin()
        with pytest.raises(neostore.InvalidOidError, match="beyond the 63-bit range") as far:
            txn.write(b"\xff" * 8, None, b"x")
        assert isinstance(far.value, ValueError)
        with pytest.raises(neostore.InvalidNameError, match="the limit is 767") as long_name:
            store.oids_for([b"n" * 768], create=True)
        assert isinstance(long_name.value, ValueError)
        with pytest.raises(neostore.InvalidNameError, match="needs a non-empty suffix"):
            store.names_ending(b"")
        txn.abort()

    with neostore.open(sqlite_url, read_only=True) as reader:
        with pytest.raises(neostore.NeoStoreError) as read_only:
            reader.begin()
        assert isinstance(read_only.value, POSException.ReadOnlyError)
    with pytest.raises(neostore.InvalidOptionError, match="zstd level must be between -7 and 22") as level:
        neostore.open(sqlite_url, compression_level=99)
    assert isinstance(level.value, ValueError)


def test_the_zodb_storage_raises_neostore_errors(sqlite_url):
    storage = neostore.ZODBStorage(sqlite_url)
    db = ZODB.DB(storage)
    try:
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        with pytest.raises(neostore.Unsupported, match="versions are not supported"):
            storage.store(storage.new_oid(), None, b"x", "a version", txn)
        with pytest.raises(neostore.TransactionError) as out_of_order:
            storage.store(storage.new_oid(), None, b"x", "", object())
        assert isinstance(out_of_order.value, POSException.StorageTransactionError)
        storage.tpc_abort(txn)

        # A conflict ZODB's resolution gives up on (MinPO cannot resolve) reaches the caller as neostore's.
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1, c2 = db.open(tm1), db.open(tm2)
        c1.root()["a"] = MinPO(1)
        tm1.commit()
        tm2.begin()
        c2.root()["a"].value = 2
        c1.root()["a"].value = 3
        tm1.commit()
        with pytest.raises(POSException.ConflictError) as conflict:
            tm2.commit()
        assert isinstance(conflict.value, neostore.ConflictError)
        assert conflict.value.oid == c1.root()["a"]._p_oid
        assert conflict.value.class_name == "ZODB.tests.MinPO.MinPO"
        tm2.abort()
        c1.close()
        c2.close()
    finally:
        db.close()
    read_only = neostore.ZODBStorage(sqlite_url, read_only=True)
    try:
        with pytest.raises(neostore.ReadOnlyError):
            read_only.tpc_begin(TransactionMetaData())
    finally:
        read_only.close()
