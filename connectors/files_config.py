"""The file readers' defaults (:mod:`connectors.files`), held here once.

Light on purpose (a dataclass only), and beside the package rather than in
it because :mod:`connectors.files` loads pyarrow: the command line reads
these for ``windvane import``'s options and ``--help`` without loading the
readers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where a table row's time comes from (``--time-from``): its time column, the time it is read, its row number.
TIME_FROM = ("column", "arrival", "row")


@dataclass(frozen=True)
class FilesConfig:
    """What a reader is told when ``windvane import`` says nothing else (:class:`connectors.files.ReaderOptions`).

    * ``time_from``: one of :data:`TIME_FROM`.
    * ``row_interval``: ns between rows with ``time_from`` ``row``.
    * ``block_bytes``: the most file bytes a text or WAV reader puts in one part.
    * ``kept_bytes``: the most bytes of parsed tables the CSV reader's type pass keeps for the parts, so
      that a new stream's file is parsed once; blocks past them are parsed again.
    """

    time_from: str = TIME_FROM[0]
    row_interval: int = 1_000_000_000
    block_bytes: int = 16 << 20
    kept_bytes: int = 256 << 20
