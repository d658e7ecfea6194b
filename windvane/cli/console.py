"""`windvane console`: the web console of `windvane serve`, for a store, without ingesting."""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import TYPE_CHECKING, Any

import click

from windvane.cli.root import BadInput, cli, open_store, store_option
from windvane.console.config import ConsoleConfig

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.ingest.auth import Users


@cli.command(short_help="Serve the web console for a store, without ingesting.")
@store_option(alias=True)
@click.option(
    "--listen",
    default=ConsoleConfig.listen,
    show_default=True,
    metavar="HOST:PORT",
    help="Where the console listens (this machine only unless told: its pages show the data); port 0 picks a "
    "free one. 0.0.0.0:PORT opens it to the network: give --users.",
)
@click.option(
    "--users",
    "users_path",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    help="The users file of windvane serve: pages need the read role, replay and discard the write role.",
)
def console(store_url: str, listen: str, users_path: str | None) -> None:
    """Serve the web console for STORE_URL: streams, plots, live tails, the quarantine, until Ctrl-C.

    The pages are those `windvane serve` shows on its HTTP port, without the
    figures of ingestion (senders, commits): the store is all there is.
    Replay and discard act on the store, as `windvane quarantine replay` does.
    Prints the console's address once it listens. Exit code 2 for a bad
    address, users file or store URL, or a store that does not exist.
    """
    import asyncio

    from windvane import neostore
    from windvane.connectors.address import AddressError, parse_address
    from windvane.ingest import AuthError
    from windvane.ingest.auth import Users

    try:
        host, port = parse_address(listen, 8080)
    except AddressError as exc:
        raise BadInput(str(exc)) from exc
    try:
        users = Users.load(users_path) if users_path else None
    except AuthError as exc:
        raise BadInput(str(exc)) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open_store(store_url, create=False) as store:
        try:
            asyncio.run(_serve(store, neostore.redacted(store_url), users, host, port))
        except OSError as exc:
            raise BadInput(f"cannot listen on {listen}: {exc.strerror or exc}") from exc


async def _serve(store: neostore.Store, label: str, users: Users | None, host: str, port: int) -> None:
    import asyncio

    from aiohttp import web

    from windvane.connectors.address import host_port
    from windvane.console.app import Console
    from windvane.console.views import Source
    from windvane.ingest.service import store_health

    def health() -> dict[str, Any]:
        return {"status": "ok", **store_health(store)}

    app = web.Application()
    Console(Source(store, label, health), users).add_routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    click.echo(f"console: http://{host_port(bound[0], bound[1])}/")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
