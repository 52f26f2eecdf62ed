"""Reading back what was written: JSON and YAML documents bounded in size and depth before they are parsed, and
their shape checked before a field is used."""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from vaswani.errors import VaswaniError

if TYPE_CHECKING:
    import yaml

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


# What a JSON or YAML document holds. An open object (JsonObject) is the honest type only where a file format leaves
# its content to the writer (a manifest's details) or before a reader has checked it (a config's sections);
# everywhere else a document is read into a dataclass (vaswani.records).
JsonValue = Union[str, int, float, bool, None, list["JsonValue"], dict[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]


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
    except ValueError:  # Python's bound on the digits of a whole number
        raise VaswaniError(f"{path}: the {what} {TOO_MANY_DIGITS}; it is not what vaswani wrote") from None
    except RecursionError:
        value, problem = None, f"nested more than {MAX_NESTING} levels deep"
    else:
        problem = document_shape_problem(value)
    if problem is not None:
        raise VaswaniError(f"{path}: the {what} is {problem}; it is not what vaswani wrote")
    return value


TOO_MANY_DIGITS = f"holds a whole number of more than {sys.get_int_max_str_digits():,} digits"


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """The YAML value in ``path`` (:func:`parse_yaml`), a regular file of at most MAX_DOCUMENT_BYTES."""
    return parse_yaml(read_document(path, what), str(path), what)


def parse_yaml(text: str, source: str, what: str = "YAML file") -> Any:
    """The value of the YAML document ``text``, read with the bounds of a JSON file and one more: what the
    document expands to (an alias counts as the whole value it names, every time it is used) holds at most
    MAX_VALUES values nested at most MAX_NESTING deep, checked on the parsed nodes before any value is built,
    so a few hundred bytes of nested aliases ("billion laughs") are refused at once. A key given twice in one
    mapping is an error (a settings file edited by hand easily holds a setting twice, and YAML would keep the
    last one silently). Anything wrong is one VaswaniError naming ``source`` as ``what``."""
    # Here, not at the top: importing yaml compiles its resolver's regular expressions, a cost that `vaswani
    # translate`, which reads no YAML, would pay in its start-up.
    import yaml

    try:
        return yaml.load(text, Loader=_bounded_loader())
    except _TooLarge as error:
        raise VaswaniError(f"{source}: the {what} {error}; it is not what vaswani reads") from None
    except yaml.YAMLError as error:
        raise VaswaniError(f"{source}: the {what} is invalid YAML ({' '.join(str(error).split())})") from None
    except ValueError:  # Python's bound on the digits of a whole number
        raise VaswaniError(f"{source}: the {what} {TOO_MANY_DIGITS}; it is not what vaswani reads") from None
    except RecursionError:  # the YAML parser recurses once per level of nesting
        raise VaswaniError(f"{source}: the {what} is nested more than {MAX_NESTING} levels deep; it is not "
                           "what vaswani reads") from None


class _TooLarge(Exception):
    pass


@functools.cache
def _bounded_loader() -> type[yaml.SafeLoader]:
    """yaml.SafeLoader that measures the node graph before it builds a value and refuses a key given twice."""
    import yaml  # see parse_yaml

    class BoundedLoader(yaml.SafeLoader):
        def compose_document(self) -> yaml.Node:
            node = super().compose_document()
            problem = _node_graph_problem(node)
            if problem is not None:
                raise _TooLarge(problem)
            return node

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):
                    continue  # other keys are left to the reader, which names them
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def _node_graph_problem(root: yaml.Node, nesting: int = MAX_NESTING, values: int = MAX_VALUES) -> str | None:
    """Why the YAML node graph under ``root`` expands to too much (None when it does not): the values and the
    depth of the tree that aliases expand to, computed once per node (so in time linear in the document), and
    an alias to a value that holds it (an endless tree)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in children)
            depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
            if size[key] > values:
                return f"expands to more than {values:,} values (through its aliases)"
            if depth[key] > nesting:
                return f"is nested more than {nesting} levels deep"
            continue
        if key in size:
            continue
        if key in open_nodes:
            return "holds an alias to a value that contains it (an endless value)"
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in size)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if node.id == "sequence":  # yaml.SequenceNode
        return list(node.value)
    if node.id == "mapping":  # yaml.MappingNode
        return [item for pair in node.value for item in pair]
    return []


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
