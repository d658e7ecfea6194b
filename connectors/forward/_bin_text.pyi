def as_str(entries: bytes | bytearray | memoryview, /) -> bytes:
    """A copy of ``entries`` (an array header, then PackedForward ``[time, record]`` entries) with every bin
    header of the records' names and values turned into its str twin; ValueError naming why if they are not
    entries of flat records."""
