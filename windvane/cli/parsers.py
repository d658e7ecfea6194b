"""`windvane parsers`: the shipped, tested fluentd ``<parse>`` sections for common logs."""

from __future__ import annotations

import click

from windvane.cli.root import BadInput, cli


@cli.command(name="parsers", short_help="List the shipped log parsers, or show one with its sample lines.")
@click.argument("name", required=False)
def list_or_show(name: str | None) -> None:
    """List the shipped parsers (`--parser NAME` of `import` and `tail`), or show parser NAME.

    Each is a fluentd <parse> section checked against the real fluentd on
    its sample lines. With NAME, prints its TOML (copy it into a file to
    change it, or into a schema's [parse] table) and its sample lines.
    Exit code 2 for an unknown NAME.
    """
    from windvane import parsers

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
