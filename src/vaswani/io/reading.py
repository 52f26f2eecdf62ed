"""Reading back what was written: JSON and YAML documents bounded in size and depth before they are parsed, and
their shape checked before a field is used."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from vaswani.errors import VaswaniError



MAX_DOCUMENT_BYTES = 256 << 20


MAX_NESTING = 64


MAX_VALUES = 20_000_000


def read_document(path: str | Path, what: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes (checked before it is read); anything
    else is a VaswaniError naming it as ``what``."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise VaswaniError(f"{path}: the {what} is not a regular file; it is not what vaswani wrote")
            if info.st_size > limit:
                raise VaswaniError(f"{path}: the {what} is {info.st_size:,} bytes, more than the {limit:,} vaswani "
                                   "reads; it is not what vaswani wrote")
            data = handle.read(limit + 1)
    except OSError as error:
        raise VaswaniError(f"{path}: the {what} cannot be read ({error.strerror or error})") from None
    if len(data) > limit:  # grew while being read
        raise VaswaniError(f"{path}: the {what} is more than the {limit:,} bytes vaswani reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise VaswaniError(f"{path}: the {what} is not UTF-8 text; it is damaged or not what vaswani wrote") from None


def document_shape_problem(value: Any, nesting: int = MAX_NESTING, values: int = MAX_VALUES) -> str | None:
    """Why a parsed JSON or YAML ``value`` is too deep or too large to hand on (None when it is not): walked without
    recursion, and shared values (YAML aliases) counted each time they are reached, as a reader would."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > values:
            return f"more than {values:,} values"
        if isinstance(item, (dict, list, tuple)):
            if depth > nesting:
                return f"nested more than {nesting} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """The JSON value in ``path``; a file that cannot be read, is larger than MAX_DOCUMENT_BYTES, is not UTF-8, is
    not JSON or is nested deeper than MAX_NESTING is a VaswaniError naming it as ``what`` (e.g. "classifier
    description")."""
    path = Path(path)
    text = read_document(path, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise VaswaniError(f"{path}: the {what} is not valid JSON ({error}); it is damaged or not what vaswani "
                           "wrote") from None
    except RecursionError:
        value, problem = None, f"nested more than {MAX_NESTING} levels deep"
    else:
        problem = document_shape_problem(value)
    if problem is not None:
        raise VaswaniError(f"{path}: the {what} is {problem}; it is not what vaswani wrote")
    return value


NUMBER = (int, float)


def json_shape_problem(value: Any, shape: Any, where: str = "") -> str | None:
    """What makes the parsed JSON ``value`` unlike ``shape`` (the first problem, naming its field), or None.

    A shape is a type or tuple of types (``NUMBER`` for int or float; true and false are never numbers), a dict of
    shapes (an object with those keys; a key ending in "?" may be absent or null), or a one-element list (a non-empty
    array of that shape). Numbers must be finite. Readers check a file once, against the shape of everything they
    read, so a damaged field is one message naming it rather than a KeyError deep inside a report.
    """
    name = where.rstrip(".") or "the file"
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{name} is {_json_kind(value)}, not an object"
        for key, inner in shape.items():
            field_name, optional = key.removesuffix("?"), key.endswith("?")
            if value.get(field_name) is None and optional:
                continue
            if field_name not in value:
                return f"no {where}{field_name!r}"
            problem = json_shape_problem(value[field_name], inner, f"{where}{field_name}.")
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list) or not value:
            return f"{name} is {_json_kind(value)}, not a non-empty array"
        for index, item in enumerate(value):
            problem = json_shape_problem(item, shape[0], f"{where.rstrip('.')}[{index}].")
            if problem:
                return problem
        return None
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", type(None): "null",
                 list: "an array", dict: "an object"}
        wanted = [names[k] for k in kinds if not (k is int and float in kinds)]  # int or float: "a number"
        return f"{name} is {_json_kind(value)}, not {' or '.join(wanted)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} is {value}, not a finite number"
    return None


def _json_kind(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
