"""The root `windvane` group, its exit-code errors, and the helpers several command groups share.

Every command exits with one of these codes, and only this module says which error gets which:

* 0: done;
* 1 (:data:`EXIT_FAILED`): the store or the server failed (a plain :class:`click.ClickException`);
* 2 (:data:`EXIT_BAD_INPUT`): a usage problem the user can fix (:class:`BadInput`; click's own usage
  errors exit 2 too);
* 3 (:data:`EXIT_ROWS_REJECTED`): `windvane import` quarantined rows (:class:`RowsRejected`);
* 130 (:data:`EXIT_INTERRUPTED`): interrupted with Ctrl-C; what was committed stays (:func:`interrupted`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.ops.errors import OpsError

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ROWS_REJECTED = 3
EXIT_INTERRUPTED = 130


class BadInput(click.ClickException):
    """A usage problem the user can fix (bad path, missing program): exit code 2."""

    exit_code = EXIT_BAD_INPUT


class RowsRejected(click.ClickException):
    """`windvane import` quarantined rows and was not told to allow it: exit code 3."""

    exit_code = EXIT_ROWS_REJECTED


def interrupted(message: str) -> NoReturn:
    """Say ``message`` (what stays, how to go on) on stderr and exit 130, as a shell does on Ctrl-C."""
    click.echo(message, err=True)
    sys.exit(EXIT_INTERRUPTED)


def ops_failure(exc: OpsError) -> click.ClickException:
    """The CLI's error for a failure of the private MariaDB server's manager: exit 2 for a bad setting or
    a program not installed (the user can fix those), else 1."""
    from windvane.ops.errors import ServerConfigError, ServerNotFoundError

    if isinstance(exc, (ServerConfigError, ServerNotFoundError)):
        return BadInput(str(exc))
    return click.ClickException(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="windvane")
def cli() -> None:
    """windvane: big-data ingestion into a deduplicating, history-preserving object store.

    Data lands in neostore, an object store kept in MariaDB (or, for small
    setups, SQLite).  To use MariaDB, start a private server and use the
    store URL it prints:

    \b
        windvane db start --datadir ./db
        windvane db status --datadir ./db
        windvane db stop --datadir ./db

    Inspect or pack a store (SQLite or MariaDB):

    \b
        windvane store info sqlite:///windvane.db
        windvane store pack sqlite:///windvane.db --keep-days 30

    Receive fluentd Forward and HTTP data into streams (schemas/ says which tags go where):

    \b
        windvane serve --store sqlite:///windvane.db --schemas schemas/

    Or subscribe to an MQTT broker (--mqtt mqtt://host:1883), import files,
    follow a log file, and describe what a store holds:

    \b
        windvane import data/*.csv rec.wav --store sqlite:///windvane.db --tag plant1
        windvane tail /var/log/syslog --format syslog3164 --store sqlite:///windvane.db --tag host.syslog
        windvane info --store sqlite:///windvane.db

    See it all work on sample data (a fresh SQLite store under ./var/):

    \b
        windvane demo

    List the arrays a store holds, and an array's commits:

    \b
        windvane arrays ls sqlite:///windvane.db
        windvane arrays history sqlite:///windvane.db turbine1/vibration
    """


def open_store(url: str, **options) -> neostore.Store:
    """The store at ``url`` (``read_only=True``/``create=False``: one that exists, else exit code 2)."""
    from windvane import neostore

    try:
        return neostore.open(url, **options)
    except neostore.StoreNotFoundError as exc:
        raise BadInput(f"{exc} (only writing commands such as import, serve and tail create a store)") from exc
    except neostore.InvalidURLError as exc:
        raise BadInput(str(exc)) from exc
    except neostore.NeoStoreError as exc:
        raise click.ClickException(str(exc)) from exc


STORE_URL = click.argument("url", metavar="URL")
#: The --store option of the commands that work on one store (WINDVANE_STORE when not given).
STORE_OPTION = click.option(
    "--store",
    "store_url",
    required=True,
    envvar="WINDVANE_STORE",
    show_envvar=True,
    help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...",
)


def main() -> None:
    """Entry point of the `windvane` console script."""
    cli(prog_name="windvane")
