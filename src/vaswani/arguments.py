"""The options every command line shares: ``--set section.key=value`` (and a study's ``--variant``), and numbers
checked against a declared range while the arguments are parsed.

The command line's side of the settings: the core parses ``section.key=value`` (:func:`vaswani.config.parse_settings`)
and checks values (:func:`vaswani.config.validate_settings`); this module wires them into argparse. Only the
commands (``cli.py`` and each area's ``commands.py``, and the studies built on the core) import it.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from vaswani.errors import ConfigError
from vaswani.settings import UNREPRESENTABLE, Limit, representable


def add_settings_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, sections: tuple[str, ...],
                          example: str) -> None:
    """The ``--set section.key=value`` option (repeatable), read back with :func:`vaswani.config.parse_settings`."""
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help=f"override a {'/'.join(sections)} setting, e.g. --set {example} (repeatable)")


def ranged(kind: type[int] | type[float], **bounds: float) -> Callable[[str], Any]:
    """An argparse ``type=`` for a command-line number of ``kind`` inside ``Limit(**bounds)``, e.g.
    ``ranged(int, ge=1)``. Anything else (out of range, not a number, nan, inf) stops the command while its
    arguments are parsed, with argparse's one-line usage error naming the option: before any data is read or any
    model built, and never as a traceback from deep inside the run."""
    limit = Limit(**bounds)
    wanted = f"{'a whole number' if kind is int else 'a number'} {limit.describe()}".rstrip()

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"needs {wanted}, got {text!r}") from None
        if not math.isfinite(value) or not limit.allows(value):
            raise argparse.ArgumentTypeError(f"needs {wanted}, got {text!r}")
        if kind is float and not representable(value):
            raise argparse.ArgumentTypeError(f"needs {wanted}, got {text!r}, which {UNREPRESENTABLE}")
        return value

    parse.limit = limit  # the declared range travels with the option (tests check that every number has one)
    parse.kind = kind
    return parse


def parse_variant(spec: str, sections: tuple[str, ...]) -> tuple[str, list[str]]:
    """``NAME:section.key=value,section.key=value`` (a command's ``--variant``) as the name and its ``--set``
    items. A comma starts a new item only where ``section.key=`` follows, so tuple values keep theirs:
    ``adam:train.betas=0.9,0.995,train.eps=1e-8``."""
    name, _, assignments = spec.partition(":")
    expected = f"expected NAME:{sections[0]}.KEY=VALUE[,{sections[0]}.KEY=VALUE] with section {' or '.join(sections)}"
    items: list[str] = []
    for piece in assignments.split(",") if assignments.strip() else []:
        section, dot, key = piece.partition("=")[0].strip().partition(".")
        if "=" in piece and dot and key and section in sections:
            items.append(piece.strip())
        elif items:  # a tuple value's next element
            items[-1] += "," + piece.strip()
        else:
            raise ConfigError(f"--variant {spec!r}: {piece.strip()!r} is not section.key=value; {expected}")
    if not name.strip() or not items:
        raise ConfigError(f"--variant {spec!r}: {expected}")
    return name.strip(), items
