"""A synthetic parallel corpus: a text file translated by a model, each line beside its translation.

Back-translation (Sennrich et al. 2016) translates target-side monolingual text with a reverse model and trains on
(translation, original) pairs; sequence-level distillation (Kim & Rush 2016) translates a corpus's source side with
a teacher and trains a student on (original, translation). Both are this one step, :func:`translate_corpus`, with
the pair written in the order the next training reads it.

The file is translated in chunks of a fixed number of lines, each written whole to a work folder beside the output
(``.OUT.parts``) with a plan that names the model, the input and the search: a run stopped by Ctrl-C, a scheduler
or a crash continues with the first chunk it had not finished, and gives the same corpus as an uninterrupted run
(a chunk is always the same lines, translated in one call, sampling seeded per batch). A work folder with another
plan is refused rather than mixed in. The output folder appears whole at the end, with a manifest.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from vaswani.data.languages import LanguagePair, recorded_languages
from vaswani.data.textfiles import TextFile
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text, directory_written_whole, file_sha256, read_json, read_manifest
from vaswani.model.serialization import resolve_checkpoint
from vaswani.progress import progress_reporter

SYNTHETIC_KIND = "synthetic corpus"
CHUNK_LINES = 2000  # lines translated per chunk: what a restart can lose at most
PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class SyntheticPlan:
    """What a synthetic corpus is made from: a work folder continues only under the same plan."""

    model: str  # sha256 of the checkpoint's weights file
    input: str  # sha256 of the input file
    lines: int
    translator: str  # the search, the engine and the batching, as JSON: what decides each translation
    chunk_lines: int


@dataclass(frozen=True)
class SyntheticCorpus:
    """The corpus written: its two files (the order training reads them), and how much of it a restart reused."""

    source_file: Path
    target_file: Path
    pairs: int
    chunks_reused: int


def parts_folder(out: Path) -> Path:
    """The work folder of ``out``: hidden, beside it, so that the output folder only ever appears whole."""
    return out.parent / f".{out.name}.parts"


def translate_corpus(text: TextFile, translate: Callable[[Sequence[str]], list[str]], plan: SyntheticPlan,
                     out: Path, names: tuple[str, str], translation_first: bool, command: str) -> SyntheticCorpus:
    """Translate every line of ``text`` with ``translate`` into the folder ``out``, as two aligned files named
    ``names`` (source side, target side): the translation on the source side when ``translation_first``
    (back-translation), on the target side otherwise (distillation)."""
    lines, chunk_lines, parts = text.lines, plan.chunk_lines, parts_folder(out)
    _start_or_continue(parts, plan)
    chunks = range(0, len(lines), chunk_lines)
    reused = sum((parts / f"{start:012d}.txt").is_file() for start in chunks)
    with progress_reporter(len(lines), f"translating {text.path.name}", "lines", enabled=True) as bar:
        for start in chunks:
            chunk = lines[start : start + chunk_lines]
            part = parts / f"{start:012d}.txt"
            if not part.is_file():
                translations = translate(chunk)
                if len(translations) != len(chunk):  # a translator always answers line for line
                    raise VaswaniError(f"{len(translations)} translations for {len(chunk)} lines")
                atomic_write_text(part, "".join(t.replace("\n", " ") + "\n" for t in translations))
            bar.update(len(chunk))
    details = {"plan": asdict(plan), "input": str(text.path), "translation_side": 0 if translation_first else 1}
    with directory_written_whole(out, kind=SYNTHETIC_KIND, details=details, writer=command) as staging:
        with open(staging / names[0], "w", encoding="utf-8") as source, \
                open(staging / names[1], "w", encoding="utf-8") as target:
            translated, original = (source, target) if translation_first else (target, source)
            for start in chunks:
                translated.write((parts / f"{start:012d}.txt").read_text(encoding="utf-8"))
                original.write("".join(line + "\n" for line in lines[start : start + chunk_lines]))
    shutil.rmtree(parts)
    if reused:
        print(f"continued: {reused} of {len(chunks)} chunks were translated by an earlier run", file=sys.stderr)
    return SyntheticCorpus(out / names[0], out / names[1], len(lines), reused)


def synthesize(checkpoint: Path, text: TextFile, out: Path, search: SearchConfig, options: EngineOptions,
               backtranslating: bool, chunk_lines: int = CHUNK_LINES, batch_size: int = 64,
               max_tokens: int | None = None, command: str = "backtranslate") -> SyntheticCorpus:
    """Translate ``text`` with the model in ``checkpoint`` into a synthetic corpus in ``out`` (see
    :func:`translate_corpus`): back-translations (the translation on the source side) when ``backtranslating``,
    a teacher's translations (on the target side) otherwise. The files are named by the model's languages where
    its run records them. What ``vaswani backtranslate`` and ``vaswani distill`` run, and the studies that make
    synthetic data."""
    translator = Translator.load(checkpoint, search, options, batch_size=batch_size, max_tokens=max_tokens)
    decides = {"search": asdict(translator.config), "engine": asdict(translator.engine.describe()),
               "batch_size": translator.batch_size, "max_tokens": translator.max_tokens}
    weights = resolve_checkpoint(checkpoint) / "model.safetensors"
    plan = SyntheticPlan(model=file_sha256(weights), input=text.sha256, lines=len(text.lines),
                         translator=json.dumps(decides, sort_keys=True, default=str), chunk_lines=chunk_lines)
    names = corpus_file_names("backtranslated" if backtranslating else "distilled", recorded_languages(checkpoint),
                              backtranslating)
    return translate_corpus(text, translator.translate, plan, out, names, translation_first=backtranslating,
                            command=command)


def made_by(out: Path, checkpoint: Path) -> bool:
    """Whether ``out`` holds a finished synthetic corpus that ``checkpoint``'s weights translated: True to reuse it,
    False when there is none. One that other weights translated is refused: its translations are another model's."""
    manifest = read_manifest(out)
    if manifest is None or manifest.kind != SYNTHETIC_KIND:
        return False
    plan = manifest.details.get("plan")
    weights = resolve_checkpoint(checkpoint) / "model.safetensors"
    if not isinstance(plan, dict) or plan.get("model") != file_sha256(weights):
        raise VaswaniError(f"{out} holds translations by other weights than {weights}; delete it, or choose another "
                           "folder for this model's")
    return True


def corpus_file_names(name: str, languages: LanguagePair | None, backtranslating: bool) -> tuple[str, str]:
    """(source side, target side) of the corpus to train on: named by language where the model records them."""
    if languages is None:
        return f"{name}.source", f"{name}.target"
    if backtranslating:  # the model translates target -> source of the training to come
        return f"{name}.{languages.target}", f"{name}.{languages.source}"
    return f"{name}.{languages.source}", f"{name}.{languages.target}"


def _start_or_continue(parts: Path, plan: SyntheticPlan) -> None:
    plan_file = parts / PLAN_FILE
    if plan_file.is_file():
        try:
            earlier = SyntheticPlan(**read_json(plan_file, "synthetic corpus plan"))
        except TypeError:
            earlier = None
        if earlier != plan:
            raise VaswaniError(f"{parts} holds the chunks of another translation (another model, input, search or "
                               "chunk size); delete it to start again, or run with the same settings to continue")
        return
    if parts.exists() and any(parts.iterdir()):
        raise VaswaniError(f"{parts} exists without {PLAN_FILE}: it is not a synthetic corpus's work folder; "
                           "move it away")
    atomic_write_text(plan_file, json.dumps(asdict(plan), indent=2) + "\n")


__all__ = ["CHUNK_LINES", "SYNTHETIC_KIND", "SyntheticCorpus", "SyntheticPlan", "corpus_file_names", "made_by",
           "parts_folder", "synthesize", "translate_corpus"]
