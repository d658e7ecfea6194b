"""The least a Python Forward server can do for a chunk: read it, unpack it, acknowledge it. Nothing is
decoded into rows, validated or stored; ``test_trickle.py`` runs its load against this for the floor of the
CPU a chunk costs in one CPython process on asyncio.

    python benchmarks/ack_floor.py PORT     # prints "ready" once it listens
"""

from __future__ import annotations

import asyncio
import sys

import msgpack


class AckEveryChunk(asyncio.Protocol):
    """Answers each Forward message's ``chunk`` option with its ack, as the messages arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.pack = msgpack.Packer().pack

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        acks = [self.pack({"ack": message[-1]["chunk"]}) for message in self.unpacker]
        if acks and self.transport is not None:
            self.transport.write(b"".join(acks))


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(AckEveryChunk, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
