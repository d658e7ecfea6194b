"""A time_format's texts read at fixed byte offsets, without a regular expression.

When every directive of a format has one width in a text (``%d/%b/%Y:%H:%M:%S %z``
with ``+0000`` zones, ``%Y-%m-%dT%H:%M:%S.%N``, ...), :class:`FixedLayout` reads
the texts of that byte length whose every byte is what the layout wants (digits,
the literals, a month name, a zone) straight from the Arrow data buffer with
numpy. For such a text the format's regex (:func:`.strptime.strptime_regex`)
takes exactly those widths (every greedy choice is the longest, and the rest
matches), so the numbers are the ones its groups give: :func:`.strptime.strptime_ns`
then treats them like the groups. Texts that do not fit take the regex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .strptime import _COMPOSITE, MONTHS, NEVER, strptime_regex

#: digits of a fixed width: directive -> (width, the regex's group)
_DIGITS = {
    "Y": (4, "Y"),
    "C": (2, "C"),
    "y": (2, "y"),
    "m": (2, "m"),
    "d": (2, "d"),
    "e": (2, "d"),
    "j": (3, "j"),
    "H": (2, "H"),
    "k": (2, "H"),
    "I": (2, "I"),
    "l": (2, "I"),
    "M": (2, "M"),
    "S": (2, "S"),
}
#: month number by the low five bits of its name's three letters (0: no month)
_MONTH_TABLE = np.zeros(1 << 15, dtype=np.int8)
for _month, _name in enumerate(MONTHS, 1):
    _MONTH_TABLE[((ord(_name[0]) & 31) << 10) | ((ord(_name[1]) & 31) << 5) | (ord(_name[2]) & 31)] = _month
_FRACTION = "frac"
_SAMPLE = 64  # texts that choose the length and zone form


@dataclass(frozen=True)
class _Field:
    kind: str  # "lit", "num", "mon", "frac", "zone"
    group: str  # the regex's group ("" for a literal)
    byte: int = 0  # a literal's byte


def _elements(time_format: str) -> list[_Field] | None:
    """The format as fields (a literal per byte), or None if one has no fixed width or its neighbours could change
    what the regex takes."""
    for short, long in _COMPOSITE.items():
        time_format = time_format.replace("%" + short, long)
    out: list[_Field] = []
    for token in re.findall(r"%.|[^%]", time_format, re.S):
        name = token[1:]
        if name in _DIGITS:
            out.append(_Field("num", _DIGITS[name][1]))
        elif name in ("b", "h", "B"):
            out.append(_Field("mon", "b"))
        elif name in ("N", "L"):
            out.append(_Field(_FRACTION, "N"))
        elif name in ("z", "Z"):
            out.append(_Field("zone", "z"))
        elif len(token) == 1:
            out.extend(_Field("lit", "", byte) for byte in token.encode())
        else:
            return None
    for field, after in zip(out, [*out[1:], None], strict=True):
        if field.kind == "mon" and after is not None and after.kind == "lit" and chr(after.byte).isalpha():
            return None  # the regex would try the long month names into the letters
        if field.kind == _FRACTION and after is not None and after.kind in ("num", _FRACTION):
            return None  # \d+ would eat the digits after
    return out


class FixedLayout:
    """The fixed-width reading of one time_format (see the module docstring); :func:`fixed_layout` makes one."""

    def __init__(self, fields: list[_Field]):
        self.fields = fields
        self.groups = tuple(dict.fromkeys(f.group for f in fields if f.group))

    def read(self, texts: pa.Array) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The rows of ``texts`` (a large_string array) read here, and the numbers of their groups: each digit group,
        ``b`` the month (1-12), ``N`` the fraction in ns, ``z`` the zone's offset in seconds."""
        count = len(texts)
        offsets = np.frombuffer(texts.buffers()[1], np.int64)[texts.offset : texts.offset + count + 1]
        data = np.frombuffer(texts.buffers()[2] or b"", np.uint8)
        lengths = np.diff(offsets)
        valid = texts.is_valid().to_numpy(zero_copy_only=False)
        sample = np.flatnonzero(valid)[:_SAMPLE]
        if not len(sample):
            return sample, {}
        length = int(np.bincount(lengths[sample]).argmax())  # the texts' usual length decides the widths
        rows = np.flatnonzero(valid & (lengths == length))
        if len(rows) == count and offsets[-1] - offsets[0] == count * length:  # one run of bytes
            table = data[offsets[0] : offsets[-1]].reshape(count, length)
        else:
            table = data[offsets[rows][:, None] + np.arange(length)]
        forms = self._widths(length)
        tried = [int(self._numbers(table[:_SAMPLE], widths)[0].sum()) for widths in forms]
        if not forms or not max(tried):
            return rows[:0], {}
        ok, groups = self._numbers(table, forms[int(np.argmax(tried))])
        if ok.all():
            return rows, groups
        keep = np.flatnonzero(ok)
        return rows[keep], {k: v[keep] for k, v in groups.items()}

    def _widths(self, length: int) -> list[list[int]]:
        """Each field's width in a text of ``length`` bytes, per zone form (``+0000``, ``+00:00``)."""
        forms = []
        for zone in (5, 6) if any(f.kind == "zone" for f in self.fields) else (0,):
            widths = [{"num": 0, "lit": 1, "mon": 3, "zone": zone, _FRACTION: 0}[f.kind] for f in self.fields]
            for i, field in enumerate(self.fields):
                if field.kind == "num":
                    widths[i] = 4 if field.group == "Y" else 3 if field.group == "j" else 2
            fractions = [i for i, f in enumerate(self.fields) if f.kind == _FRACTION]
            if fractions:
                widths[fractions[0]] = length - sum(widths)
            if sum(widths) == length and min(widths) > 0:
                forms.append(widths)
        return forms

    def _numbers(self, table: np.ndarray, widths: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The rows of ``table`` (one text a row) the layout reads, and their groups' numbers."""
        literals, digits = [], []
        at = 0
        for field, width in zip(self.fields, widths, strict=True):
            if field.kind == "lit":
                literals.append((at, field.byte))
            elif field.kind == "zone":
                literals += [(at + 3, ord(":"))] if width == 6 else []
                digits += [at + 1, at + 2, at + width - 2, at + width - 1]
            elif field.kind != "mon":
                digits += range(at, at + width)
            at += width
        columns, wanted = zip(*literals, strict=True) if literals else ((), ())
        ok = (table[:, list(columns)] == np.array(wanted, np.uint8)).all(axis=1)
        ok &= ((table[:, digits] - np.uint8(ord("0"))) < 10).all(axis=1)  # bytes below "0" wrap past 9
        return ok, self._groups(table, widths, ok)

    def _groups(self, table: np.ndarray, widths: list[int], ok: np.ndarray) -> dict[str, np.ndarray]:
        groups: dict[str, np.ndarray] = {}
        at = 0
        for field, width in zip(self.fields, widths, strict=True):
            if field.kind == "mon":
                lower = table[:, at : at + 3] | np.uint8(0x20)  # only letters become lower-case letters
                letters = ((lower >= ord("a")) & (lower <= ord("z"))).all(axis=1)
                key = lower.astype(np.int32) & 31
                groups["b"] = _MONTH_TABLE[(key[:, 0] << 10) | (key[:, 1] << 5) | key[:, 2]].astype(np.int64)
                ok &= letters & (groups["b"] > 0)
            elif field.kind == "zone":
                hours, minutes = _number(table, at + 1, 2), _number(table, at + width - 2, 2)
                ok &= ((table[:, at] == ord("+")) | (table[:, at] == ord("-"))) & (hours <= 23) & (minutes <= 59)
                seconds = hours * 3600 + minutes * 60  # impossible zones (above) left to the regex path
                groups["z"] = np.where(table[:, at] == ord("-"), -seconds, seconds)
            elif field.kind == _FRACTION:  # its first nine digits
                groups["N"] = _number(table, at, min(width, 9)) * 10 ** max(9 - width, 0)
            elif field.kind == "num":
                groups[field.group] = _number(table, at, width)
            at += width
        return groups


def _number(table: np.ndarray, at: int, width: int) -> np.ndarray:
    """The number the ASCII digits in columns ``at`` to ``at + width`` of ``table`` write (int64)."""
    value = table[:, at].astype(np.int64) - ord("0")
    for column in range(at + 1, at + width):
        value = value * 10 + table[:, column] - ord("0")
    return value


def fixed_layout(time_format: str) -> FixedLayout | None:
    """The fixed-width reading of ``time_format``, or None where its widths vary (the regex reads it then)."""
    if strptime_regex(time_format) == NEVER:
        return None
    fields = _elements(time_format)
    return FixedLayout(fields) if fields else None
