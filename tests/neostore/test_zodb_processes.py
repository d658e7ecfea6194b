"""Two OS processes on one database through ZODB: invalidations by polling, conflicts.

Each worker is a separate Python process running ``ZODB.DB(ZODBStorage(url))``
and obeying one JSON command per line on stdin (answering one JSON line on
stdout), so the test decides exactly when each process reads, writes and
starts a new transaction. Nothing is shared but the database.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPLY_TIMEOUT = 60.0


# -- the worker process -------------------------------------------------------------


def worker_main(url: str) -> None:
    """Run in the child: open the database, then obey commands until stdin closes."""
    import transaction
    import ZODB
    from BTrees.Length import Length
    from persistent.mapping import PersistentMapping
    from ZODB.POSException import ConflictError

    from windvane import neostore

    db = ZODB.DB(neostore.ZODBStorage(url))
    conn = db.open()
    root = conn.root()

    def run(command: str, *args: Any) -> Any:
        if command == "init":  # an item and a counter
            root["item"] = PersistentMapping(value=args[0])
            root["counter"] = Length(0)
            transaction.commit()
        elif command == "read":  # through the connection's cache
            return root["item"]["value"]
        elif command == "count":
            return root["counter"]()
        elif command == "write":  # no commit
            root["item"]["value"] = args[0]
        elif command == "add":  # no commit
            root["counter"].change(args[0])
        elif command == "commit":
            try:
                transaction.commit()
            except ConflictError as exc:
                transaction.abort()
                return type(exc).__name__
            return "committed"
        elif command == "begin":
            transaction.begin()
        elif command == "sync":
            conn.sync()
        else:
            raise ValueError(f"unknown command {command!r}")
        return None

    try:
        for line in sys.stdin:
            command, *args = json.loads(line)
            print(json.dumps(run(command, *args)), flush=True)
    finally:
        conn.close()
        db.close()


# -- the test side -----------------------------------------------------------------------


class Worker:
    """A child process holding a ZODB connection on ``url``."""

    def __init__(self, url: str, name: str):
        self.name = name
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from tests.neostore.test_zodb_processes import worker_main; worker_main({url!r})"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def __call__(self, command: str, *args: Any) -> Any:
        self.proc.stdin.write(json.dumps([command, *args]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            self.stderr.seek(0)
            errors = self.stderr.read().decode(errors="replace")
            pytest.fail(f"worker {self.name} gave no answer to {command}{list(args)}:\n{errors}")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=REPLY_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.stderr.seek(0)
        errors = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        assert code == 0, f"worker {self.name} exited with {code}:\n{errors}"


@pytest.fixture(params=["sqlite", "mariadb"])
def workers(request):
    """Two worker processes, A and B, on one fresh database of each backend."""
    url = request.getfixturevalue(f"{request.param}_url")
    a = Worker(url, "A")
    a("init", 1)
    b = Worker(url, "B")
    yield a, b
    b.close()
    a.close()


def test_commit_in_one_process_is_seen_by_the_other(workers) -> None:
    a, b = workers
    assert b("read") == 1  # B now has the item in its cache

    a("write", 2)
    assert a("commit") == "committed"

    # B's transaction began before A's commit: it keeps its consistent view.
    assert b("read") == 1
    b("begin")  # polling delivers A's invalidation
    assert b("read") == 2

    a("write", 3)
    assert a("commit") == "committed"
    b("sync")  # Connection.sync() starts a new transaction too
    assert b("read") == 3


def test_concurrent_conflicting_update_raises_conflict_error(workers) -> None:
    a, b = workers
    assert a("read") == b("read") == 1

    a("write", 10)
    b("write", 20)
    assert a("commit") == "committed"
    assert b("commit") == "ConflictError"

    b("begin")
    assert b("read") == 10  # the winner's value; B may retry from here
    b("write", 20)
    assert b("commit") == "committed"
    a("begin")
    assert a("read") == 20


def test_concurrent_resolvable_update_resolves(workers) -> None:
    a, b = workers
    assert a("count") == b("count") == 0

    a("add", 1)
    b("add", 2)
    assert a("commit") == "committed"
    assert b("commit") == "committed"  # BTrees.Length resolves the conflict

    a("begin")
    b("begin")
    assert a("count") == b("count") == 3
