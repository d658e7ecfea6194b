"""split_lines cuts endings and blank lines exactly as the whole-array regexps did (the reference here)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from windvane.connectors.files.logs.lines import split_lines

PIECES = ["abc", "x", "", " ", "\t", "\r", "\r\r", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c", "\x1c", "é", "日本"]
PIECES += ["\xff", "\xc3", " a", "a ", "\x85", "  \t "]
ENDINGS = ["\n", "\n", "\r\n", "\r\r\n", "\r"]


def reference(block: bytes, keep_blank: bool, keep_cr: bool, binary: bool) -> tuple[list, list[int], list[int]]:
    """Lines, their numbers, and the numbers of the rejected ones, by regexps over the whole array."""
    raw = block.split(b"\n")
    lines = [line + b"\n" for line in raw[:-1]] + ([raw[-1]] if raw[-1] else [])
    chunks = pa.array(lines, pa.large_binary())
    ending = r"\n$" if keep_cr else r"\r?\n$"
    numbers = np.arange(1, len(lines) + 1)
    if binary:
        out = pc.replace_substring_regex(chunks, ending, "")
        keep = np.ones(len(out), bool) if keep_blank else pc.binary_length(out).to_numpy(zero_copy_only=False) > 0
        return out.filter(pa.array(keep)).to_pylist(), numbers[keep].tolist(), []
    valid = np.array([_utf8(line) for line in lines], dtype=bool)
    text = pc.replace_substring_regex(chunks.filter(pa.array(valid)).cast(pa.large_string()), ending, "")
    numbers_ok = numbers[valid]
    keep = np.ones(len(text), bool)
    if not keep_blank:
        keep = ~pc.match_substring_regex(text, r"^\s*$").to_numpy(zero_copy_only=False)
    return text.filter(pa.array(keep)).to_pylist(), numbers_ok[keep].tolist(), numbers[~valid].tolist()


def _utf8(line: bytes) -> bool:
    try:
        line.decode()
    except UnicodeDecodeError:
        return False
    return True


def _block(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randrange(0, 40)):
        parts.append("".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 4))))
        parts.append(rng.choice(ENDINGS))
    if parts and rng.random() < 0.5:
        parts.pop()  # no final newline
    return "".join(parts).encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff")


@pytest.mark.parametrize("keep_blank", [False, True])
@pytest.mark.parametrize("keep_cr", [False, True])
@pytest.mark.parametrize("binary", [False, True])
def test_split_lines_as_the_regexps_did(keep_blank: bool, keep_cr: bool, binary: bool) -> None:
    rng = random.Random(f"{keep_blank}{keep_cr}{binary}")
    for _ in range(400):
        block = _block(rng)
        lines, rejected = split_lines(block, now=5, keep_blank=keep_blank, keep_cr=keep_cr, binary=binary)
        texts, numbers, bad = reference(block, keep_blank, keep_cr, binary)
        assert lines.text.to_pylist() == texts, block
        assert lines.numbers.tolist() == numbers, block
        assert [r.line for r in rejected] == bad, block
        assert lines.text.type == (pa.large_binary() if binary else pa.large_string())


@pytest.mark.parametrize("block", [b"", b"\n", b"\r\n", b"\r", b"a", b"\n\n\r\n", b"a\r\r\n", b"\xff\r\n \n"])
def test_small_blocks(block: bytes) -> None:
    for keep_blank in (False, True):
        for keep_cr in (False, True):
            lines, rejected = split_lines(block, now=5, keep_blank=keep_blank, keep_cr=keep_cr)
            texts, numbers, bad = reference(block, keep_blank, keep_cr, False)
            assert (lines.text.to_pylist(), lines.numbers.tolist(), [r.line for r in rejected]) == (texts, numbers, bad)
