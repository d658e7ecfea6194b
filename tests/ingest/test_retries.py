"""What a failed commit means for a lone submission, decided by asking the store it commits to: a database
failing for now fails the submission (its sender sends again), an error the same bytes meet again has its
events salvaged into quarantine."""

import asyncio
import sqlite3

from windvane import neostore
from windvane.ingest.errors import CommitFailed
from windvane.ingest.observer import CommitObserver
from windvane.ingest.retries import Retries
from windvane.ingest.submission import Submission


def _error_of(conn: sqlite3.Connection, sql: str) -> sqlite3.Error:
    """The driver's error ``sql`` raises on ``conn`` (it must raise)."""
    try:
        conn.execute(sql)
    except sqlite3.Error as exc:
        return exc
    raise AssertionError(f"{sql!r} did not fail")


def test_a_locked_database_fails_the_submission_a_syntax_error_salvages_it(sqlite_url):
    loop = asyncio.new_event_loop()
    failed: list[tuple[list[Submission], Exception]] = []
    with neostore.open(sqlite_url) as store:
        retries = Retries(CommitObserver(), lambda group, error: failed.append((group, error)), store)
        holder = sqlite3.connect(store.url.path, isolation_level=None)
        other = sqlite3.connect(store.url.path, timeout=0, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            locked = _error_of(other, "INSERT INTO config (name, value) VALUES ('spare', '1')")
            holder.execute("ROLLBACK")
            syntax = _error_of(other, "SELEC 1")
        finally:
            holder.close()
            other.close()
        assert retries.store_failure(locked) and not retries.store_failure(syntax)

        item = Submission((), None, 0, loop.create_future())
        assert retries.failed([item], locked) == []
        assert item.salvage is None
        assert [(group, type(error)) for group, error in failed] == [([item], CommitFailed)]
        assert "the store could not commit" in str(failed[0][1]) and "locked" in str(failed[0][1])

        failed.clear()
        item = Submission((), None, 0, loop.create_future())
        assert retries.failed([item], syntax) == [item]  # once more, its events to quarantine
        assert item.salvage is not None and "OperationalError" in item.salvage and "syntax" in item.salvage
        assert failed == []
    loop.close()
