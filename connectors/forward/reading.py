"""A Forward connection's reading of its transport: pausing, resuming and stopping it, and writing back.

Reading stops for good on an error, EOF or shutdown (:meth:`Reading.stop`,
:meth:`Reading.end`); it pauses while a slot, the sink or the memory budget
holds it back (:meth:`Reading.pause`, :meth:`Reading.resume`). The
:attr:`Reading.wake` event tells the pump and the acker that something
changed: new frames, a free slot, or a stop.
"""

from __future__ import annotations

import asyncio


class Reading:
    """The transport a connection reads, whether it reads on, and when it last read.

    The connection's parts read :attr:`stopped`, :attr:`lost` and :attr:`paused`, and change them
    through its methods.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer = "?"  # the client's address, for logs
        self.stopped = False  # no more reading: error, EOF, shutdown
        self.lost = False  # the transport is gone
        self.paused = False
        #: Seconds reading was paused, summed up to the last resume: a message's deadline moves on by
        #: the time the server did not read it.
        self.paused_seconds = 0.0
        self._paused_at = 0.0
        self.wake = asyncio.Event()  # new frames, a free slot, or stop
        self.last_read = asyncio.get_running_loop().time()

    def attach(self, transport: asyncio.Transport) -> None:
        """The transport is connected: read it, and name the peer for logs."""
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"

    def touch(self) -> None:
        """Bytes arrived, or reading may go on past the budget: the idle and pass timers count from now."""
        self.last_read = asyncio.get_running_loop().time()

    def pause(self) -> None:
        if not self.paused and not self.lost and self.transport is not None:
            self.paused = True
            self._paused_at = asyncio.get_running_loop().time()
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and not self.stopped and not self.lost and self.transport is not None:
            self.paused = False
            self.paused_seconds += asyncio.get_running_loop().time() - self._paused_at
            self.transport.resume_reading()

    def stop(self) -> None:
        """Read nothing more (an error, or the server closing); what was read is still finished."""
        self.stopped = True
        self.pause()

    def end(self) -> None:
        """Nothing more comes (EOF, or the connection's pump is done); the pump and the acker are told."""
        self.stopped = True
        self.wake.set()

    def lose(self) -> None:
        """The transport is gone: nothing more is read or written."""
        self.lost = True
        self.end()

    def write(self, data: bytes) -> None:
        """Send ``data`` unless the transport is gone."""
        if not self.lost and self.transport is not None:
            self.transport.write(data)

    def abort(self) -> None:
        """Close the transport at once, dropping what is not yet sent."""
        if self.transport is not None and not self.lost:
            self.transport.abort()

    def close(self) -> None:
        """Close the transport once what is written is sent."""
        if self.transport is not None and not self.lost:
            self.transport.close()
