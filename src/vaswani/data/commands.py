"""``vaswani prepare``: train the shared BPE and encode a dataset's splits into a reusable cache."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from vaswani.arguments import ranged
from vaswani.config import MAX_COUNT, MAX_LENGTH


def add_data_dir_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--data-dir DIR``, made absolute where it is typed (a later chdir or a child process sees the same folder)."""
    from vaswani.io import absolute_path

    parser.add_argument("--data-dir", type=absolute_path, default=None, metavar="DIR",
                        help="folder holding the corpus files (default: $VASWANI_DATA); files missing there are "
                        "looked up in the cache ($VASWANI_CACHE or ~/.cache/vaswani) and else downloaded into it "
                        "(from the public URLs, or from $VASWANI_MIRROR, a base URL laid out like this folder)")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="train the BPE tokenizer and encode a dataset's splits (cached)",
        description="Train a shared source+target BPE tokenizer on a dataset's training split (unless OUT already "
        "has tokenizer.json), encode the train/val/test splits, drop empty and over-long pairs, cache the token "
        "ids in OUT/cache and print statistics. A second run loads everything from the cache.",
    )
    parser.add_argument("--dataset", default="multi30k", metavar="NAME",
                        help="registered dataset: multi30k (default), wmt17 or iwslt")
    add_data_dir_argument(parser)
    parser.add_argument("--direction", default="de-en", choices=["de-en", "en-de"],
                        help="translation direction: de-en (default) translates German into English")
    parser.add_argument("--vocab-size", type=ranged(int, le=MAX_COUNT), metavar="N",
                        help="BPE vocabulary size, special tokens included (default: 8000 for multi30k, 50000 for "
                        "wmt17, 16000 otherwise)")
    parser.add_argument("--max-len", type=ranged(int, le=MAX_LENGTH), default=64, metavar="N",
                        help="longest sequence the model takes, counting the added <s> or </s>: a pair is dropped "
                        "if either side has more than N-1 BPE tokens (default 64)")
    parser.add_argument("--out", metavar="DIR",
                        help="where tokenizer.json and the cache go (default runs/data/<dataset>-<direction>-<vocab>)")
    parser.add_argument("--src", metavar="FILE",
                        help="local corpus: source-language file, one sentence per line (plain or .gz); needs --tgt")
    parser.add_argument("--tgt", metavar="FILE",
                        help="local corpus: target-language file aligned line by line with --src")
    parser.add_argument("--tsv", metavar="FILE", help="local corpus: one 'source<TAB>target' pair per line")
    parser.add_argument("--splits", default="train,val,test", metavar="LIST",
                        help="comma-separated splits to prepare: train, val, test or any split name of the dataset "
                        "(default train,val,test; a local corpus has only train)")
    parser.add_argument("--train-split", default="train", metavar="NAME",
                        help="the dataset split used as training data and to train the tokenizer (default train; "
                        "e.g. train-extra for the 21k offline WMT17 pairs)")
    parser.add_argument("--tokenizer", metavar="FILE",
                        help="use this existing tokenizer.json instead of training one (e.g. to encode IWSLT test "
                        "sets with a tokenizer trained on another dataset)")
    parser.add_argument("--min-frequency", type=ranged(int, le=MAX_COUNT), default=2, metavar="N",
                        help="BPE merges need a pair seen at least N times (default 2)")
    parser.set_defaults(handler=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    # lazy: keeps `vaswani --help` fast
    from vaswani.data.pipeline import PREPARED_FILES, PREPARED_KIND, prepare_dataset, prepared_out_dir
    from vaswani.io import check_output

    local = any(path is not None for path in (args.src, args.tgt, args.tsv))
    out = prepared_out_dir(args.out, args.dataset, args.direction, args.vocab_size, local)
    check_output(out, command="prepare", writes="files", kind=PREPARED_KIND, names=PREPARED_FILES,
                 inputs=[args.src, args.tgt, args.tsv, args.tokenizer, args.data_dir], explicit=args.out is not None)
    _log_to_stderr()
    start = time.perf_counter()
    splits = [name.strip() for name in args.splits.split(",") if name.strip()]
    data = prepare_dataset(
        dataset=args.dataset,
        splits=splits,
        data_dir=args.data_dir,
        out_dir=out,
        vocab_size=args.vocab_size,
        max_len=args.max_len,
        direction=args.direction,
        train_split=args.train_split,
        src_file=args.src,
        tgt_file=args.tgt,
        tsv_file=args.tsv,
        tokenizer_path=args.tokenizer,
        min_frequency=args.min_frequency,
    )
    print(format_report(data, time.perf_counter() - start))
    return 0


def format_report(data, seconds: float) -> str:
    tok = data.tokenizer
    how = f"trained in {data.tokenizer_seconds:.1f} s" if data.tokenizer_trained else "loaded"
    lines = [
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
    lines.append(
        f"max_len {max_len} (positions incl. <s>/</s>); tokens = BPE tokens per sentence without <s>/</s>; "
        f"cache: {data.out_dir / 'cache'}; total {seconds:.1f} s"
    )
    return "\n".join(lines)


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
