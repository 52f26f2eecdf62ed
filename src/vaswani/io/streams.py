"""The standard streams a command reads or writes, when the shell gave them: a closed one is a one-line error
saying which option to pass instead."""

from __future__ import annotations

import sys
from typing import Literal, TextIO

from vaswani.errors import VaswaniError


def standard_stream(name: Literal["stdin", "stdout"], instead: str) -> TextIO:
    """``sys.stdin`` or ``sys.stdout``; a one-line error saying what to do ``instead`` when the shell started us
    with it closed (``<&-``, ``>&-``), which Python shows as None."""
    stream = getattr(sys, name)
    if stream is None:
        label = "standard input" if name == "stdin" else "standard output"
        raise VaswaniError(f"{label} is closed; {instead}")
    return stream
