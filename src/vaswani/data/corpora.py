"""Parallel corpora loaded as aligned lists of sentences: a registered dataset's split (``registry.py`` says where
its files are), local files (two aligned files or one TSV), or the WMT17 training data from local files or the
hub."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from vaswani.data.download import default_data_dir, resolve_file
from vaswani.data.registry import (
    DEFAULT_DATASET,
    WMT17_HUB_CONFIG,
    WMT17_HUB_ID,
    WMT17_TRAIN_DIR,
    WMT17_TRAIN_FILES,
    get_dataset,
    parse_direction,
)
from vaswani.data.textfiles import read_text_file, read_tsv_file
from vaswani.errors import DataError


@dataclass(frozen=True)
class CorpusInfo:
    """What identifies one split of a corpus, without its text: enough to name it and to key caches of it."""

    name: str
    split: str
    src_lang: str
    tgt_lang: str
    checksum: str
    files: tuple[str, ...] = ()

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


@dataclass
class ParallelCorpus:
    """Aligned sentences: ``target[i]`` translates ``source[i]``.

    ``checksum`` identifies the content and its direction (a sha256 over the sha256 of each source file, then
    each target file), so it can key caches of anything derived from the corpus.
    """

    name: str
    split: str
    source: list[str]
    target: list[str]
    src_lang: str
    tgt_lang: str
    checksum: str
    files: list[str] = field(default_factory=list)  # where it came from, for messages

    def __len__(self) -> int:
        return len(self.source)

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"

    @property
    def info(self) -> CorpusInfo:
        return CorpusInfo(self.name, self.split, self.src_lang, self.tgt_lang, self.checksum, tuple(self.files))


# ------------------------------------------------------------------------------------------------ loading


def load_corpus(
    dataset: str = DEFAULT_DATASET,
    split: str = "train",
    direction: str = "de-en",
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    mirror: str | None = None,
    download: bool = True,
) -> ParallelCorpus:
    """Load one split of a registered dataset as a ParallelCorpus in the given direction."""
    spec = get_dataset(dataset)
    split_spec = spec.resolve_split(split)
    src_lang, tgt_lang = parse_direction(direction)
    if split_spec.hub:
        parts = wmt17_train_files(data_dir, direction)
        if parts is None:
            return load_wmt17_train(direction)
        return _concatenated(spec.name, split_spec.name, parts, src_lang, tgt_lang)
    german: list[str] = []
    english: list[str] = []
    sums: dict[str, list[str]] = {"de": [], "en": []}
    files = []
    for de_file, en_file in split_spec.parts:
        de_path = resolve_file(de_file, data_dir, cache_dir, mirror, download)
        en_path = resolve_file(en_file, data_dir, cache_dir, mirror, download)
        de = read_text_file(de_path, expected_sha256=de_file.sha256)
        en = read_text_file(en_path, expected_sha256=en_file.sha256)
        check_aligned(de.path, len(de.lines), en.path, len(en.lines))
        german += de.lines
        english += en.lines
        sums["de"].append(de.sha256)
        sums["en"].append(en.sha256)
        files += [str(de.path), str(en.path)]
    source, target = (german, english) if src_lang == "de" else (english, german)
    return ParallelCorpus(
        name=spec.name,
        split=split_spec.name,
        source=source,
        target=target,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        checksum=combine_checksums(sums[src_lang], sums[tgt_lang]),
        files=files,
    )


def _concatenated(name: str, split: str, parts: list[tuple[Path, Path]], src_lang: str,
                  tgt_lang: str) -> ParallelCorpus:
    corpora = [load_parallel_files(src, tgt, name, split, src_lang, tgt_lang) for src, tgt in parts]
    return ParallelCorpus(name, split, [line for c in corpora for line in c.source],
                          [line for c in corpora for line in c.target], src_lang, tgt_lang,
                          combine_checksums([c.checksum for c in corpora], []), [f for c in corpora for f in c.files])


def load_parallel_files(
    src_path: str | Path,
    tgt_path: str | Path,
    name: str = "local",
    split: str = "train",
    src_lang: str = "de",
    tgt_lang: str = "en",
) -> ParallelCorpus:
    """Load a local corpus from two aligned one-sentence-per-line files (plain or .gz), used as given."""
    src = read_text_file(src_path)
    tgt = read_text_file(tgt_path)
    check_aligned(src.path, len(src.lines), tgt.path, len(tgt.lines))
    return ParallelCorpus(
        name=name,
        split=split,
        source=src.lines,
        target=tgt.lines,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        checksum=combine_checksums([src.sha256], [tgt.sha256]),
        files=[str(src.path), str(tgt.path)],
    )


def load_tsv(
    path: str | Path, name: str = "local", split: str = "train", src_lang: str = "de", tgt_lang: str = "en"
) -> ParallelCorpus:
    """Load a local corpus from one ``source<TAB>target`` file."""
    source, target, sha = read_tsv_file(path)
    return ParallelCorpus(
        name=name,
        split=split,
        source=source,
        target=target,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        checksum=combine_checksums([sha], ["tsv"]),
        files=[str(path)],
    )


def check_aligned(src_path: Path, n_src: int, tgt_path: Path, n_tgt: int) -> None:
    if n_src != n_tgt:
        raise DataError(
            f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; a parallel corpus needs the same number "
            "of lines on both sides (line i of one translates line i of the other)"
        )


def combine_checksums(source_sums: Iterable[str], target_sums: Iterable[str]) -> str:
    text = "source:" + ",".join(source_sums) + "\ntarget:" + ",".join(target_sums)
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------- WMT17 train (files or hub)


def wmt17_train_files(data_dir: str | Path | None, direction: str = "de-en") -> list[tuple[Path, Path]] | None:
    """The (source, target) file pairs of the WMT17 training corpora in ``data_dir`` (default $VASWANI_DATA), in
    the order of WMT17_TRAIN_FILES; None when none of them is there (the training split then comes from the hub).
    Some but not all of them is a DataError naming the missing ones: a corpus silently short of a part would train
    another model than the one asked for."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if root is None:
        return None
    folder = root / WMT17_TRAIN_DIR
    src_lang, tgt_lang = parse_direction(direction)
    found, missing = [], []
    for stem in WMT17_TRAIN_FILES:
        pair = []
        for lang in (src_lang, tgt_lang):
            path = next((p for p in (folder / f"{stem}.{lang}", folder / f"{stem}.{lang}.gz") if p.is_file()), None)
            (pair.append(path) if path is not None else missing.append(f"{stem}.{lang}[.gz]"))
        if len(pair) == 2:
            found.append((pair[0], pair[1]))
    if not found:
        return None
    if missing:
        raise DataError(f"{folder}: holds some of the WMT17 training corpora but not {', '.join(missing)}; add them "
                        f"(the files {', '.join(WMT17_TRAIN_FILES)} in .de and .en), or move the folder away to "
                        "train from the Hugging Face hub")
    return found


def load_wmt17_train(direction: str = "de-en") -> ParallelCorpus:
    """The full WMT17 de-en training data (~5.9M pairs) via Hugging Face ``datasets`` (optional extra)."""
    try:
        import datasets  # imported here: a heavy, optional dependency
    except ImportError:
        raise DataError(
            "the WMT17 training split is read with Hugging Face `datasets`, which is not installed; install the "
            "optional extra with `pip install 'vaswani[wmt]'`, or train offline on the 21k-pair split "
            "'train-extra' (--train-split train-extra)"
        ) from None
    try:
        hub = datasets.load_dataset(WMT17_HUB_ID, WMT17_HUB_CONFIG, split="train")
    except Exception as error:  # network, hub or cache problems all mean the same thing to the user
        raise DataError(f"could not load {WMT17_HUB_ID} ({WMT17_HUB_CONFIG}, train) from the hub: {error}") from None
    return corpus_from_hub(hub, name="wmt17", split="train", direction=direction)


def corpus_from_hub(
    rows: Any, name: str, split: str, direction: str = "de-en", batch_size: int = 10_000
) -> ParallelCorpus:
    """Convert a hub dataset of rows ``{"translation": {"de": ..., "en": ...}}`` into a ParallelCorpus.

    ``rows`` is a ``datasets.Dataset`` (read in column batches, which is much faster than row by row) or any
    iterable of such row dicts. The checksum is a sha256 of the converted text.
    """
    src_lang, tgt_lang = parse_direction(direction)
    source: list[str] = []
    target: list[str] = []
    digest = hashlib.sha256()
    for start, translations in _translation_batches(rows, batch_size, name):
        for offset, pair in enumerate(translations):
            if not isinstance(pair, dict) or not isinstance(pair.get(src_lang), str) or not isinstance(
                pair.get(tgt_lang), str
            ):
                raise DataError(
                    f"{name} ({split}) row {start + offset}: expected a translation with string fields "
                    f"{src_lang!r} and {tgt_lang!r}, got {pair!r:.200}"
                )
            source.append(pair[src_lang])
            target.append(pair[tgt_lang])
            digest.update(pair[src_lang].encode() + b"\t" + pair[tgt_lang].encode() + b"\n")
    if not source:
        raise DataError(f"{name} ({split}): the dataset has no rows")
    return ParallelCorpus(
        name=name,
        split=split,
        source=source,
        target=target,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        checksum=digest.hexdigest(),
        files=[f"hf:{name}/{split}"],
    )


def _translation_batches(rows: Any, batch_size: int, name: str):
    """Yield (index of first row, list of translation dicts) from a datasets.Dataset or an iterable of rows."""
    columns = getattr(rows, "column_names", None)
    if columns is not None:
        if "translation" not in columns:
            raise DataError(f"{name}: expected a 'translation' column with {{'de': ..., 'en': ...}}, got {columns}")
        for start in range(0, len(rows), batch_size):
            yield start, rows[start : start + batch_size]["translation"]
        return
    batch: list = []
    start = 0
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or "translation" not in row:
            raise DataError(f"{name} row {index}: expected {{'translation': {{'de': ..., 'en': ...}}}}, "
                            f"got {row!r:.200}")
        batch.append(row["translation"])
        if len(batch) == batch_size:
            yield start, batch
            start, batch = index + 1, []
    if batch:
        yield start, batch
