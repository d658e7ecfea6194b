"""Every error neostore raises is a neostore.NeoStoreError, and those with a ZODB meaning stay ZODB's too."""

from __future__ import annotations

import inspect
import shutil
import sqlite3

import pytest
import transaction
import ZODB
from transaction.interfaces import TransientError
from ZODB import POSException
from ZODB.Connection import TransactionMetaData
from ZODB.tests.MinPO import MinPO

import windvane.neostore.errors
import windvane.ops.mariadb_server
from windvane import neostore
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
    """Every exception class neostore and its errors module export."""
    found = {}
    for module in (neostore, neostore.errors):
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            value = getattr(module, name)
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("windvane.neostore")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_exported_exception_is_a_neostore_error():
    classes = exported_exceptions()
    # The list is not empty by accident: the ZODB ones are in it.
    assert set(ZODB_MEANINGS) <= set(classes.values())
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


def test_the_mariadb_server_managers_errors_have_their_own_root():
    """Running a MariaDB server is an operations task, not the store's: its errors are OpsErrors."""
    from windvane.ops.errors import OpsError

    server = windvane.ops.mariadb_server
    errors = [
        value
        for value in vars(server).values()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__.startswith("windvane.ops")
    ]
    assert server.ServerError in errors and len(errors) > 1
    assert all(issubclass(cls, OpsError) for cls in errors)


def test_a_database_gone_under_an_open_store_raises_storage_unavailable(tmp_path):
    """A store whose file vanished (its directory removed) raises StorageUnavailableError naming the file,
    from reads, writes and oid allocation alike; the transaction it ended is aborted."""
    folder = tmp_path / "gone"
    folder.mkdir()
    path = folder / "store.db"
    store = neostore.open(f"sqlite:///{path}")
    try:
        shutil.rmtree(folder)  # the file, its write-ahead log and its lock file, between two calls
        with pytest.raises(neostore.StorageUnavailableError, match=f"{path}: unable to open database file"):
            store.load(p64(1))
        txn = store.begin()
        txn.write(p64(1), None, b"value")
        with pytest.raises(neostore.StorageUnavailableError, match=str(path)):
            txn.commit()
        assert txn.state == "aborted"
        with pytest.raises(neostore.StorageUnavailableError, match=str(path)):
            store.new_oid()
    finally:
        store.close()


def test_a_driver_error_on_an_open_connection_names_the_operation_and_the_store(sqlite_url):
    """A driver's error escaping a Store or a Transaction method is a DatabaseError naming the method and
    where the store is, the driver's error its cause: here the store's tables dropped under it."""
    with neostore.open(sqlite_url) as store:
        oid = store.new_oid()
        txn = store.begin()
        txn.write(oid, None, b"value")
        txn.commit()
        assert store.load(oid)[0] == b"value"  # this thread's reader is open
        path = store.backend.location
        dropper = sqlite3.connect(path)
        dropper.executescript("DROP TABLE obj; DROP TABLE data;")
        dropper.close()
        with pytest.raises(neostore.StorageUnavailableError) as raised:
            store.load(oid)
        assert isinstance(raised.value, neostore.DatabaseError)
        assert str(raised.value) == f"Store.load failed on {path}: OperationalError: no such table: obj"
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        txn = store.begin()
        txn.write(oid, None, b"other")
        with pytest.raises(neostore.StorageUnavailableError, match=f"^Transaction.commit failed on {path}: "):
            txn.commit()
        assert txn.state == "aborted"


def test_an_error_through_a_public_method_is_freed_without_the_cycle_collector(sqlite_url):
    """The frames of a failed call (their cursors included) go when the error goes, in the thread that
    drops it: left to the cyclic collector, a MariaDB cursor would be finalised in whatever thread it
    runs, on a connection another thread may be using by then."""
    import gc
    import weakref

    with neostore.open(sqlite_url) as store:
        oid = store.new_oid()
        first = store.begin()
        first.write(oid, None, b"first")
        first.commit()
        stale = store.begin()
        stale.write(oid, None, b"second")  # expects no revision yet: a conflict
        gc.collect()
        gc.disable()
        try:
            try:
                stale.commit()
            except neostore.ConflictError as exc:
                error = weakref.ref(exc)
            assert error() is None
        finally:
            gc.enable()
