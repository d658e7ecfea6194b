"""Who is sending: every Forward connection, HTTP client and MQTT subscription a server has, for its console.

Each server keeps one :class:`Senders` (``ForwardServer.senders``,
``HttpServer.senders``, ``MqttSubscriber.senders``) and ingest's
``Service.senders()`` reads them all, through that attribute alone (ingest
does not import connectors). A :class:`Sender` is one row of the table: the
server updates its counters in place as it acknowledges what the sender
sent, a few attribute increments per acknowledgement, so that thousands of
connections cost nothing more on the hot path than the counters themselves.

Memory stays proportional to what is open, plus bounded lists of the recent
past, since a server that many sensors connect to and leave again would
otherwise keep a row for each for ever:

* connections (Forward, MQTT) are kept while open; once closed, each is
  added to its client's row (its host, user and hostname, the port
  dropped), so that a sender that connects anew for every chunk (Fluent
  Bit's forward output, a sensor that wakes up to send) is one row of the
  sums, not a row a connection; the ``closed_kept`` clients last seen stay
  listed;
* HTTP clients are keyed by host and user (a client opens connections from
  a new port at will), kept ``client_window`` seconds after their last
  answered request, at most ``clients_kept`` of them, the least recent
  dropped first. A client counts as open while its last request is more
  recent than ``active`` seconds, the time the server keeps an idle
  keep-alive connection open.

Everything here is changed on the event loop only; :meth:`Senders.snapshot`
may be called from any thread (ingest answers from worker threads): it
copies the containers in single C-level calls, which the interpreter lock
does not interrupt, so it needs no lock of its own.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Hashable
from typing import Any

from windvane.connectors.limits import Limits

#: Clients of closed connections a :class:`Senders` keeps listed, the most recently seen.
CLOSED_KEPT = 100
#: HTTP clients a :class:`Senders` keeps listed at most, the most recently answered.
CLIENTS_KEPT = 1000
#: Seconds an HTTP client stays listed after its last answered request.
CLIENT_WINDOW = 15 * 60.0


class Sender:
    """One sender: a connection (Forward, MQTT) or an HTTP client (host and user).

    The server changes the attributes directly: ``events``, ``chunks`` and
    ``requests`` count what was acknowledged, ``bytes`` what was received,
    ``last_ack`` is the Unix time of the last acknowledgement or successful
    answer (None before the first).
    """

    __slots__ = (
        "bytes",
        "chunks",
        "events",
        "hostname",
        "last_ack",
        "open",
        "peer",
        "protocol",
        "requests",
        "since",
        "user",
    )

    def __init__(
        self, protocol: str, peer: str, *, user: str | None = None, hostname: str | None = None, since: float
    ) -> None:
        self.protocol = protocol
        self.peer = peer
        self.user = user
        self.hostname = hostname
        self.since = since
        self.events = 0
        self.chunks = 0  # Forward chunks, MQTT messages: each acknowledged on its own
        self.requests = 0  # HTTP requests answered with success
        self.bytes = 0
        self.last_ack: float | None = None
        self.open = True

    def acked(self, events: int, chunks: int = 1) -> None:
        """``chunks`` holding ``events`` were committed and acknowledged now."""
        self.events += events
        self.chunks += chunks
        self.last_ack = time.time()

    def as_dict(self) -> dict[str, Any]:
        """The row of the senders table (the keys :meth:`Senders.snapshot` documents)."""
        return {
            "protocol": self.protocol,
            "peer": self.peer,
            "user": self.user,
            "hostname": self.hostname,
            "since": self.since,
            "events": self.events,
            "chunks": self.chunks,
            "requests": self.requests,
            "bytes": self.bytes,
            "last_ack": self.last_ack,
            "open": self.open,
        }


class Senders:
    """The senders of one server speaking ``protocol`` ("forward", "http", "mqtt"); see the module docstring."""

    def __init__(
        self,
        protocol: str,
        *,
        closed_kept: int = CLOSED_KEPT,
        clients_kept: int = CLIENTS_KEPT,
        client_window: float = CLIENT_WINDOW,
        active: float = Limits.idle_timeout,
    ) -> None:
        self.protocol = protocol
        self.clients_kept = clients_kept
        self.client_window = client_window
        self.active = active
        self.closed_kept = closed_kept
        self._open: dict[Hashable, Sender] = {}
        # The clients of closed connections by (host, user, hostname), the least recently closed first.
        self._closed: collections.OrderedDict[tuple[str, str | None, str | None], Sender] = collections.OrderedDict()
        # HTTP clients by (host, user), the least recently answered first.
        self._clients: collections.OrderedDict[tuple[str, str | None], Sender] = collections.OrderedDict()

    # -- connections -------------------------------------------------------------------

    def open(self, key: Hashable, peer: str, *, user: str | None = None, hostname: str | None = None) -> Sender:
        """A connection opened now (``key`` names it until :meth:`close`, e.g. its transport): its sender."""
        sender = Sender(self.protocol, peer, user=user, hostname=hostname, since=time.time())
        self._open[key] = sender
        return sender

    def get(self, key: Hashable) -> Sender | None:
        """The sender of the open connection ``key``, None if there is none."""
        return self._open.get(key)

    def close(self, key: Hashable) -> None:
        """Connection ``key`` closed: its counts go to its client's row, the least recent of which drops out."""
        sender = self._open.pop(key, None)
        if sender is None:
            return
        sender.open = False
        host = _host(sender.peer)
        client_key = (host, sender.user, sender.hostname)
        client = self._closed.pop(client_key, None)
        if client is None:
            sender.peer = host
            client = sender
        else:
            client.since = min(client.since, sender.since)
            client.events += sender.events
            client.chunks += sender.chunks
            client.bytes += sender.bytes
            if sender.last_ack is not None and (client.last_ack is None or sender.last_ack > client.last_ack):
                client.last_ack = sender.last_ack
        self._closed[client_key] = client
        if len(self._closed) > self.closed_kept:
            self._closed.popitem(last=False)

    # -- HTTP clients --------------------------------------------------------------------

    def answered(self, host: str, user: str | None, events: int, nbytes: int) -> Sender:
        """A request of ``nbytes`` from ``host`` as ``user`` was answered with success, ``events`` committed."""
        now = time.time()
        clients = self._clients
        key = (host, user)
        client = clients.get(key)
        if client is None:
            client = clients[key] = Sender(self.protocol, host, user=user, since=now)
            self._forget_clients(now)
        else:
            clients.move_to_end(key)
        client.requests += 1
        client.events += events
        client.bytes += nbytes
        client.last_ack = now
        return client

    def _forget_clients(self, now: float) -> None:
        """Drop the clients not answered within the window, and the least recent past :attr:`clients_kept`."""
        clients = self._clients
        horizon = now - self.client_window
        while clients:
            oldest = next(iter(clients.values()))
            if len(clients) <= self.clients_kept and (oldest.last_ack or oldest.since) >= horizon:
                break
            clients.popitem(last=False)

    # -- reading -------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        """Every sender listed, as dicts with ``protocol``, ``peer``, ``user``, ``hostname``, ``since``,
        ``events``, ``chunks``, ``requests``, ``bytes``, ``last_ack`` and ``open``; open connections first,
        then the clients of closed ones (most recently closed first), then the HTTP clients (most recent
        first)."""
        now = time.time()
        # Each copy is one C-level call: another thread's snapshot sees no container change halfway.
        opened = list(self._open.values())
        closed = list(self._closed.values())
        clients = list(self._clients.values())
        out = [s.as_dict() for s in opened]
        out += [s.as_dict() for s in reversed(closed)]
        horizon, active = now - self.client_window, now - self.active
        for client in reversed(clients):
            seen = client.last_ack or client.since
            if seen < horizon:
                break
            row = client.as_dict()
            row["open"] = seen >= active
            out.append(row)
        return out

    @property
    def open_count(self) -> int:
        """Senders open now: connections (an MQTT one while connected) and HTTP clients active (the gauge)."""
        active = time.time() - self.active
        connections = sum(1 for s in list(self._open.values()) if s.open)
        return connections + sum(1 for c in list(self._clients.values()) if (c.last_ack or c.since) >= active)


def _host(peer: str) -> str:
    """The host of a ``host:port`` (``[v6]:port``) peer; the peer itself when it names no port."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() and (host.endswith("]") or ":" not in host) else peer
