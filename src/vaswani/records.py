"""Results that cross module boundaries and land in files: dataclasses, written as JSON and read back with every
field checked.

    write_record(run_dir / "summary.json", summary)   # the dataclass as a JSON object, written whole
    summary = read_record(RunSummary, path)           # a damaged field is one VaswaniError naming file and field

A field's type hint is what reading checks: bool, int, float (a whole number is a number too), str, a string
Enum or ``Literal``, ``X | None``, ``list[X]``, ``dict[str, X]``, a nested dataclass, or ``Any`` (not checked).
A field with a default may be missing from the file; keys the dataclass does not know are ignored.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, read_json

Record = TypeVar("Record")


def to_json(record: Any) -> dict[str, Any]:
    """The dataclass ``record`` as a JSON object (nested dataclasses as objects, enums as their values)."""
    return _plain(dataclasses.asdict(record))


def from_json(cls: type[Record], value: Any, source: str) -> Record:
    """``cls`` built from the parsed JSON ``value``; a field of the wrong type is a VaswaniError naming
    ``source`` (a file) and the field."""
    try:
        return _convert(value, cls, "")
    except _Problem as problem:
        raise VaswaniError(f"{source}: {problem}; the file is damaged or was not written by vaswani") from None


def read_record(cls: type[Record], path: str | Path) -> Record:
    """The ``cls`` record in the JSON file ``path``, every field checked."""
    return from_json(cls, read_json(path, f"{cls.__name__} file"), str(path))


def write_record(path: str | Path, record: Any) -> None:
    """Write the dataclass ``record`` to ``path`` as indented JSON, whole or not at all (vaswani.io)."""
    atomic_write_json(path, to_json(record))


class _Problem(Exception):
    """What is wrong with one field, worded for the one-line error."""


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _convert(value: Any, hint: Any, where: str) -> Any:
    name = f'field "{where.rstrip(".")}"' if where else "the file"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        for option in options:  # the first that fits: int before float keeps a whole number whole
            try:
                return _convert(value, option, where)
            except _Problem:
                if len(options) == 1:
                    raise
        raise _Problem(f"{name} is {_shown(value)}, not {' or '.join(_WANTED.get(o, o.__name__) for o in options)}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _Problem(f"{name} is {_shown(value)}, not an object")
        hints = typing.get_type_hints(hint)
        values = {}
        for field in dataclasses.fields(hint):
            if field.name in value:
                values[field.name] = _convert(value[field.name], hints[field.name], f"{where}{field.name}.")
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise _Problem(f'no field "{where}{field.name}"')
        return hint(**values)
    if origin is list:
        if not isinstance(value, list):
            raise _Problem(f"{name} is {_shown(value)}, not an array")
        return [_convert(item, args[0], f"{where.rstrip('.')}[{index}].") for index, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _Problem(f"{name} is {_shown(value)}, not an object")
        return {key: _convert(item, args[1], f"{where}{key}.") for key, item in value.items()}
    if origin is typing.Literal:
        if value not in args:
            raise _Problem(f"{name} is {_shown(value)}, not one of {', '.join(map(str, args))}")
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = [member.value for member in hint]
        if value not in choices:
            raise _Problem(f"{name} is {_shown(value)}, not one of {', '.join(map(str, choices))}")
        return hint(value)
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}[hint]
    if not isinstance(value, kinds) or (isinstance(value, bool) and hint is not bool):
        raise _Problem(f"{name} is {_shown(value)}, not {_WANTED[hint]}")
    return float(value) if hint is float else value


_WANTED = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
