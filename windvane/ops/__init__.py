"""Running windvane rather than being it: the private MariaDB server manager, the demo and the store report.

Nothing under ``windvane.neostore``, ``arrays``, ``ingest``, ``connectors``
or ``export`` imports this package; the command line and the tests do.
"""
