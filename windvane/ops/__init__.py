"""Running windvane rather than being it: the private MariaDB server manager, the demo and the store report.

Nothing under ``windvane.neostore``, ``arrays``, ``ingest``, ``connectors``
or ``export`` imports this package; the command line and the tests do.

The MariaDB server manager is :mod:`.mariadb_server` (:class:`~.mariadb_server.MariaDBServer`),
built of :mod:`.mariadb_config` (the option file), :mod:`.mariadb_install` (a new data
directory), :mod:`.mariadb_programs` (finding mariadbd), :mod:`.mariadb_processes` (pids and
signals), :mod:`.mariadb_ready` (waiting for a start) and :mod:`.mariadb_logs`; its errors are
in :mod:`.errors`. :mod:`.galera` (:class:`~.galera.GaleraCluster`) runs several such servers as one
local Galera cluster; :mod:`.replica` makes one a replication primary and others its read replicas.
"""
