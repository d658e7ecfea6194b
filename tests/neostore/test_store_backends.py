"""Backends say what they can do by named capabilities; neostore asks those, never which engine it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from windvane import neostore
from windvane.neostore.backends import Backend

CAPABILITIES = {"single_writer", "greatest", "insert_ignore", "uint_type", "drop_temporary_table"}


def test_a_backend_that_leaves_a_capability_out_cannot_be_made():
    class Third(Backend):
        """A third engine that implements every method but states none of the capabilities."""

        kind = "third"
        connect = begin = create_schema = acquire_commit_lock = release_commit_lock = has_table = disk_size = (
            reclaim
        ) = close_connection = take_lease = lambda self, *args, **kw: None

    with pytest.raises(TypeError, match="abstract") as missing:
        Third()
    assert set(re.findall(r"\w+", str(missing.value).split("abstract method")[-1])) >= CAPABILITIES

    class Stated(Third):
        single_writer, greatest, insert_ignore = False, "GREATEST", "INSERT IGNORE"
        uint_type, drop_temporary_table = "NUMERIC(20)", "DROP TABLE"

    assert Stated().single_writer is False


def test_the_engines_state_their_capabilities(store_url):
    with neostore.open(store_url) as store:
        backend = store.backend
        expected = {
            "sqlite": (True, "MAX", "INSERT OR IGNORE", "BIGINT", "DROP TABLE"),
            "mariadb": (False, "GREATEST", "INSERT IGNORE", "BIGINT UNSIGNED", "DROP TEMPORARY TABLE"),
        }[backend.kind]
        assert (
            backend.single_writer,
            backend.greatest,
            backend.insert_ignore,
            backend.uint_type,
            backend.drop_temporary_table,
        ) == expected


def test_a_name_bound_under_the_commit_lock_lives_or_dies_with_the_transaction_as_single_writer_says(store_url):
    """One writer: the binding is made inside the lock holder's transaction, and its abort undoes it.
    Several writers: it commits on a connection of its own and stays."""
    with neostore.open(store_url) as store, neostore.open(store_url) as other:
        txn = store.begin()
        txn.lock()
        bound = store.oids_for([b"made/under/lock"], create=True)
        txn.abort()
        seen = other.oids_for([b"made/under/lock"])
        assert seen == ({} if store.backend.single_writer else bound)
        # Either way a name bound afresh is usable: the next transaction writes it.
        oid = store.oids_for([b"made/under/lock"], create=True)[b"made/under/lock"]
        txn = store.begin()
        txn.write(oid, None, b"value")
        txn.commit()
        assert [r.name for r in other.list_names(b"made/")] == [b"made/under/lock"]


def test_gc_pack_makes_and_drops_its_mark_table_in_the_engines_spelling(store_url):
    with neostore.open(store_url) as store:
        root, kept, lost = neostore.p64(0), store.new_oid(), store.new_oid()
        txn = store.begin()
        txn.write(root, None, kept)
        txn.write(kept, None, b"kept")
        txn.write(lost, None, b"unreachable")
        tid = txn.commit()
        stats = store.pack(tid, references=lambda value: [value] if len(value) == 8 else [])
        assert stats.objects_collected == 1
        assert store.load(kept)[0] == b"kept"
        with pytest.raises(neostore.POSKeyError):
            store.load(lost)
        # Dropped again: a second pack makes it anew.
        assert store.pack(tid, references=lambda value: [value] if len(value) == 8 else []).objects_collected == 0


def test_no_neostore_module_branches_on_the_engines_name():
    source = Path(neostore.__file__).parent
    branches = [
        f"{path.name}:{number}"
        for path in sorted(source.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.kind\s*[!=]=|kind\s+in\s", line)
    ]
    assert branches == []
