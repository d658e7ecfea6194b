"""A parsed TOML document as msgspec Structs, its errors told in the file's words rather than msgspec's.

The Structs declare a format: their fields are the keys a table allows
(``forbid_unknown_fields``) and their types what each key holds; a
``Literal`` or an Enum names a key's choices, and a bound (``msgspec.Meta``)
carries as its ``description`` the sentence a value outside it is told.
:func:`convert` turns msgspec's error (a JSON path and a message) into one
that names the place as the file writes it: ``plant.toml [vibration]``,
``plant.toml [[fields]] #2 ('power')``, and the key.
"""

from __future__ import annotations

import re
import types
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec

from .errors import SchemaError

T = TypeVar("T", bound=msgspec.Struct)

#: The key that names an entry of an array of tables in messages about its other keys.
LABEL = "name"
#: msgspec's names of the types a value was expected to be, in the words of a TOML file.
_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "an integer or a number",  # a TOML integer is taken where a float is declared
    "bool": "true or false",
    "array": "a list",
    "object": "a table",
}
_AT = " - at `$"  # what stands between msgspec's problem and its path
#: A step of msgspec's path: into a key of a table, and on into an item of its list.
_STEP = re.compile(r"\.(\w+)(?:\[(\d+)\])?")
_MISSING = re.compile(r"Object missing required field `(?P<key>[^`]*)`")
_WRONG_TYPE = re.compile(r"Expected `(?P<expected>[^`]*)`, got `")
_UNKNOWN = "Object contains unknown field"
_NOT_A_CHOICE = "Invalid enum value"


def convert(document: dict[str, Any], type_: type[T], where: str) -> T:
    """``document`` (as :mod:`tomllib` parses it) as a ``type_``; SchemaError naming ``where``, the table and
    the key that is wrong, and what the key takes."""
    try:
        return msgspec.convert(document, type_)
    except msgspec.ValidationError as exc:
        raise SchemaError(_message(str(exc), document, type_, where)) from None


class _Place:
    """The table of the document an error is in, as msgspec's path leads to it, and the step left within it."""

    def __init__(self, path: str, table: dict[str, Any], struct: type[msgspec.Struct], where: str) -> None:
        self.table = table
        self.struct = struct
        self.where = where
        self.label = ""  # an array entry's name, for messages about its other keys
        steps = [(key, int(index) if index else None) for key, index in _STEP.findall(path)]
        while steps and self._enter(*steps[0]):
            del steps[0]
        #: The key of the table the error is at, and the item of its list, if any; None: the table itself.
        self.step = steps[0] if steps else None

    def _enter(self, key: str, index: int | None) -> bool:
        """Step into the table ``key`` (and ``index``) leads to, if it is one; whether it was."""
        inner = _tables_of(self.struct, key)
        value = self.table.get(key)
        if inner is None:
            return False
        struct, array = inner
        if array:
            if index is None or not isinstance(value, list) or not isinstance(value[index], dict):
                return False
            value = value[index]
            self.where = f"{self.where} [[{key}]] #{index + 1}"
            self.label = f" ({value[LABEL]!r})" if isinstance(value.get(LABEL), str) else ""
        else:
            if index is not None or not isinstance(value, dict):
                return False
            self.where = f"{self.where} [{key}]"
            self.label = ""
        self.table, self.struct = value, struct
        return True


def _message(error: str, document: dict[str, Any], type_: type[msgspec.Struct], where: str) -> str:
    problem, at, path = error.partition(_AT)
    place = _Place(path.removesuffix("`") if at else "", document, type_, where)
    where, struct = place.where, place.struct
    if place.step is None:
        if problem.startswith(_UNKNOWN):
            allowed = [f.encode_name for f in msgspec.structs.fields(struct)]
            unknown = sorted(set(place.table) - set(allowed))
            return f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(allowed))}"
        missing = _MISSING.fullmatch(problem)
        if missing:
            return f"{where}{place.label}: '{missing['key']}' is required"
        return f"{where}: {problem}"
    key, index = place.step
    inner = _tables_of(struct, key)
    if index is not None and inner is not None and inner[1]:
        return f"{where} [[{key}]] #{index + 1}: each [[{key}]] entry must be a table"
    where = f"{where}{place.label}"
    wrong_type = _WRONG_TYPE.match(problem)
    if index is None and wrong_type:
        if inner is not None and not inner[1]:
            return f"{where} [{key}]: must be a table"
        words = [_TYPE_WORDS.get(t, t) for t in wrong_type["expected"].split(" | ") if t != "null"]
        return f"{where}: '{key}' must be {' or '.join(words)}, not {place.table[key]!r}"
    if index is None and problem.startswith(_NOT_A_CHOICE):
        return f"{where}: {key} {place.table[key]!r} is not one of {', '.join(_choices(struct, key))}"
    # A bound of the key's value, or a wrong item of its list: the sentence the key's bound says itself in.
    return f"{where}: {_bound(struct, key) or f'{key!r}: {problem}'}"


def _hint(struct: type[msgspec.Struct], key: str) -> tuple[Any, list[msgspec.Meta]]:
    """The type ``key`` of ``struct`` is declared with, bare (:func:`_bare`), and its Meta."""
    field = next(f for f in msgspec.structs.fields(struct) if f.encode_name == key)
    return _bare(get_type_hints(struct, include_extras=True)[field.name])


def _bare(hint: Any) -> tuple[Any, list[msgspec.Meta]]:
    """``hint`` without its Annotated and its None (a TOML file has no null), and the Meta it was annotated with."""
    metas: list[msgspec.Meta] = []
    while True:
        if get_origin(hint) is Annotated:
            hint, *extras = get_args(hint)
            metas += [m for m in extras if isinstance(m, msgspec.Meta)]
        elif get_origin(hint) in (Union, types.UnionType):
            hints = [h for h in get_args(hint) if h is not type(None)]
            if len(hints) != 1:
                return hint, metas
            hint = hints[0]
        else:
            return hint, metas


def _is_struct(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, msgspec.Struct)


def _tables_of(struct: type[msgspec.Struct], key: str) -> tuple[type[msgspec.Struct], bool] | None:
    """The Struct of the table (False) or the array of tables (True) ``key`` holds, or None if it holds neither."""
    hint, _ = _hint(struct, key)
    if _is_struct(hint):
        return hint, False
    if get_origin(hint) is list:
        item, _ = _bare(get_args(hint)[0])
        if _is_struct(item):
            return item, True
    return None


def _choices(struct: type[msgspec.Struct], key: str) -> list[str]:
    """The values ``key`` may take, as its Literal or Enum names them."""
    hint, _ = _hint(struct, key)
    if get_origin(hint) is Literal:
        return [str(choice) for choice in get_args(hint)]
    if isinstance(hint, type) and issubclass(hint, Enum):
        return [str(member.value) for member in hint]
    return []


def _bound(struct: type[msgspec.Struct], key: str) -> str | None:
    """The sentence the bound of ``key``'s value says itself in (its Meta's description), if it has one."""
    _, metas = _hint(struct, key)
    return next((m.description for m in metas if m.description), None)
