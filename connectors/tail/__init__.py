"""``windvane tail``: follow a growing log file into a stream, across rotations, resuming exactly.

:mod:`.follow` reads whole lines and knows where it stands (file identity,
offset); :mod:`.run` parses them with the log formats of
:mod:`connectors.files.logs` and hands them, with that position, to a
commit function the command line wires to the import engine, which stores
rows and position in one transaction.
"""
