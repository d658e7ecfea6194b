"""windvane: industrial big-data ingestion into chunked arrays on a deduplicating, history-preserving store.

The library is in the subpackages, each importable on its own:
``windvane.neostore`` (the object store), ``windvane.arrays`` (streams as
chunked arrays), ``windvane.ingest`` (validation, batching, durable commits),
``windvane.connectors`` (Forward, HTTP, MQTT, files) and ``windvane.export``.
``windvane.cli`` is the ``windvane`` command and ``windvane.ops`` what it runs
beside the library (a private MariaDB server, the demo, store reports).
Importing this package imports none of them.
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Run the ``windvane`` command line (the console script's entry point); see ``windvane --help``."""
    from windvane.cli import main as run

    run()
