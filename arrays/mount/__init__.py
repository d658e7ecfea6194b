"""Streams as files: a read-only FUSE file system whose files hold a column's raw values at a snapshot.

``DIR/@<tid>/<stream>/<column>`` holds the column's values as a C-ordered
little-endian array, ``<column>.json`` beside it its dtype, shape and
chunking; ``DIR/head`` is the newest snapshot. A ``@<tid>`` file never
changes, so every process that maps it shares the kernel's page cache of it.
"""
