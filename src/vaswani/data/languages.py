"""Language codes: which pair a corpus translates, named by the user or by its files' suffixes (``train.fr``).

A code is an ISO 639 language code (``fr``, ``zh``, ``yue``), optionally followed by ``_`` and a script or region
subtag (``zh_Hant``, ``pt_BR``): the hyphen is taken, it joins the two sides of a pair (``fr-en``). The tokenizer
is a byte-level BPE, so it encodes any script; a code only has to name a language, never to be known in advance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import read_json, read_yaml

CODE = re.compile(r"[a-z]{2,3}(?:_[A-Za-z0-9]{2,8})*")
CODE_FORMAT = "an ISO 639 code of 2 or 3 lowercase letters, optionally with _SCRIPT or _REGION (fr, yue, zh_Hant)"
COMPRESSED_SUFFIXES = (".gz",)

# English names for the codes a report is most likely to show; any other valid code is shown as the code itself.
NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fa": "Persian", "fi": "Finnish",
    "fr": "French", "gu": "Gujarati", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian",
    "it": "Italian", "ja": "Japanese", "kk": "Kazakh", "km": "Khmer", "ko": "Korean", "lt": "Lithuanian",
    "lv": "Latvian", "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "ta": "Tamil", "th": "Thai", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}


@dataclass(frozen=True)
class LanguagePair:
    """The languages a model translates from and into, as codes (``fr``, ``en``)."""

    source: str
    target: str

    @property
    def direction(self) -> str:
        """The pair as one setting, ``fr-en``: what ``data.direction`` holds."""
        return f"{self.source}-{self.target}"

    @property
    def name(self) -> str:
        """For people: ``French → English``."""
        return f"{language_name(self.source)} → {language_name(self.target)}"

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "target": self.target, "name": self.name}


# The scripts each language is written in, as the first word of its letters' Unicode names (``LATIN SMALL
# LETTER A``; ``CJK`` for the Han ideographs), for the codes of NAMES: what cleaning checks a side's letters
# against.
SCRIPTS = {
    **{code: ("LATIN",) for code in ("cs", "da", "de", "en", "es", "et", "fi", "fr", "hu", "id", "it", "lt",
                                     "lv", "nl", "no", "pl", "pt", "ro", "sv", "tr", "vi")},
    **{code: ("CYRILLIC",) for code in ("bg", "kk", "ru", "uk")},
    **{code: ("ARABIC",) for code in ("ar", "fa", "ps", "ur")},
    "el": ("GREEK",), "he": ("HEBREW",), "hi": ("DEVANAGARI",), "bn": ("BENGALI",), "gu": ("GUJARATI",),
    "ta": ("TAMIL",), "th": ("THAI",), "km": ("KHMER",), "ko": ("HANGUL", "CJK"), "zh": ("CJK",),
    "ja": ("CJK", "HIRAGANA", "KATAKANA"),
}


def language_scripts(code: str) -> tuple[str, ...] | None:
    """The scripts ``code``'s base language is written in (see SCRIPTS), or None when vaswani does not
    know."""
    return SCRIPTS.get(code.split("_")[0])


def language_name(code: str) -> str:
    """The English name of ``code`` (its base language, so ``pt_BR`` is Portuguese), or the code itself."""
    return NAMES.get(code.split("_")[0], code)


def check_code(code: str, setting: str) -> str:
    """``code`` when it is a language code, else a ConfigError naming ``setting`` and the expected form."""
    if not isinstance(code, str) or not CODE.fullmatch(code):
        raise ConfigError(f"{setting}={code!r} is not a language code: expected {CODE_FORMAT}", field=setting)
    return code


def parse_direction(direction: str, setting: str = "data.direction") -> LanguagePair:
    """``fr-en`` as LanguagePair("fr", "en"); anything else is a ConfigError naming ``setting``."""
    source, dash, target = str(direction).partition("-")
    if not dash or "-" in target:
        raise ConfigError(f"{setting}={direction!r} is not a language pair: expected SOURCE-TARGET such as fr-en "
                          f"(each {CODE_FORMAT})", field=setting)
    for code in (source, target):
        if not CODE.fullmatch(code):
            raise ConfigError(f"{setting}={direction!r}: {code!r} is not a language code: expected {CODE_FORMAT}",
                              field=setting)
    return LanguagePair(source, target)


def code_from_suffix(path: str | Path) -> str | None:
    """The language code a file's name ends in (``train.fr``, ``news.de-en.de.gz``), or None when its last suffix
    is no language code (``train.txt``, ``pairs.tsv``)."""
    name = Path(path).name
    for compressed in COMPRESSED_SUFFIXES:
        name = name.removesuffix(compressed)
    stem, dot, suffix = name.rpartition(".")
    return suffix if dot and stem and CODE.fullmatch(suffix) and suffix not in ("txt", "tsv", "tok", "raw") else None


def pair_from_files(source: str | Path, target: str | Path) -> LanguagePair | None:
    """The pair two aligned files name by their suffixes (``train.fr``, ``train.en``), or None when either does not
    end in a language code."""
    src, tgt = code_from_suffix(source), code_from_suffix(target)
    return LanguagePair(src, tgt) if src and tgt else None


CORPUS_RECORD = "corpus.json"  # a run directory's record of its corpus and language pair (written by training)


def recorded_languages(path: str | Path) -> LanguagePair | None:
    """The language pair a run recorded, for its run directory or a checkpoint inside it (``RUN/checkpoints/X``):
    from its ``corpus.json``, else from its ``config.yaml`` (``data.direction``); None when neither says (a
    checkpoint copied out of its run)."""
    path = Path(path).resolve()
    for run in (path, path.parent.parent):
        try:
            record = read_json(run / CORPUS_RECORD, "corpus record")
            languages = record["languages"]
            return LanguagePair(check_code(languages["source"], "source"), check_code(languages["target"], "target"))
        except (VaswaniError, KeyError, TypeError):
            pass
        direction = _configured_direction(run / "config.yaml")
        if direction is not None:
            return direction
    return None


def _configured_direction(config_file: Path) -> LanguagePair | None:
    try:
        config = read_yaml(config_file, "run's settings")
        return parse_direction(config["data"]["direction"])
    except (VaswaniError, KeyError, TypeError):
        return None


def corpus_languages(paths: Sequence[str | Path], src_lang: str | None, tgt_lang: str | None) -> LanguagePair:
    """The pair the user named, else the one the files' suffixes name; a one-line error when neither does."""
    if src_lang and tgt_lang:
        return parse_direction(f"{src_lang}-{tgt_lang}", "--src-lang/--tgt-lang")
    from_files = pair_from_files(*paths) if len(paths) == 2 else None
    if from_files is None or (src_lang and src_lang != from_files.source) or \
            (tgt_lang and tgt_lang != from_files.target):
        named = ", ".join(map(str, paths)) or "a TSV file"
        raise ConfigError(f"cannot tell the languages from {named}: name them with --src-lang and --tgt-lang (for "
                          "example --src-lang fr --tgt-lang en), or give files whose names end in the language "
                          "codes (train.fr, train.en)")
    return from_files
