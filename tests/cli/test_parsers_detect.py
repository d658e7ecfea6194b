"""`windvane parsers --detect FILE`: the shipped parsers and log formats tried on a sample of a real-looking log,
ranked by the lines each reads, with the lines the best one missed and where they stopped matching."""

from __future__ import annotations

import gzip

from click.testing import CliRunner

from windvane import parsers
from windvane.cli import cli as windvane_cli


def run(*args: str):
    return CliRunner().invoke(windvane_cli, ["parsers", *args])


def test_detect_ranks_the_asterisk_parser_first_and_shows_what_it_missed(tmp_path):
    log = tmp_path / "full"
    odd = "[Jan 18 17:39:54] NOTICE{12049} res_pjsip_registrar.c: AOR '101' not found\n"
    log.write_text(parsers.sample_path("asterisk").read_text() + "\n" + odd + "  -- Remote UNIX connection\n")
    result = run("--detect", str(log))
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    samples = len(parsers.sample_path("asterisk").read_text().splitlines())
    assert out[0] == f"{log}: the first {samples + 2} lines sampled; 1 blank line skipped"
    assert out[2].split() == [
        "asterisk",
        f"{samples}",
        "/",
        f"{samples + 2}",
        f"({samples / (samples + 2):.0%})",
        str(samples),
        "--parser",
        "asterisk",
    ]
    assert "ltsv" not in result.output  # a catch-all reads a line only if it has its shape
    missed = out[out.index("lines asterisk missed: 2 (the first 2, with why):") + 1 :]
    assert missed == [
        f"  line {samples + 2}: pattern not matched: the line matches the expression through field 'level', "
        "not through 'pid'",
        "    " + odd.rstrip("\n"),
        f"  line {samples + 3}: pattern not matched: the line does not match the expression up to its first "
        "field 'time'",
        "      -- Remote UNIX connection",
    ]


def test_detect_reads_a_compressed_log_and_a_bounded_sample(tmp_path):
    line = '192.0.2.{} - - [01/Mar/2024:12:00:{:02d} +0000] "GET /i/{} HTTP/1.1" 200 512 "-" "curl/8.5.0"\n'
    log = tmp_path / "access.log.gz"
    log.write_bytes(gzip.compress("".join(line.format(i % 250, i % 60, i) for i in range(5000)).encode()))
    result = run("--detect", str(log), "--sample", "300")
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert out[0] == f"{log}: the first 300 lines sampled"
    ranked = {row.split()[0]: row.split()[1] for row in out[2:] if "/ 300" in row}
    assert {name for name, read in ranked.items() if read == "300"} >= {"combined", "nginx", "apache2"}
    assert out[-1].endswith("reads every line sampled: " + out[2].split("  ")[-1].strip())


def test_nothing_read_exits_4_and_says_what_to_do(tmp_path):
    log = tmp_path / "odd.log"
    log.write_text("@@ frame 1 ok\n@@ frame 2 lost\n\n")
    result = run("--detect", str(log))
    assert result.exit_code == 4, result.output
    assert "no shipped parser or log format reads any of the 2 lines sampled" in result.output
    assert "--format regexp --expression" in result.output


def test_detect_refuses_a_name_too_and_a_file_without_lines(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("\n  \n")
    both = run("asterisk", "--detect", str(empty))
    assert both.exit_code == 2 and "not both" in both.output
    nothing = run("--detect", str(empty))
    assert nothing.exit_code == 2 and "has no line to sample" in nothing.output
