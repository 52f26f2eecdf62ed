"""A run's record of its corpus (``corpus.json``): the language pair, each split's pairs and checksum, the files
the user's own corpus was read from (path, lines, sha256), and where the data was prepared. Written when the run
starts; a run continues only on the corpus it recorded, and finds its prepared data through it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vaswani.data.files import TRAIN, VALID, FileCorpus
from vaswani.data.fingerprints import FileRecord, fingerprint
from vaswani.data.languages import CORPUS_RECORD, parse_direction
from vaswani.data.pipeline import HeldOut, PreparedData
from vaswani.data.prepared_tokenizer import PREPARED_KIND
from vaswani.errors import VaswaniError
from vaswani.io import directory_kind, read_json
from vaswani.training.config import RunConfig


def recorded_out_dir(run_dir: Path) -> Path | None:
    """Where the run prepared its data (corpus.json's "prepared"), when it recorded it and the folder is still
    prepared data vaswani wrote (its manifest says so): a run resumed or finalized from another directory then
    finds it instead of preparing it again. A record is no reason to write anywhere else: any other folder it
    names is ignored, and the data is prepared into the default folder."""
    try:
        recorded = read_json(run_dir / CORPUS_RECORD, "corpus record").get("prepared")
    except (VaswaniError, AttributeError):
        return None
    if not isinstance(recorded, str) or not Path(recorded).is_dir():
        return None
    return Path(recorded) if directory_kind(recorded) == PREPARED_KIND else None


@dataclass
class CorpusPart:
    """One part of a weighted or tagged training corpus: its files, how often its pairs are drawn, its tag."""

    files: list[str]
    weight: float
    tag: str


@dataclass
class SplitRecord:
    """What a run trained or validated on for one split: its pairs and checksum; the files it was read from (a
    corpus of the user's files), the validation pairs held out of them, and the parts of a mixed training corpus."""

    pairs: int
    checksum: str | None
    files: list[FileRecord] | None = None
    held_out: HeldOut | None = None
    weights: list[float] | None = None
    tags: list[str] | None = None
    parts: list[CorpusPart] | None = None


@dataclass
class CorpusRecord:
    """A run's ``corpus.json``: the dataset, the language pair, where it was prepared and each split's record."""

    dataset: str
    languages: dict[str, str]  # LanguagePair.to_dict(): the codes and the pair's name for people
    prepared: str
    splits: dict[str, SplitRecord]


def corpus_record(run_dir: Path, config: RunConfig, prepared: PreparedData) -> CorpusRecord:
    """What ``run_dir/corpus.json`` records (written when the run starts, :meth:`TrainingData.record_run_files`): the
    language pair, each split's files (path, line count, sha256) or the registered dataset's splits, and where the
    data was prepared. A run that already recorded a corpus continues only on the same one: a file whose content
    changed is refused, naming it."""
    dc = config.data
    splits = {name: SplitRecord(encoded.stats.pairs_in, encoded.corpus_checksum)
              for name, encoded in prepared.splits.items()}
    for name, files in prepared.files.items():
        splits[name].files = list(files.files)
    if prepared.held_out is not None:
        splits[VALID].held_out = prepared.held_out
    if dc.train_weights:
        splits[TRAIN].weights = list(dc.train_weights)
    if any(dc.train_tags):
        splits[TRAIN].tags = list(dc.train_tags)
    if dc.train_files and (dc.train_weights or any(dc.train_tags)):  # each part with how it is taken
        splits[TRAIN].parts = [CorpusPart(list(part), dc.train_weights[i] if dc.train_weights else 1.0,
                                  dc.train_tags[i] if dc.train_tags else "") for i, part in enumerate(dc.train_files)]
    record = CorpusRecord(dc.dataset, parse_direction(dc.direction).to_dict(), str(prepared.out_dir.resolve()), splits)
    path = run_dir / CORPUS_RECORD
    if path.is_file():
        _refuse_another_corpus(read_json(path, "corpus record"),
                               {name: split.files or [] for name, split in splits.items()},
                               {name: split.checksum for name, split in splits.items()})
    return record


def check_files_unchanged(run_dir: Path, files: FileCorpus) -> None:
    """Refuse, naming the file, a run whose recorded files have another content now (read for their sha256)."""
    _refuse_another_corpus(read_json(run_dir / CORPUS_RECORD, "corpus record"),
                           {split.name: fingerprint(split).files for split in files.splits()}, checksums={})


def _refuse_another_corpus(earlier: object, files: dict[str, list[FileRecord]],
                           checksums: dict[str, str | None]) -> None:
    """Refuse a corpus that differs from the one a run recorded (``earlier``, its corpus.json as read): a file
    whose sha256 changed, or a split whose checksum did."""
    problem = _changed(earlier, files, checksums) if isinstance(earlier, dict) else "it is not a JSON object"
    if problem:
        raise VaswaniError(f"{problem}; this run continues only on the corpus it started on: put the files back "
                           f"as they were, or start a new run (--start-over or another --run-dir)")


def _changed(earlier: dict[str, object], files: dict[str, list[FileRecord]],
             checksums: dict[str, str | None]) -> str | None:
    """How the corpus now differs from the one a run recorded (None: the same)."""
    recorded_splits = earlier.get("splits") or {}
    files_then = {file.get("path"): file for split in recorded_splits.values()
                  if isinstance(split, dict) for file in split.get("files") or [] if isinstance(file, dict)}
    for file in (file for split_files in files.values() for file in split_files):
        then = files_then.get(file.path)
        if then is not None and then.get("sha256") != file.sha256:
            return (f"{file.path} changed since this run started (sha256 {str(then.get('sha256'))[:12]}… then, "
                    f"{file.sha256[:12]}… now)")
    for name, checksum in checksums.items():
        then = recorded_splits.get(name)
        if isinstance(then, dict) and then.get("checksum") != checksum:
            return f"the {name} split is not the one this run started on (its checksum changed)"
    return None


__all__ = ["CorpusPart", "CorpusRecord", "SplitRecord", "check_files_unchanged", "corpus_record", "recorded_out_dir"]
