"""The root `windvane` group, its exit-code errors, and the helpers several command groups share.

Every command exits with one of these codes, and only this module says which error gets which:

* 0: done;
* 1 (:data:`EXIT_FAILED`): the store or the server failed (a plain :class:`click.ClickException`);
* 2 (:data:`EXIT_BAD_INPUT`): a usage problem the user can fix (:class:`BadInput`; click's own usage
  errors exit 2 too);
* 3 (:data:`EXIT_ROWS_REJECTED`): `windvane import` quarantined rows (:class:`RowsRejected`);
* 4 (:data:`EXIT_NOTHING_MATCHED`): `windvane parsers --detect` found no parser that reads a line of the
  file (:class:`NothingMatched`);
* 130 (:data:`EXIT_INTERRUPTED`): interrupted with Ctrl-C; what was committed stays (:func:`interrupted`).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from windvane import neostore
    from windvane.ops.errors import OpsError

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ROWS_REJECTED = 3
EXIT_NOTHING_MATCHED = 4
EXIT_INTERRUPTED = 130


class BadInput(click.ClickException):
    """A usage problem the user can fix (bad path, missing program): exit code 2."""

    exit_code = EXIT_BAD_INPUT


class RowsRejected(click.ClickException):
    """`windvane import` quarantined rows and was not told to allow it: exit code 3.

    The other rows are stored: it is said as a warning, not an error.
    """

    exit_code = EXIT_ROWS_REJECTED

    def show(self, file: Any = None) -> None:
        click.echo(f"warning: {self.format_message()}", file=file, err=True)


class NothingMatched(click.ClickException):
    """`windvane parsers --detect` found no shipped parser or format that reads a line of the sample: exit code 4."""

    exit_code = EXIT_NOTHING_MATCHED


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` as English says them: "1 row", "2 rows", "1,024 batches" (``plural`` when not noun+s)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def say(line: str, *, err: bool = False) -> None:
    """Echo ``line`` on a terminal line of its own: a progress bar drawn on stderr (which ends with no newline
    until it is done) is erased first, and drawn again below at its next update."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()
    click.echo(line, err=err)


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


#: The module of each command (``windvane.cli.<module>``): importing it registers its commands on the root group.
COMMAND_MODULES = {
    "arrays": "arrays",
    "console": "console",
    "db": "db",
    "demo": "info",
    "export": "export",
    "import": "imports",
    "info": "info",
    "mount": "mount",
    "parsers": "parsers",
    "quarantine": "streams",
    "serve": "serve",
    "store": "store",
    "streams": "streams",
    "tail": "imports",
}


class RootGroup(click.Group):
    """The `windvane` group: a command's module is imported when the command is named (or listed by --help),
    so that `windvane --version` and each command start without the others' imports."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | COMMAND_MODULES.keys())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"windvane.cli.{COMMAND_MODULES[cmd_name]}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
        windvane store info --store sqlite:///windvane.db
        windvane store pack --store sqlite:///windvane.db --keep-days 30

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
        windvane arrays ls --store sqlite:///windvane.db
        windvane arrays history --store sqlite:///windvane.db turbine1/vibration

    Every command on a store takes --store URL, or WINDVANE_STORE when it is
    not given (export WINDVANE_STORE=sqlite:///windvane.db).
    """


def open_store(url: str, **options: Any) -> neostore.Store:
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


STORE_ENV = "WINDVANE_STORE"
_STORE_META = "windvane.store"  # a group's --store (``streams --store URL ls``), for its commands


def is_store_url(text: str) -> bool:
    """Whether a positional word is a store URL (``scheme://...``) rather than a name: names never hold ``://``."""
    return "://" in text


def store_option(*, alias: bool = False, required: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The --store option (WINDVANE_STORE when not given), passed to the command as ``store_url``.

    With ``alias``, the command also takes the URL as its first positional
    argument (``windvane store info URL``, the shorter form to type); a first word that
    is not a store URL is the command's next argument (``arrays ls PREFIX``).
    The positional URL overrides WINDVANE_STORE; given with a --store that
    says otherwise, it is a usage error (exit 2). ``required=False`` leaves
    ``store_url`` None when no store is given.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            given = _shift_alias(ctx, kwargs) if alias else None
            kwargs["store_url"] = _resolve_store(ctx, kwargs.get("store_url"), given, required)
            ctx.meta[_STORE_META] = kwargs["store_url"]
            return command(*args, **kwargs)

        declared = _STORE(run)
        return _STORE_ALIAS(declared) if alias else declared

    return decorate


_STORE = click.option(
    "--store",
    "store_url",
    metavar="URL",
    envvar=STORE_ENV,
    show_envvar=True,
    help="Store URL: sqlite:///file.db, mariadb://user@/db?unix_socket=/path/sock, ...",
)
_STORE_ALIAS = click.argument("store_alias", metavar="[URL]", required=False)


def _shift_alias(ctx: click.Context, kwargs: dict[str, Any]) -> str | None:
    """The positional store URL, taken out of ``kwargs``; a first word that is no URL moves to the next argument."""
    word: str | None = kwargs.pop("store_alias")
    if word is None or is_store_url(word):
        return word
    following = [p for p in ctx.command.params if isinstance(p, click.Argument) and p.name != "store_alias"]
    if not following or kwargs[following[-1].name] not in (None, following[-1].default):
        raise click.UsageError(f"{word!r} is not a store URL: give one such as sqlite:///file.db, or --store URL")
    # Each argument takes the word before it: the first gets the word the store's place held.
    for param in reversed(following[1:]):
        kwargs[param.name] = kwargs[following[following.index(param) - 1].name]
    kwargs[following[0].name] = word
    return None


def _resolve_store(ctx: click.Context, option: str | None, positional: str | None, required: bool) -> str | None:
    """The store a command works on: its positional URL or --store (which must agree), else the group's, else
    WINDVANE_STORE."""
    from_command_line = ctx.get_parameter_source("store_url") == ParameterSource.COMMANDLINE
    if positional is not None:
        if from_command_line and option != positional:
            from windvane.neostore import redacted  # URLs may hold a password: messages show them without

            raise click.UsageError(
                f"the store is given twice and differs: {redacted(positional)!r} and --store {redacted(option or '')!r}"
            )
        return positional
    if option is None or not from_command_line:
        option = ctx.meta.get(_STORE_META) or option
    if option is None and required:
        raise click.UsageError(f"give the store: --store URL (or set {STORE_ENV})")
    return option


#: The store option of the commands that work on one store: ``@STORE_OPTION`` (see :func:`store_option`).
STORE_OPTION = store_option()


def schema_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--schema FILE`` option (a schema TOML file that exists), passed as ``schema_path``; ``help_text``
    says what its command does with it."""
    return click.option(
        "--schema", "schema_path", type=click.Path(exists=True, dir_okay=False, path_type=str), help=help_text
    )


def main() -> None:
    """Entry point of the `windvane` console script."""
    cli(prog_name="windvane")
