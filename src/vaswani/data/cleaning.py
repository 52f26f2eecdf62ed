"""Cleaning a parallel corpus: rules that drop noisy pairs, each one optional and counted, streamed.

``vaswani clean`` reads two aligned files (or one TSV file) the way training reads them (data/files.py: every
line checked for UTF-8, the two sides for the same number of lines) and keeps the pairs that no rule drops. A
pair is dropped by the first of these rules, in this order, that applies to it:

1. ``empty``: a side is empty or only spaces (always on: such a pair teaches nothing);
2. ``too_long``: a side longer than ``max_chars`` characters;
3. ``length_ratio``: the longer side has more than ``max_ratio`` times the characters of the shorter;
4. ``source_equals_target``: both sides are the same text (copies of the source, untranslated);
5. ``foreign_script``: fewer than ``min_script_share`` of a side's letters are in the scripts of its language
   (data/languages.py ``SCRIPTS``): a sentence in the other language, or in another script altogether;
6. ``wrong_language``: a language identifier (data/language_id.py, the optional py3langid) is sure, at
   ``min_language_confidence`` or more, that a side is in another language than its own: swapped sides, a
   sentence in a third language. The costliest rule (a few thousand sentences a second), tried last;
7. ``duplicate_pair``: the same pair occurred earlier (the first is kept);
8. ``duplicate_source``: the same source sentence occurred earlier with another target.

Memory does not grow with the text: the files are read in chunks, twice (once to decide, once to write the
kept pairs), and what is kept between the two passes is a byte per pair (the rule that dropped it) and two
8-byte hashes (of the pair and of its source), from which the duplicates are found by sorting.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vaswani.data.files import FileSplit, decode_chunk, progress_bar, read_chunks
from vaswani.data.fingerprints import fingerprint
from vaswani.data.language_id import LanguageCheck
from vaswani.data.languages import LanguagePair, language_scripts
from vaswani.errors import ConfigError, DataError

EMPTY, TOO_LONG, LENGTH_RATIO, COPY, FOREIGN_SCRIPT, WRONG_LANGUAGE, DUPLICATE_PAIR, DUPLICATE_SOURCE = (
    "empty", "too_long", "length_ratio", "source_equals_target", "foreign_script", "wrong_language",
    "duplicate_pair", "duplicate_source")
RULES = (EMPTY, TOO_LONG, LENGTH_RATIO, COPY, FOREIGN_SCRIPT, WRONG_LANGUAGE, DUPLICATE_PAIR, DUPLICATE_SOURCE)
KEPT = 0  # the code of a kept pair; a dropped one's is 1 + its rule's index in RULES


@dataclass(frozen=True)
class CleaningRules:
    """Which rules apply, with their limits (None: the rule is off)."""

    duplicates: bool = True
    duplicate_sources: bool = False
    copies: bool = True
    max_chars: int | None = None
    max_ratio: float | None = None
    scripts: bool = False
    min_script_share: float = 0.5
    language_id: bool = False
    min_language_confidence: float = 0.5
    examples: int = 3  # pairs shown in the report for each rule

    def __post_init__(self) -> None:
        if self.max_chars is not None and self.max_chars < 1:
            raise ConfigError(f"max_chars={self.max_chars} must be >= 1", field="max_chars")
        if self.max_ratio is not None and not self.max_ratio >= 1:  # NaN too
            raise ConfigError(f"max_ratio={self.max_ratio} must be >= 1 (the longer side over the shorter)",
                              field="max_ratio")
        if not 0 < self.min_script_share <= 1:
            raise ConfigError(f"min_script_share={self.min_script_share} must be in (0, 1]",
                              field="min_script_share")
        if not 0 < self.min_language_confidence <= 1:
            raise ConfigError(f"min_language_confidence={self.min_language_confidence} must be in (0, 1]",
                              field="min_language_confidence")
        if self.examples < 0:
            raise ConfigError(f"examples={self.examples} must be >= 0", field="examples")

    def applied(self) -> list[str]:
        """The rules that are on, in the order they are tried."""
        on = {EMPTY: True, TOO_LONG: self.max_chars is not None, LENGTH_RATIO: self.max_ratio is not None,
              COPY: self.copies, FOREIGN_SCRIPT: self.scripts, WRONG_LANGUAGE: self.language_id,
              DUPLICATE_PAIR: self.duplicates,
              DUPLICATE_SOURCE: self.duplicate_sources}
        return [rule for rule in RULES if on[rule]]


@dataclass
class DroppedPair:
    """One pair a rule dropped, for the report: its line in the input and its two sides."""

    line: int
    source: str
    target: str


@dataclass
class RuleResult:
    """How many pairs one rule dropped, and the first few of them."""

    rule: str
    dropped: int
    examples: list[DroppedPair] = field(default_factory=list)


@dataclass
class CleaningReport:
    """What cleaning read, what it kept, and what each rule dropped (every rule that was on, in order)."""

    inputs: list[str]
    outputs: list[str]
    languages: dict[str, str]
    pairs: int
    kept: int
    rules: list[RuleResult]
    settings: dict[str, float | int | bool | None]

    def text(self) -> str:
        """The report for people: the counts, then a few examples of each rule."""
        share = lambda n: f"{100 * n / max(self.pairs, 1):.1f} %"  # noqa: E731
        lines = [f"read {self.pairs:,} pairs from {', '.join(self.inputs)}",
                 f"kept {self.kept:,} ({share(self.kept)}) in {', '.join(self.outputs)}"]
        lines += [f"  {result.rule:<22} dropped {result.dropped:>10,} ({share(result.dropped)})"
                  for result in self.rules]
        for result in self.rules:
            if result.examples:
                lines.append(f"{result.rule}, for example:")
                lines += [f"  line {example.line}: {example.source[:80]!r} ||| {example.target[:80]!r}"
                          for example in result.examples]
        return "\n".join(lines) + "\n"


def script_of(char: str) -> str | None:
    """The script of a letter, as the first word of its Unicode name (``CJK`` for Han ideographs; a full- or
    half-width form counts as its script); None for anything that is not a letter."""
    if not unicodedata.category(char).startswith("L"):
        return None
    words = unicodedata.name(char, "").split()
    if words[:1] in (["FULLWIDTH"], ["HALFWIDTH"]):
        words = words[1:]
    return words[0] if words else None


class ScriptCheck:
    """The share of a text's letters in a language's scripts, with each character's script looked up once."""

    def __init__(self, code: str, setting: str) -> None:
        scripts = language_scripts(code)
        if scripts is None:
            raise ConfigError(f"{setting}: vaswani does not know the scripts of language {code!r}; leave out "
                              "the script rule (--scripts)", field=setting)
        self.scripts = frozenset(scripts)
        self.known: dict[str, bool | None] = {}  # a letter: in the scripts; anything else: None

    def share(self, text: str) -> float:
        """The share of ``text``'s letters in the language's scripts (1.0 for a text without letters)."""
        if text.isascii() and "LATIN" in self.scripts:
            return 1.0
        letters = inside = 0
        for char, count in Counter(text).items():
            if char not in self.known:
                script = script_of(char)
                self.known[char] = None if script is None else script in self.scripts
            verdict = self.known[char]
            if verdict is not None:
                letters += count
                inside += count if verdict else 0
        return inside / letters if letters else 1.0


def clean_corpus(split: FileSplit, languages: LanguagePair | None, rules: CleaningRules,
                 progress: bool = False) -> tuple[np.ndarray, CleaningReport]:
    """Decide which pairs of ``split`` (one part: two aligned files or a TSV file) each rule drops. Returns
    one code a pair (:data:`KEPT`, or 1 + the index in :data:`RULES` of the rule that dropped it) and the
    report without examples or outputs (:func:`write_kept` adds the examples). Reads every line; a file that
    is missing or empty, two files of different lengths and a byte that is not UTF-8 are one DataError naming
    the file."""
    checks = language_checks = None
    if (rules.scripts or rules.language_id) and languages is None:
        rule = "script" if rules.scripts else "language"
        raise ConfigError(f"the {rule} rule needs the two languages: name them with --src-lang and --tgt-lang, "
                          "or give files whose names end in their codes (train.fr, train.en)")
    if rules.scripts:
        checks = (ScriptCheck(languages.source, "source language"),
                  ScriptCheck(languages.target, "target language"))
    if rules.language_id:  # before the files are read: a missing package or language is refused at once
        language_checks = (LanguageCheck(languages.source, rules.min_language_confidence, "source language"),
                           LanguageCheck(languages.target, rules.min_language_confidence, "target language"))
    pairs = fingerprint(split, progress).pairs
    codes = np.zeros(pairs, dtype=np.uint8)
    pair_hashes = np.zeros(pairs, dtype=np.uint64)
    source_hashes = np.zeros(pairs, dtype=np.uint64)
    code = {rule: RULES.index(rule) + 1 for rule in RULES}
    with progress_bar(pairs, "cleaning: checking", progress) as bar:
        for chunk in read_chunks(split):
            sources, targets = decode_chunk(chunk)
            for offset, (source, target) in enumerate(zip(sources, targets)):
                index, source_bytes = chunk.start + offset, source.encode()
                source_hashes[index] = _hash(source_bytes)
                pair_hashes[index] = _hash(source_bytes + b"\t" + target.encode())
                codes[index] = _rule_for(source, target, rules, checks, code)
                if codes[index] == KEPT and language_checks is not None and (
                        language_checks[0].is_foreign(source) or language_checks[1].is_foreign(target)):
                    codes[index] = code[WRONG_LANGUAGE]
            bar.update(len(chunk))
    if rules.duplicates:
        _drop_repeats(codes, pair_hashes, code[DUPLICATE_PAIR])
    if rules.duplicate_sources:
        _drop_repeats(codes, source_hashes, code[DUPLICATE_SOURCE])
    counts = np.bincount(codes, minlength=len(RULES) + 1)
    report = CleaningReport(
        inputs=[str(path) for part in split.parts for path in part.paths], outputs=[],
        languages=languages.to_dict() if languages else {}, pairs=pairs, kept=int(counts[KEPT]),
        rules=[RuleResult(rule, int(counts[code[rule]])) for rule in rules.applied()],
        settings={"max_chars": rules.max_chars, "max_ratio": rules.max_ratio,
                  "min_script_share": rules.min_script_share if rules.scripts else None,
                  "min_language_confidence": rules.min_language_confidence if rules.language_id else None})
    if report.kept == 0:
        worst = max(report.rules, key=lambda result: result.dropped)
        raise DataError(f"{split.describe()}: no pair is left after cleaning ({worst.rule} dropped "
                        f"{worst.dropped:,} of {pairs:,}); nothing was written: loosen or leave out that "
                        "rule")
    return codes, report


def _rule_for(source: str, target: str, rules: CleaningRules, checks: tuple[ScriptCheck, ScriptCheck] | None,
              code: dict[str, int]) -> int:
    """The code of the first rule before the duplicate rules that drops the pair, or KEPT."""
    stripped_source, stripped_target = source.strip(), target.strip()
    if not stripped_source or not stripped_target:
        return code[EMPTY]
    if rules.max_chars is not None and max(len(source), len(target)) > rules.max_chars:
        return code[TOO_LONG]
    if rules.max_ratio is not None:
        shorter, longer = sorted((len(stripped_source), len(stripped_target)))
        if longer > rules.max_ratio * shorter:
            return code[LENGTH_RATIO]
    if rules.copies and stripped_source == stripped_target:
        return code[COPY]
    if checks is not None and (checks[0].share(source) < rules.min_script_share
                               or checks[1].share(target) < rules.min_script_share):
        return code[FOREIGN_SCRIPT]
    return KEPT


def _hash(data: bytes) -> int:
    # 8 bytes of BLAKE2: the same on every run (Python's hash() is salted per process); two different pairs
    # share one with odds of about n² / 2^65, a few in a million for tens of millions of pairs
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _drop_repeats(codes: np.ndarray, hashes: np.ndarray, rule_code: int) -> None:
    """Mark with ``rule_code`` every kept pair whose hash a kept pair before it has."""
    kept = np.flatnonzero(codes == KEPT)
    _, first = np.unique(hashes[kept], return_index=True)  # the first occurrence of each value
    repeated = np.ones(len(kept), dtype=bool)
    repeated[first] = False
    codes[kept[repeated]] = rule_code


def output_names(split: FileSplit) -> list[str]:
    """The names the kept pairs are written under: the input files' names, without ``.gz`` (written plain)."""
    names = [path.name.removesuffix(".gz") for part in split.parts for path in part.paths]
    if len(set(names)) != len(names):
        raise ConfigError(f"{split.describe()}: the two files have the same name, which the cleaned corpus "
                          "keeps; rename one of them")
    return names


def write_kept(split: FileSplit, codes: np.ndarray, report: CleaningReport, rules: CleaningRules,
               directory: Path, progress: bool = False) -> None:
    """Write the pairs ``codes`` keeps into ``directory`` under :func:`output_names` (aligned files, or one
    TSV file), and add the first few pairs each rule dropped to the report."""
    names = output_names(split)
    results = {RULES.index(result.rule) + 1: result for result in report.rules}
    handles = [open(directory / name, "w", encoding="utf-8", newline="\n") for name in names]
    try:
        with progress_bar(len(codes), "cleaning: writing", progress) as bar:
            for chunk in read_chunks(split):
                sources, targets = decode_chunk(chunk)
                for offset, (source, target) in enumerate(zip(sources, targets)):
                    verdict = int(codes[chunk.start + offset])
                    if verdict == KEPT:
                        if len(handles) == 1:
                            handles[0].write(f"{source}\t{target}\n")
                        else:
                            handles[0].write(source + "\n")
                            handles[1].write(target + "\n")
                    elif len(results[verdict].examples) < rules.examples:
                        line = chunk.first_line + offset
                        results[verdict].examples.append(DroppedPair(line, source, target))
                bar.update(len(chunk))
    finally:
        for handle in handles:
            handle.close()


__all__ = ["CleaningReport", "CleaningRules", "DroppedPair", "RULES", "RuleResult", "ScriptCheck",
           "clean_corpus", "output_names", "script_of", "write_kept"]
