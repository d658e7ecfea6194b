"""`windvane parsers`: the shipped, tested fluentd ``<parse>`` sections for common logs, and which one reads a file."""

from __future__ import annotations

import click

from windvane.cli.root import BadInput, NothingMatched, cli, counted

#: Candidates listed beside the best, and lines it missed shown.
SHOWN_CANDIDATES = 8
SHOWN_MISSES = 5
#: Lines --detect samples unless --sample says otherwise.
SAMPLE_LINES = 2000


@cli.command(name="parsers", short_help="List the shipped log parsers, show one, or find the one that reads a file.")
@click.argument("name", required=False)
@click.option(
    "--detect",
    "detect_path",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    help="Try every shipped parser and log format on the first lines of FILE (compressed too) and rank them "
    "by the lines each reads; show a few lines the best one missed, with why.",
)
@click.option(
    "--sample",
    "sample_lines",
    type=click.IntRange(1, 100_000),
    default=SAMPLE_LINES,
    show_default=True,
    help="Lines of FILE --detect tries (blank lines are skipped, as import skips them).",
)
def list_or_show(name: str | None, detect_path: str | None, sample_lines: int) -> None:
    """List the shipped parsers (`--parser NAME` of `import` and `tail`), show parser NAME, or --detect FILE's.

    Each is a fluentd <parse> section checked against the real fluentd on
    its sample lines. With NAME, prints its TOML (copy it into a file to
    change it, or into a schema's [parse] table) and its sample lines.

    With --detect FILE, tries the shipped parsers, windvane's own log
    formats and fluentd's parsers that need no options on FILE's first
    --sample lines, and prints them ranked by the lines they read (ties:
    lines given a time of their own, then values filled), with the option
    that uses each, then the first lines the best one missed and why
    ("pattern not matched" says which field a line stopped matching at).

    \b
    Exit codes: 0 done; 2 an unknown NAME, NAME with --detect, or a FILE
    with no line to sample; 4 --detect found nothing that reads a line of
    FILE (write an expression: --format regexp --expression ...).
    """
    from windvane import parsers

    if detect_path is not None:
        if name is not None:
            raise BadInput("give a parser NAME or --detect FILE, not both")
        _detect(detect_path, sample_lines)
        return
    if name is None:
        entries = parsers.catalog()
        width = max(map(len, entries))
        for key in parsers.list_parsers():
            click.echo(f"{key:<{width}}  {entries[key]['title']}")
        return
    try:
        section = parsers.parser_path(name).read_text()
    except parsers.ParserNotFound as exc:
        raise BadInput(str(exc)) from None
    click.echo(section.rstrip("\n"))
    click.echo("\n# sample lines:")
    for line in parsers.sample_path(name).read_text().splitlines():
        click.echo(f"#   {line}")


def _detect(path: str, lines: int) -> None:
    """Print the ranking of `windvane parsers --detect` (windvane.cli.detect) and the best one's misses."""
    from windvane.cli import detect

    found = detect.detect(path, lines)
    if not found.sampled:
        raise BadInput(f"{path} has no line to sample (it is empty, or blank lines only)")
    skipped = f"; {counted(found.blank, 'blank line')} skipped" if found.blank else ""
    click.echo(f"{path}: the first {counted(found.sampled, 'line')} sampled{skipped}")
    reading = [r for r in found.results if r.matched]
    if not reading:
        raise NothingMatched(
            f"no shipped parser or log format reads any of the {found.sampled:,} lines sampled of {path}; "
            "say its layout with --format regexp --expression '/^(?<time>...) (?<message>.*)$/' --time-format ..."
        )
    width = max(len(r.candidate.name) for r in reading[:SHOWN_CANDIDATES])
    click.echo(f"{'parser':<{width}}  {'lines read':>21}  {'own time':>9}  use")
    for r in reading[:SHOWN_CANDIDATES]:
        share = f"{r.matched:,} / {found.sampled:,} ({r.matched / found.sampled:.0%})"
        click.echo(f"{r.candidate.name:<{width}}  {share:>21}  {r.timed:>9,}  {r.candidate.option}")
    if len(reading) > SHOWN_CANDIDATES:
        click.echo(f"... and {len(reading) - SHOWN_CANDIDATES:,} more that read fewer lines")
    best = reading[0]
    if not best.missed:
        click.echo(f"{best.candidate.name} reads every line sampled: {best.candidate.option}")
        return
    shown = min(len(best.missed), SHOWN_MISSES)
    click.echo(f"lines {best.candidate.name} missed: {len(best.missed):,} (the first {shown}, with why):")
    for miss in best.missed[:SHOWN_MISSES]:
        click.echo(f"  {miss.reason}")
        click.echo(f"    {miss.raw.decode(errors='backslashreplace')}")
