"""Names vulture reports as unused that are used where it cannot see: read by other programs, by name, or
through an interface. ``scripts/test lint`` runs vulture with this file (pyproject.toml's [tool.vulture]).

Each group says who uses its names. A name that is dead does not belong here: remove it from the code.
"""

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# zarr's Store interface (zarr.abc.store.Store): zarr calls these on arrays.ZarrStore.
_.get_sync
_.get_partial_values
_.getsize_prefix
_.list_dir
_.set_sync
_.delete_sync

# ZODB's storage interfaces (ZODB.interfaces.IStorage and friends): ZODB calls these on neostore.zodb.NeoStorage;
# ZConfig builds NeoStorageFactory from neostore/component.xml.
_.getSize
_.supportsUndo
_.getTid
_.loadSerial
_.iterator
_.checkCurrentSerialInTransaction
_.NeoStorageFactory

# ZODB's IStorageWrapper (the DB a storage is registered with): ZODB's conflict resolution calls these on the
# invalidation recorder of tests/neostore/test_zodb_conformance.py.
_.transform_record_data
_.untransform_record_data

# asyncio's and http.server's protocol methods, called by the event loop and the server.
_.datagram_received
_.error_received
_.do_POST
_.log_message

# paho-mqtt's callbacks and MQTT v5 properties, set for paho to call and send.
_.on_connect
_.on_connect_fail
_.on_subscribe
_.on_disconnect
_.on_message
_.SessionExpiryInterval
_.ReceiveMaximum

# Attributes other libraries read: numpy's array flags, numcodecs' threading switch, the MariaDB connector's
# session mode, h5netcdf's dimensions, aiohttp's response writer, pytest's session status, shlex's splitting.
_.writeable
_.use_threads
_.autocommit
_.dimensions
_.output_size
_.exitstatus
_.whitespace_split

# Counters and stored record fields read by name: metrics are rendered from their dataclasses' fields, and
# positions and export jobs are stored and shown as records.
_.handshake_failures
_.preauth_oversize
_.budget_stalls
_.budget_refusals
_.lag_seconds
_.poisoned_submissions
_.poisoned_events
_.commits_failing
_.updated

# fluentd's <parse> options windvane accepts with no effect, so that a fluentd configuration reads as it is.
_.unmatched_lines
_.stream_buffer_size

# Registered with atexit at its definition.
_.close_shared_stores

# The exit code the command line's documentation table names (click raises it for a failed command).
_.EXIT_FAILED

# Tests: names ZODB's and zarr's test suites read from their subclasses, names a subprocess imports by name.
_.use_extension_bytes
_._dst
_._new_storage_client
_._db
_.store_cls
_.buffer_cls
_.worker_main
_.MEMORY_ROWS

# A Protocol's call signature (neostore.sql.Query): what a read path's callers call.
_.__call__

# pyfuse3's Operations interface and the attributes it reads: libfuse calls these on arrays.mount.server.MountFS.
_.enable_writeback_cache
_.lookup
_.opendir
_.readdir
_.attr_timeout
_.entry_timeout
_.keep_cache

# Counters of ingest.metrics.Metrics that GET /metrics reads by name (its _TOTALS table, through getattr).
_.locked_seconds

# The console's page data (console/views.py): its Jinja2 templates (console/templates/) read these fields.
_.oldest_age
_.mean_seconds
_.budget_bytes
_.total_streams
_.distinct_bytes
_.stream_exists
_.total_senders
