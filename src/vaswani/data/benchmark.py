"""Timing of preprocessing at scale (not a test): ``python -m vaswani.data.benchmark [--pairs N]``.

Repeats the real Multi30k training pairs up to ``n_pairs``, then times ``prepare`` (encode + filter + write the
cache) and loading that cache. Targets on 2 CPU cores: prepare < 60 s and load < 2 s for 1M pairs.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import tempfile
import time
from pathlib import Path

from vaswani.data.corpora import ParallelCorpus, combine_checksums, load_corpus
from vaswani.data.preprocess import load_encoded, prepare
from vaswani.data.tokenizer import Tokenizer


def benchmark_prepare(
    n_pairs: int = 1_000_000,
    data_dir: str | Path | None = None,
    vocab_size: int = 8000,
    work_dir: str | Path | None = None,
    dedup: bool = True,
) -> dict[str, float]:
    """Returns seconds for: tokenizer training, prepare (n_pairs), cache load, and touching every length."""
    base = load_corpus("multi30k", "train", data_dir=data_dir)
    start = time.perf_counter()
    tokenizer = Tokenizer.train(itertools.chain(base.source, base.target), vocab_size)
    train_s = time.perf_counter() - start
    reps = -(-n_pairs // len(base))
    corpus = ParallelCorpus(
        name="bench", split=f"x{n_pairs}",
        source=(base.source * reps)[:n_pairs], target=(base.target * reps)[:n_pairs],
        src_lang="de", tgt_lang="en", checksum=combine_checksums([base.checksum, str(n_pairs)], []),
    )
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        encoded = prepare(corpus, tokenizer, tmp, dedup=dedup)
        prepare_s, prepare_cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
        start = time.perf_counter()
        loaded = load_encoded(encoded.path, tokenizer)
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        total = int(loaded.src_lengths.sum() + loaded.tgt_lengths.sum())
        lengths_s = time.perf_counter() - start
        size_mb = sum(f.stat().st_size for f in Path(encoded.path).iterdir()) / 1e6
    return {
        "pairs": n_pairs, "dedup": dedup, "kept": len(loaded), "tokens": total, "cache_mb": round(size_mb, 1),
        "train_tokenizer_s": round(train_s, 2), "prepare_s": round(prepare_s, 2),
        "prepare_cpu_s": round(prepare_cpu, 2),
        "load_s": round(load_s, 3), "lengths_s": round(lengths_s, 3),
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # all threads, including the Rust encoder's
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=1_000_000, help="number of pairs to prepare")
    parser.add_argument("--data-dir", help="folder with multi30k/ (default $VASWANI_DATA)")
    parser.add_argument("--no-dedup", action="store_true", help="encode every line, even repeated ones")
    args = parser.parse_args()
    for key, value in benchmark_prepare(args.pairs, args.data_dir, dedup=not args.no_dedup).items():
        print(f"{key:>18}: {value}")


if __name__ == "__main__":
    main()
