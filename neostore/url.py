"""The one URL syntax for stores.

- ``sqlite:///relative.db`` and ``sqlite:////abs/path.db``
- ``mariadb://user:pw@host:port/db``
- ``mariadb://user@/db?unix_socket=/path/sock`` (``&engine=rocksdb`` selects MyRocks)
- ``mariadb://user@host1:3306,host2:3306,host3:3306/db``, or
  ``?unix_socket=/a/sock,/b/sock,/c/sock``: the nodes of a Galera cluster,
  written through one at a time, the next one taking over when it fails
- ``&replicas=hostA:3306,/path/replica.sock``: asynchronous replicas that
  serve snapshot reads once they have reached the snapshot

Either may keep its big values in an object store (the blob tier):
``?blobs=s3://bucket/prefix`` with ``&endpoint=http://host:port`` for a
server other than AWS and ``&blob_threshold=65536`` (bytes; values at least
this large go there, :data:`BLOB_THRESHOLD` by default). Credentials never go in the URL: they come from the
standard AWS variables and files. Any other option is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from .blobs.location import CREDENTIALS_HINT, parse_location
from .errors import InvalidURLError

MARIADB_ENGINES = {"innodb": "InnoDB", "rocksdb": "ROCKSDB"}

#: Values at least this large go to the blob tier unless ``blob_threshold`` says otherwise. Chosen with
#: the arrays' chunk size (``arrays.DEFAULT_CHUNK_BYTES``, a sixty-fourth of it): a stream's full chunks
#: reach it, a narrow column's compressed ones too, while the small values (``zarr.json`` documents, time
#: records, the row log revision of a slow stream's commit) stay in the database.
BLOB_THRESHOLD = 64 * 1024

_BLOB_OPTIONS = ("blobs", "endpoint", "blob_threshold")
#: What a message says to someone who put object store credentials in a URL.
_OPTIONS = {"sqlite": _BLOB_OPTIONS, "mariadb": ("unix_socket", "engine", "replicas", *_BLOB_OPTIONS)}


@dataclass(frozen=True)
class Node:
    """One MariaDB server of a store: a TCP address, or a unix socket (then ``host`` and ``port`` are None)."""

    host: str | None = None
    port: int | None = None
    unix_socket: str | None = None

    def __str__(self) -> str:
        return self.unix_socket or f"{self.host}:{self.port or 3306}"


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL. ``path`` is the SQLite file; the rest is MariaDB's."""

    scheme: str
    path: str = ""
    user: str | None = None
    password: str | None = None
    #: The servers that hold the database: one, or the nodes of a cluster in the order writers try them.
    nodes: tuple[Node, ...] = ()
    #: Asynchronous replicas of the database, for snapshot reads.
    replicas: tuple[Node, ...] = ()
    database: str = ""
    engine: str = "InnoDB"
    options: dict[str, str] = field(default_factory=dict)
    text: str = ""
    #: The blob tier's location (``s3://bucket/prefix``), its endpoint and its size threshold.
    blobs: str | None = None
    endpoint: str | None = None
    blob_threshold: int = BLOB_THRESHOLD

    def __str__(self) -> str:
        return self.text

    @property
    def unix_socket(self) -> str | None:
        """The first node's unix socket, if it is reached through one."""
        return self.nodes[0].unix_socket if self.nodes else None

    @property
    def display_name(self) -> str:
        """The store's name without its password: ``sqlite:<path>`` or ``mariadb:<servers>/<database>``."""
        if self.scheme == "sqlite":
            return f"sqlite:{self.path}"
        return f"mariadb:{','.join(map(str, self.nodes))}/{self.database}"


def parse_url(url: str) -> StoreURL:
    """Parse ``url``; raise :class:`InvalidURLError` saying what is wrong."""
    if not isinstance(url, str):
        raise InvalidURLError(f"a store URL must be a string, not {type(url).__name__}")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if parts.scheme == "sqlite":
        return _with_blobs(url, _parse_sqlite(url, parts, _known(url, "sqlite", query)), query)
    if parts.scheme == "mariadb":
        return _with_blobs(url, _parse_mariadb(url, parts, _known(url, "mariadb", query)), query)
    raise InvalidURLError(
        f"unsupported store URL {url!r}: use sqlite:///relative.db, sqlite:////abs/path.db, "
        "mariadb://user:pw@host:port/db or mariadb://user@/db?unix_socket=/path/sock"
    )


def _parse_sqlite(url: str, parts: SplitResult, query: dict[str, str]) -> StoreURL:
    if parts.netloc:
        raise InvalidURLError(
            f"{url!r}: a sqlite URL has no host; write sqlite:///relative.db or sqlite:////abs/path.db"
        )
    # urlsplit keeps the leading slash of the path: '/relative.db' or '//abs/path.db'.
    path = unquote(parts.path[1:])
    if not path or path.endswith("/"):
        raise InvalidURLError(f"{url!r}: the sqlite URL names no database file")
    return StoreURL(scheme="sqlite", path=os.path.abspath(path), options=query, text=url)


def _parse_mariadb(url: str, parts: SplitResult, query: dict[str, str]) -> StoreURL:
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise InvalidURLError(f"{url!r}: name one database, as in mariadb://user@host/windvane")
    engine_name = query.pop("engine", "innodb").lower()
    if engine_name not in MARIADB_ENGINES:
        raise InvalidURLError(f"{url!r}: unknown engine {engine_name!r}; choose one of {', '.join(MARIADB_ENGINES)}")
    user, password, hosts = _split_netloc(url, parts.netloc)
    sockets = query.pop("unix_socket", None)
    if sockets is not None:
        nodes = tuple(_node(url, "unix_socket", spec, socket_only=True) for spec in sockets.split(","))
    elif hosts:
        nodes = tuple(_node(url, "host", spec) for spec in hosts.split(","))
    else:
        raise InvalidURLError(f"{url!r}: give a host (mariadb://user@host/db) or ?unix_socket=/path/sock")
    replicas = query.pop("replicas", None)
    return StoreURL(
        scheme="mariadb",
        user=user,
        password=password,
        nodes=nodes,
        replicas=() if replicas is None else tuple(_node(url, "replicas", spec) for spec in replicas.split(",")),
        database=database,
        engine=MARIADB_ENGINES[engine_name],
        options=query,
        text=url,
    )


def _split_netloc(url: str, netloc: str) -> tuple[str | None, str | None, str]:
    """``(user, password, hosts)`` of a URL's network location; ``hosts`` is the text after the ``@``."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return None, None, netloc
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None), hosts


def _node(url: str, option: str, spec: str, *, socket_only: bool = False) -> Node:
    """One server named in ``url`` (``option`` says where): ``host``, ``host:port``, ``[v6]:port`` or ``/a/socket``."""
    spec = unquote(spec.strip())
    if spec.startswith("/"):
        return Node(unix_socket=spec)
    if socket_only or not spec:
        raise InvalidURLError(
            f"{_safe(url)}: {option} names {spec!r}; write an absolute socket path"
            + ("" if socket_only else ", host or host:port")
            + (", several separated by commas" if option != "host" else "")
        )
    parts = urlsplit(f"//{spec}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1 or parts.path:
        raise InvalidURLError(f"{_safe(url)}: {spec!r} in {option} is not host or host:port (port 1-65535)")
    return Node(host=parts.hostname, port=port)


def _known(url: str, scheme: str, query: dict[str, str]) -> dict[str, str]:
    """``query``, once every option in it is one the scheme takes (InvalidURLError naming the others)."""
    unknown = sorted(set(query) - set(_OPTIONS[scheme]))
    if unknown:
        # The URL is shown without its query: an unknown option's value may be a secret put there by mistake.
        raise InvalidURLError(
            f"{_safe(url.partition('?')[0])}: unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; a {scheme} URL takes {', '.join(_OPTIONS[scheme])}"
            + ("; " + CREDENTIALS_HINT if any(_secret_like(name) for name in unknown) else "")
        )
    return dict(query)


def _with_blobs(url: str, parsed: StoreURL, query: dict[str, str]) -> StoreURL:
    """``parsed`` with the blob tier options of ``query``, checked."""
    blobs, endpoint, threshold = query.get("blobs"), query.get("endpoint"), query.get("blob_threshold")
    if blobs is None:
        if endpoint is not None or threshold is not None:
            raise InvalidURLError(f"{_safe(url)}: endpoint and blob_threshold belong with blobs=s3://bucket/prefix")
        return parsed
    parse_location(blobs)  # checks the location's syntax
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.username is not None or parts.password is not None:
            raise InvalidURLError(f"{_safe(url.partition('?')[0])}: the endpoint names a user; {CREDENTIALS_HINT}")
        if parts.scheme not in ("http", "https"):
            raise InvalidURLError(f"{_safe(url)}: endpoint={endpoint!r} is not an http:// or https:// address")
    try:
        size = BLOB_THRESHOLD if threshold is None else int(threshold)
    except ValueError:
        size = -1
    if size < 1:
        raise InvalidURLError(f"{_safe(url)}: blob_threshold={threshold!r} is not a positive number of bytes")
    return replace(parsed, blobs=blobs, endpoint=endpoint, blob_threshold=size)


def with_tier(url: str, blobs: str | None, endpoint: str | None = None, blob_threshold: int | None = None) -> str:
    """``url`` with its blob tier options replaced by these (``blobs`` None: with none), its other options kept."""
    base, _, query = url.partition("?")
    kept = [o for o in query.split("&") if o and o.partition("=")[0] not in _BLOB_OPTIONS]
    if blobs is not None:
        kept.append(f"blobs={blobs}")
        kept += [f"endpoint={endpoint}"] if endpoint else []
        kept += [f"blob_threshold={blob_threshold}"] if blob_threshold else []
    return base + ("?" + "&".join(kept) if kept else "")


def _secret_like(name: str) -> bool:
    return any(word in name.lower() for word in ("key", "secret", "token", "password", "credential"))


def redacted(url: str) -> str:
    """``url`` with its password (if it has one) written ``***``, for reprs and messages."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


def _safe(url: str) -> str:
    return repr(redacted(url))
