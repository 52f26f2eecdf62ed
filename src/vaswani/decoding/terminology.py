"""The phrases each translation must contain, as users give them: a constraints file (one line per input
sentence, its phrases separated by tabs, an empty line for none) or a glossary (``source term<TAB>target
term`` per line: the target term is a constraint of every sentence whose source contains the source term as
whole words). The search that places them is constraints.py; this module reads text only (no torch).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from vaswani.data.textfiles import read_lines
from vaswani.errors import VaswaniError


class UnusableLine(VaswaniError):
    """A line of what the user gave the search beside the sources that it cannot use, and its index (from 0):
    the server names the request's field and index with it."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


class UnusableConstraint(UnusableLine):
    """A constraint (or a constraints file or glossary line) the search cannot use."""


class UnusablePrefix(UnusableLine):
    """A prefix the search cannot force (longer than its sentence's output limit)."""


def parse_constraints(lines: Sequence[str], name: str = "constraints") -> list[list[str]]:
    """Each line's tab-separated phrases (an empty line: none); an empty phrase between tabs is an
    UnusableConstraint naming ``name:line``."""
    parsed = []
    for index, line in enumerate(lines):
        line = line.rstrip("\r\n")
        if not line.strip():
            parsed.append([])
            continue
        phrases = [phrase.strip() for phrase in line.split("\t")]
        if not all(phrases):
            raise UnusableConstraint(f"{name}:{index + 1}: an empty constraint (two tabs in a row, or one at an "
                                     "end); separate phrases by one tab", index)
        parsed.append(phrases)
    return parsed


def parse_glossary(lines: Sequence[str], name: str = "glossary") -> list[tuple[str, str]]:
    """(source term, target term) per non-blank line; a line without a tab, or with an empty term, is an
    UnusableConstraint naming ``name:line``."""
    entries = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise UnusableConstraint(f"{name}:{index + 1}: expected 'source term<TAB>target term' (one tab, "
                                     "two non-empty terms)", index)
        entries.append((fields[0].strip(), fields[1].strip()))
    return entries


def glossary_constraints(sources: Sequence[str], glossary: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Per source sentence, the target terms of the glossary entries whose source term it contains as whole
    words (case-sensitive: a glossary distinguishes a noun from a verb), each once, in glossary order."""
    patterns = [(re.compile(rf"(?<!\w){re.escape(term)}(?!\w)"), target) for term, target in glossary]
    found = []
    for source in sources:
        targets: list[str] = []
        for pattern, target in patterns:
            if target not in targets and pattern.search(source):
                targets.append(target)
        found.append(targets)
    return found


def read_constraints(constraints: Path | None, glossary: Path | None, sources: Sequence[str]) -> list[list[str]]:
    """The phrases of each source sentence from a constraints file and/or a glossary (both: the file's phrases,
    then the glossary's not among them); a constraints file whose line count is not the input's is an
    UnusableConstraint."""
    phrases: list[list[str]] = [[] for _ in sources]
    if constraints is not None:
        lines = read_lines(constraints)
        if len(lines) != len(sources):
            raise UnusableConstraint(f"{constraints} has {len(lines)} lines for {len(sources)} input lines: give "
                                     "one per input line (an empty line for none)", min(len(lines), len(sources)))
        phrases = parse_constraints(lines, str(constraints))
    if glossary is not None:
        terms = glossary_constraints(sources, parse_glossary(read_lines(glossary), str(glossary)))
        phrases = [own + [term for term in extra if term not in own] for own, extra in zip(phrases, terms)]
    return phrases
