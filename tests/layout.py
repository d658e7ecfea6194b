"""The repository's root folders that are installed as ``windvane.<folder>``: one list for the checks that need it."""

#: Each is imported as ``windvane.<folder>``, never by its bare name.
LIBRARY = ("connectors", "ingest", "export", "arrays", "neostore", "parsers", "console")
