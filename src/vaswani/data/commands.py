"""``vaswani prepare``: train the shared BPE and encode a dataset's splits into a reusable cache."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.settings import MAX_COUNT, MAX_LENGTH

MEANINGFUL_PHASE_SECONDS = 0.1  # below, a phase's CPU over wall seconds is mostly the CPU clock's resolution


def add_data_dir_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--data-dir DIR``, made absolute where it is typed (a later chdir or a child process sees the same folder)."""
    from vaswani.io import absolute_path

    parser.add_argument("--data-dir", type=absolute_path, default=None, metavar="DIR",
                        help="folder holding the corpus files (default: $VASWANI_DATA); files missing there are "
                        "looked up in the cache ($VASWANI_CACHE or ~/.cache/vaswani) and else downloaded into it "
                        "(from the public URLs, or from $VASWANI_MIRROR, a base URL laid out like this folder)")


def add_corpus_arguments(parser: argparse.ArgumentParser, training: bool = True) -> None:
    """The options that name the user's own corpus as files: training pairs (``training``), validation pairs, named
    test sets and the two languages. Read back with :func:`corpus_arguments`."""
    from vaswani.data.download import absolute_path

    group = parser.add_argument_group(
        "your own corpus", "plain or gzip files, one sentence per line, line i of a source file translating line i "
        "of its target file (or one TSV file of source<TAB>target lines); the languages come from the files' "
        "suffixes (train.fr, train.en) or from --src-lang/--tgt-lang")
    if training:
        group.add_argument("--src", action="append", default=[], type=absolute_path, metavar="FILE",
                           help="training source file; with --tgt (repeat both for more parts, read in order)")
        group.add_argument("--tgt", action="append", default=[], type=absolute_path, metavar="FILE",
                           help="training target file, aligned line by line with --src")
        group.add_argument("--tsv", action="append", default=[], type=absolute_path, metavar="FILE",
                           help="training pairs, one 'source<TAB>target' per line (repeatable)")
        group.add_argument("--valid-src", type=absolute_path, metavar="FILE",
                           help="validation source file, with --valid-tgt (default: validation pairs are held out "
                           "of the training files, from the seed)")
        group.add_argument("--valid-tgt", type=absolute_path, metavar="FILE", help="validation target file")
        group.add_argument("--valid-tsv", type=absolute_path, metavar="FILE", help="validation pairs as one TSV file")
    group.add_argument("--test-src", action="append", default=[], type=absolute_path, metavar="FILE",
                       help="a test set's source file, with --test-tgt; named by the file's name up to its first dot "
                       "(newstest2017.fr: newstest2017); repeatable")
    group.add_argument("--test-tgt", action="append", default=[], type=absolute_path, metavar="FILE",
                       help="a test set's target file, aligned with its --test-src")
    group.add_argument("--test-tsv", action="append", default=[], type=absolute_path, metavar="FILE",
                       help="a test set as one TSV file (repeatable)")
    group.add_argument("--src-lang", metavar="CODE", help="source language code, e.g. fr (default: the file suffix)")
    group.add_argument("--tgt-lang", metavar="CODE", help="target language code, e.g. en (default: the file suffix)")


@dataclass
class CorpusArguments:
    """What the corpus options named: the training parts (each (source, target) or (tsv,)), the validation part,
    the test sets by name, and the languages (None where the files' suffixes must tell)."""

    train: list[tuple[Path, ...]]
    valid: tuple[Path, ...]
    tests: dict[str, tuple[Path, ...]]
    src_lang: str | None
    tgt_lang: str | None


def corpus_arguments(args: argparse.Namespace) -> CorpusArguments | None:
    """The files the corpus options name, checked for pairing (one-line errors), or None when none is named."""
    from vaswani.errors import ConfigError
    from vaswani.io import check_name

    src, tgt = getattr(args, "src", []) or [], getattr(args, "tgt", []) or []
    if len(src) != len(tgt):
        raise ConfigError(f"a local corpus needs both a source file and a target file for each part (--src and --tgt "
                          f"pair up in order): got {len(src)} --src and {len(tgt)} --tgt")
    test_src, test_tgt = args.test_src, args.test_tgt
    if len(test_src) != len(test_tgt):
        raise ConfigError(f"--test-src and --test-tgt pair up in order: got {len(test_src)} --test-src and "
                          f"{len(test_tgt)} --test-tgt")
    valid_src, valid_tgt, valid_tsv = (getattr(args, name, None) for name in ("valid_src", "valid_tgt", "valid_tsv"))
    if (valid_src is None) != (valid_tgt is None) or (valid_tsv is not None and valid_src is not None):
        raise ConfigError("validation files are --valid-src and --valid-tgt together, or --valid-tsv alone")
    train = [(s, t) for s, t in zip(src, tgt)] + [(p,) for p in getattr(args, "tsv", []) or []]
    valid = (valid_tsv,) if valid_tsv else (valid_src, valid_tgt) if valid_src else ()
    tests: dict[str, tuple[Path, ...]] = {}
    for part in [*zip(test_src, test_tgt), *((p,) for p in args.test_tsv)]:
        option = "--test-src" if len(part) == 2 else "--test-tsv"
        name = check_name(test_set_name(part[0]), f"{option} {part[0]}")
        if name in tests:
            raise ConfigError(f"two test sets are named {name!r} (by their files' names up to the first dot); rename "
                              "one of the files")
        tests[name] = part
    if not (train or valid or tests or args.src_lang or args.tgt_lang):
        return None
    return CorpusArguments(train, valid, tests, args.src_lang, args.tgt_lang)


def corpus_files(args: argparse.Namespace) -> list[Path]:
    """Every file the corpus options name: inputs no output may reach."""
    listed = [*(getattr(args, name, None) or [] for name in ("src", "tgt", "tsv", "test_src", "test_tgt", "test_tsv"))]
    single = [getattr(args, name, None) for name in ("valid_src", "valid_tgt", "valid_tsv")]
    return [Path(path) for path in [*(p for group in listed for p in group), *single] if path is not None]


def test_set_name(path: str | Path) -> str:
    """A test set's name from its (source) file: the file's name up to its first dot."""
    return Path(path).name.split(".")[0]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="train the BPE tokenizer and encode a dataset's splits (cached)",
        description="Train a shared source+target BPE tokenizer on a dataset's training split (unless OUT already "
        "has tokenizer.json), encode the train/val/test splits, drop empty and over-long pairs, cache the token "
        "ids in OUT/cache and print statistics. A second run loads everything from the cache. With your own files "
        "(--src/--tgt or --tsv) the splits are train, valid (files, or pairs held out of the training files) and "
        "the test sets.",
    )
    parser.add_argument("--dataset", default="multi30k", metavar="NAME",
                        help="registered dataset: multi30k (default), wmt17 or iwslt")
    add_data_dir_argument(parser)
    parser.add_argument("--direction", default="de-en", choices=["de-en", "en-de"],
                        help="a registered dataset's direction: de-en (default) translates German into English")
    parser.add_argument("--vocab-size", type=ranged(int, le=MAX_COUNT), metavar="N",
                        help="BPE vocabulary size, special tokens included (default: 8000 for multi30k, 50000 for "
                        "wmt17, 16000 otherwise)")
    parser.add_argument("--max-len", type=ranged(int, le=MAX_LENGTH), default=64, metavar="N",
                        help="longest sequence the model takes, counting the added <s> or </s>: a pair is dropped "
                        "if either side has more than N-1 BPE tokens (default 64)")
    parser.add_argument("--out", metavar="DIR",
                        help="where tokenizer.json and the cache go (default runs/data/<dataset>-<direction>-<vocab>; "
                        "for your own files runs/data/local-<key>-<direction>-<vocab>, keyed by the files' content)")
    add_corpus_arguments(parser)
    parser.add_argument("--holdout", type=ranged(int, ge=1, le=MAX_COUNT), default=1000, metavar="N",
                        help="with your own files and no validation files: validation pairs held out of the training "
                        "files (at most a tenth of them; default 1000)")
    parser.add_argument("--tokenizer-sample", type=ranged(int, ge=1, le=MAX_COUNT), default=500_000, metavar="N",
                        help="training pairs the tokenizer learns from, drawn from --seed when there are more "
                        "(default 500000: a million sentences)")
    parser.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0, metavar="N",
                        help="draws the tokenizer's sample and the held-out validation pairs (default 0)")
    parser.add_argument("--splits", default="train,val,test", metavar="LIST",
                        help="comma-separated splits of a registered dataset to prepare: train, val, test or any "
                        "split name of the dataset (default train,val,test)")
    parser.add_argument("--train-split", default="train", metavar="NAME",
                        help="the dataset split used as training data and to train the tokenizer (default train; "
                        "e.g. train-extra for the 21k offline WMT17 pairs)")
    parser.add_argument("--tokenizer", metavar="FILE",
                        help="use this existing tokenizer.json instead of training one (e.g. to encode IWSLT test "
                        "sets with a tokenizer trained on another dataset)")
    parser.add_argument("--min-frequency", type=ranged(int, le=MAX_COUNT), default=2, metavar="N",
                        help="BPE merges need a pair seen at least N times (default 2)")
    parser.set_defaults(handler=run_prepare)
    register_clean(subparsers)


def run_prepare(args: argparse.Namespace) -> int:
    # lazy: keeps `vaswani --help` fast
    from vaswani.data.files import local_corpus
    from vaswani.data.pipeline import PREPARED_FILES, PREPARED_ROOT, prepare_dataset, prepared_out_dir
    from vaswani.data.prepared_tokenizer import PREPARED_KIND
    from vaswani.errors import ConfigError
    from vaswani.io import check_output

    corpus = corpus_arguments(args)
    inputs = [*corpus_files(args), args.tokenizer, args.data_dir]
    if args.out is not None or corpus is None:
        out = prepared_out_dir(args.out, args.dataset, args.direction, args.vocab_size)
        check_output(out, command="prepare", writes="files", kind=PREPARED_KIND, names=PREPARED_FILES,
                     inputs=inputs, explicit=args.out is not None)
    else:
        # A corpus of the user's files goes to a folder of PREPARED_ROOT keyed by their content, known only
        # once they are read: the folder that will hold it is checked now, before any work.
        out = None
        check_output(PREPARED_ROOT, command="prepare", writes="files", inputs=inputs, explicit=False,
                     option="the default folder")
    _log_to_stderr()
    start = time.perf_counter()
    splits = [name.strip() for name in args.splits.split(",") if name.strip()]
    files = None
    if corpus is not None:
        if not corpus.train:
            raise ConfigError("your own corpus needs training files: --src and --tgt, or --tsv")
        files = local_corpus(corpus.train, corpus.valid, corpus.tests, corpus.src_lang, corpus.tgt_lang,
                             args.holdout)
    data = prepare_dataset(
        dataset=args.dataset,
        splits=splits,
        data_dir=args.data_dir,
        out_dir=out,
        vocab_size=args.vocab_size,
        max_len=args.max_len,
        direction=args.direction,
        train_split=args.train_split,
        files=files,
        tokenizer_path=args.tokenizer,
        min_frequency=args.min_frequency,
        tokenizer_sample=args.tokenizer_sample,
        seed=args.seed,
        progress=True,
    )
    print(format_report(data, time.perf_counter() - start))
    return 0


def format_report(data, seconds: float) -> str:
    from vaswani.data.languages import parse_direction
    tok = data.tokenizer
    how = f"trained in {data.tokenizer_seconds:.1f} s" if data.tokenizer_trained else "loaded"
    first = next(iter(data.corpora.values()), None)
    lines = [f"corpus: {first.name}, {parse_direction(first.direction).name}"] if first is not None else []
    lines += [
        f"tokenizer: {data.tokenizer_path} ({how}); "
        f"vocabulary size {tok.vocab_size:,}; fingerprint {tok.fingerprint[:12]}",
        f"{'split':<14} {'pairs':>8} {'kept':>8} {'empty':>6} {'too long':>8} {'src mean':>8} {'src max':>7} "
        f"{'tgt mean':>8} {'tgt max':>7} {'time':>7}  source",
    ]
    for name, enc in data.splits.items():
        s = enc.stats
        corpus = data.corpora.get(name)
        label = f"{name} ({corpus.split})" if corpus is not None and corpus.split != name else name
        lines.append(
            f"{label:<14} {s.pairs_in:>8,} {s.pairs_kept:>8,} {s.dropped['empty']:>6,} {s.dropped['too_long']:>8,} "
            f"{s.src_tokens_mean:>8.1f} {s.src_tokens_max:>7} {s.tgt_tokens_mean:>8.1f} {s.tgt_tokens_max:>7} "
            f"{s.seconds:>6.2f}s  {'cache' if s.from_cache else 'encoded'}"
        )
    max_len = next(iter(data.splits.values())).stats.max_len if data.splits else "-"
    if data.held_out is not None:
        lines.append(f"valid: {data.held_out.describe()}, kept beside its ids in the cache")
    if data.phases:
        lines.append("phases: " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in data.phases.items()))
        lines.append("phases CPU: " + ", ".join(_cpu_of_phase(phase, seconds, data.phases[phase])
                                                for phase, seconds in data.phase_cpu_seconds.items()))
    lines.append(
        f"max_len {max_len} (positions incl. <s>/</s>); tokens = BPE tokens per sentence without <s>/</s>; "
        f"cache: {data.out_dir / 'cache'}; total {seconds:.1f} s"
    )
    return "\n".join(lines)


def _cpu_of_phase(phase: str, cpu_seconds: float, wall_seconds: float) -> str:
    """A phase's CPU seconds and, over its wall seconds, the cores it kept busy (not for a phase too short to
    say)."""
    busy = f" ({cpu_seconds / wall_seconds:.2f} cores)" if wall_seconds >= MEANINGFUL_PHASE_SECONDS else ""
    return f"{phase} {cpu_seconds:.1f} s{busy}"


def _log_to_stderr() -> None:
    # Progress messages (downloads, tokenizer training, a cache rebuilt) from the data modules go to stderr; stdout
    # keeps the report. Only the vaswani.data logger is configured, so other areas' logging is left alone.
    logger = logging.getLogger("vaswani.data")
    if not any(isinstance(handler, _StandardError) for handler in logger.handlers):
        handler = _StandardError()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


class _StandardError(logging.StreamHandler):
    """Writes to sys.stderr as it is when a message comes: a later command run in the same process (a test, a
    notebook) may have replaced it, and the one of the first command may be closed."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def register_clean(subparsers) -> None:
    parser = subparsers.add_parser(
        "clean",
        help="drop noisy pairs from a parallel corpus (duplicates, copies, empty sides, lengths, scripts, "
        "languages)",
        description="Stream a parallel corpus (two aligned files or one TSV file, plain or gzip) through "
        "cleaning rules and write the pairs that pass into OUT under the input files' names, with "
        "report.json and report.txt: how many pairs each rule dropped, with examples. Empty sides, exact "
        "duplicate pairs and pairs whose source equals their target are dropped by default.",
    )
    from vaswani.data.download import absolute_path

    parser.add_argument("--src", type=absolute_path, metavar="FILE", help="source file, with --tgt")
    parser.add_argument("--tgt", type=absolute_path, metavar="FILE", help="target file, aligned with --src")
    parser.add_argument("--tsv", type=absolute_path, metavar="FILE",
                        help="or one file of source<TAB>target lines")
    parser.add_argument("--src-lang", metavar="CODE", help="source language (default: the file's suffix)")
    parser.add_argument("--tgt-lang", metavar="CODE", help="target language (default: the file's suffix)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for the kept pairs and the report (written whole, or not at all)")
    parser.add_argument("--force", action="store_true",
                        help="replace an earlier `vaswani clean` output in DIR")
    parser.add_argument("--keep-duplicates", action="store_true", help="keep pairs that occurred before")
    parser.add_argument("--keep-copies", action="store_true",
                        help="keep pairs whose source equals their target")
    parser.add_argument("--duplicate-sources", action="store_true",
                        help="also drop a pair whose source occurred before with another target")
    parser.add_argument("--max-chars", type=ranged(int, ge=1, le=MAX_COUNT), metavar="N",
                        help="drop a pair with a side longer than N characters")
    parser.add_argument("--max-ratio", type=ranged(float, ge=1, le=MAX_COUNT), metavar="R",
                        help="drop a pair whose longer side has more than R times the characters of the "
                        "shorter")
    parser.add_argument("--scripts", action="store_true",
                        help="drop a pair where fewer than --min-script-share of a side's letters are in the "
                        "scripts of its language (Latin for fr, Cyrillic for ru, Han for zh, ...)")
    parser.add_argument("--min-script-share", type=ranged(float, gt=0, le=1), default=0.5, metavar="F",
                        help="with --scripts: the least share of a side's letters in its language's scripts")
    parser.add_argument("--language-id", action="store_true",
                        help="drop a pair where a language identifier (py3langid, the optional extra "
                        "vaswani[langid]) is sure that a side is in another language than its own")
    parser.add_argument("--min-language-confidence", type=ranged(float, gt=0, le=1), default=0.5, metavar="P",
                        help="with --language-id: the least probability of the other language for a side to be "
                        "called foreign (a guess on a few words is often unsure, and kept)")
    parser.add_argument("--examples", type=ranged(int, ge=0, le=1000), default=3, metavar="N",
                        help="dropped pairs shown in the report for each rule")
    parser.set_defaults(handler=run_clean)


def run_clean(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from vaswani.data.cleaning import CleaningRules, clean_corpus, output_names, write_kept
    from vaswani.data.files import FileSplit, file_part
    from vaswani.data.languages import corpus_languages, pair_from_files
    from vaswani.errors import ConfigError
    from vaswani.io import atomic_write_text, check_output, directory_written_whole

    if args.tsv is not None and (args.src is not None or args.tgt is not None):
        raise ConfigError("give either --tsv or --src with --tgt, not both")
    if args.tsv is None and (args.src is None or args.tgt is None):
        raise ConfigError("a corpus to clean is --src and --tgt (two aligned files) or --tsv (one file)")
    paths = (args.tsv,) if args.tsv is not None else (args.src, args.tgt)
    split = FileSplit("corpus", (file_part(paths, "corpus"),))
    rules = CleaningRules(duplicates=not args.keep_duplicates, duplicate_sources=args.duplicate_sources,
                          copies=not args.keep_copies, max_chars=args.max_chars, max_ratio=args.max_ratio,
                          scripts=args.scripts, min_script_share=args.min_script_share,
                          language_id=args.language_id, min_language_confidence=args.min_language_confidence,
                          examples=args.examples)
    if args.scripts or args.language_id or args.src_lang or args.tgt_lang:
        languages = corpus_languages(() if args.tsv else paths, args.src_lang, args.tgt_lang)
    else:
        languages = None if args.tsv else pair_from_files(*paths)
    names = output_names(split)
    check_output(args.out, command="clean", writes="folder", inputs=paths, kind=CLEANED_KIND,
                 force=args.force)
    codes, report = clean_corpus(split, languages, rules, progress=True)
    with directory_written_whole(args.out, kind=CLEANED_KIND, writer="clean") as staging:
        write_kept(split, codes, report, rules, staging, progress=True)
        report.outputs = [str(args.out / name) for name in names]
        record = json.dumps(dataclasses.asdict(report), indent=2, ensure_ascii=False)
        atomic_write_text(staging / "report.json", record)
        atomic_write_text(staging / "report.txt", report.text())
    print(report.text(), end="")
    return 0


CLEANED_KIND = "cleaned corpus"  # the manifest's kind of a folder `vaswani clean` wrote
