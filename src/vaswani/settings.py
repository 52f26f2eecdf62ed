"""The grammar of every setting: typed sections, their ranges, ``section.key=value`` overrides, bounds of counts.

Each section of a configuration (``model``, ``data``, ``train``, ``search``, ``serve``) is a dataclass whose
``__post_init__`` calls :func:`validate_settings`: YAML and the command line give strings, and this turns them into
the declared types or raises a ConfigError that names ``section.field``. A section declares its ranges in one
``LIMITS = {field: Limit(...)}`` table. :func:`parse_settings` is the one grammar of every command's ``--set``, and
:func:`apply_overrides` applies it to a section. Once a run's settings are resolved, :func:`settle` freezes them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args, get_type_hints

from vaswani.errors import ConfigError

# The one precision setting of the project: train.precision, the search's precision, --precision of every
# command. "auto" is resolved against the device by vaswani.precision.
Precision = Literal["auto", "bf16", "fp16", "fp32"]
PRECISIONS: tuple[str, ...] = get_args(Precision)



@dataclass(frozen=True)
class Limit:
    """The range a numeric setting must lie in (bounds left as None are open). A config dataclass declares its
    ranges in one ``LIMITS = {field: Limit(...)}`` table; :func:`validate_settings` checks them. ``None`` values
    (an unset optional setting) and each element of a tuple are checked."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def allows(self, value: float) -> bool:
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def describe(self) -> str:
        low = f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}" if self.gt is not None else None
        high = f"<= {self.le:g}" if self.le is not None else f"< {self.lt:g}" if self.lt is not None else None
        return " and ".join(part for part in (low, high) if part)


class Settles:
    """A config section that :func:`settle` freezes: once a run's settings are resolved, assigning to a field of
    its config raises ``dataclasses.FrozenInstanceError``; ``dataclasses.replace`` still makes a changed copy."""

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_settled"):
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}: this config is settled")
        object.__setattr__(self, name, value)


def settle(*sections: Settles) -> None:
    """Freeze these config sections in place (see :class:`Settles`)."""
    for section in sections:
        object.__setattr__(section, "_settled", True)


def validate_settings(obj: Any) -> None:
    """Coerce every field of a config dataclass to its declared type, then check it: ``Literal`` choices, finite
    floats, and the ranges the class declares in ``LIMITS``. Relations between fields stay in the class's
    ``__post_init__``, after this call.

    YAML and the command line give strings ("3e-4", "none", "true"); this turns them into the declared
    float/int/bool/None/tuple or raises a ConfigError that names ``section.field`` (``field`` alone for a class
    whose ``SECTION`` is empty). Every way a config is made
    (a preset, ``--set``, a resumed run's saved config, ``dataclasses.replace``) runs ``__post_init__``, so every
    way is checked.
    """
    hints = _type_hints(type(obj))
    section = getattr(type(obj), "SECTION", "model")
    limits: dict[str, Limit] = getattr(type(obj), "LIMITS", {})
    for f in fields(obj):
        value, name = getattr(obj, f.name), f"{section}.{f.name}" if section else f.name
        try:
            coerced = _coerce(value, hints[f.name])
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}={_short(value)} is not a valid {_type_name(hints[f.name])}",
                              field=name) from None
        object.__setattr__(obj, f.name, coerced)
        allowed = _literal_choices(hints[f.name])
        if allowed and coerced not in allowed:
            raise ConfigError(f"{name}={_short(coerced)} is not one of {list(allowed)}", field=name)
        numbers = coerced if isinstance(coerced, tuple) else (coerced,)
        for number in numbers:
            if isinstance(number, float) and not math.isfinite(number):
                raise ConfigError(f"{name}={_short(coerced)} must be a finite number", field=name)
            limit = limits.get(f.name)
            if limit is not None and isinstance(number, (int, float)) and not limit.allows(number):
                raise ConfigError(f"{name}={_short(coerced)} must be {limit.describe()}", field=name)
            if isinstance(number, float) and not representable(number):
                raise ConfigError(f"{name}={_short(coerced)} {UNREPRESENTABLE}", field=name)


# The float32 arithmetic of the model and the search holds 0 and magnitudes from its smallest normal number to its
# largest: a setting outside that range would silently become 0 or inf there (1e-300 is 0 in float32).
FLOAT32_TINY, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38
UNREPRESENTABLE = "cannot be represented in float32 (it would become 0 or inf); use 0 or a magnitude from 1e-38 to 3e38"


def representable(value: float) -> bool:
    """Is ``value`` 0 or a float32 normal number (no underflow to 0, no overflow to inf)?"""
    return value == 0 or FLOAT32_TINY <= abs(value) <= FLOAT32_MAX


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict[str, Any]:
    # Resolving a class's annotations is most of the cost of checking it (a server makes a search config per
    # request); they never change.
    return get_type_hints(cls)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _literal_choices(tp: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` type allows (None too for an optional one); () for any other type."""
    if getattr(tp, "__origin__", None) is Literal:
        return get_args(tp)
    args = get_args(tp)
    if type(None) in args and len(args) == 2:
        inner = _literal_choices(next(a for a in args if a is not type(None)))
        return (*inner, None) if inner else ()
    return ()


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any) -> Any:
    args = get_args(tp)
    if type(None) in args:  # Optional[X]
        if value is None or (isinstance(value, str) and value.strip().lower() in {"none", "null", ""}):
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0]) if len(inner) == 1 else value
    if getattr(tp, "__origin__", None) is Literal:
        return value
    if tp is bool:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered not in {"true", "false", "1", "0", "yes", "no"}:
                raise ValueError(value)
            return lowered in {"true", "1", "yes"}
        return bool(value)
    if tp is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    if tp is str:
        return str(value)
    if getattr(tp, "__origin__", None) is tuple:
        if isinstance(value, str):
            value = [v for v in value.strip("()[] ").split(",") if v.strip()]
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: any number of X
            return tuple(_coerce(v, args[0]) for v in value)
        return tuple(_coerce(v, t) for v, t in zip(value, args, strict=True))
    return value


def parse_settings(items: list[str], sections: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``section.key=value`` strings grouped by section: the one grammar of every command's ``--set``."""
    grouped: dict[str, dict[str, str]] = {section: {} for section in sections}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name or section not in grouped:
            example = f"{sections[0]}.dropout=0.2" if sections[0] == "model" else f"{sections[0]}.KEY=VALUE"
            raise ConfigError(f"`settings` {item!r}: expected section.key=value with section "
                              f"{' or '.join(sections)}, e.g. {example}", field="settings")
        grouped[section][name] = value
    return grouped


# Upper bounds of the command line's counts: far past what any run of this project uses, far below what would
# exhaust a machine before the work starts (CTranslate2 allocates per thread; a position table is built per length).
MAX_THREADS = 1024  # CPU threads
MAX_LENGTH = 65_536  # tokens of one sequence, or characters of one text
MAX_BATCH = 1 << 20  # sentences, texts or tokens in one batch or one request
MAX_COUNT = 2**31 - 1  # steps, epochs, repeats, sentences, processes, seeds


def apply_overrides(obj: Any, overrides: dict[str, str], section: str) -> Any:
    """Return a copy of dataclass ``obj`` with string overrides; its __post_init__ coerces them to each field's
    declared type and checks it (see :func:`validate_settings`)."""
    names = {f.name for f in fields(obj)}
    changes = {}
    for key, raw in overrides.items():
        if key not in names:
            raise ConfigError(f"unknown setting {section}.{key}; known: {', '.join(sorted(names))}",
                              field=f"{section}.{key}")
        changes[key] = raw
    return dataclasses.replace(obj, **changes)


__all__ = [
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "Limit",
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_LENGTH",
    "MAX_THREADS",
    "PRECISIONS",
    "Precision",
    "Settles",
    "UNREPRESENTABLE",
    "apply_overrides",
    "parse_settings",
    "representable",
    "settle",
    "validate_settings",
]
