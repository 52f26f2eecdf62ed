"""`vaswani bench decode`: sentences/s and tokens/s of greedy and beam search, and what the KV cache and
batching buy.

Measurements:

1. greedy and beam k (default 4 and 5), cached and batched: the speed `vaswani translate` runs at;
2. cached vs uncached greedy at a fixed output length (64 tokens): the uncached decoder reruns
   ``model(src, prefix)`` on the whole prefix every step (and a second variant keeps the encoder output and
   recomputes only the decoder), so the gap is what the key/value cache saves;
3. batched beam vs one-sentence-at-a-time beam, per sentence: what batching sentences × beams buys;
4. interleaved pairs on the same batches: preallocated vs grown caches, the model's attention backend vs the
   other one, and with ``--compile`` the decoding step compiled by ``torch.compile`` vs eager (plus the first,
   compiling pass).

With ``--checkpoint`` the sources are a real test set (Multi30k test2016 by default) and outputs end at </s>.
Without one, the model has random weights (``--preset``) and the sources are random token ids with
Multi30k-like lengths; a random model rarely emits </s>, so </s> is disabled and every output is exactly
``--output-len`` tokens: every search does the same number of steps and the comparison is fair.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from vaswani.arguments import ranged
from vaswani.benchmarks.decode_report import (
    BackendComparison,
    BenchModel,
    Comparisons,
    CompiledComparison,
    DecodeReport,
    TimingRow,
    compiled_lines,
    print_comparisons,
)
from vaswani.benchmarks.profiling import add_passes_argument
from vaswani.config import ModelConfig
from vaswani.data.commands import add_data_dir_argument
from vaswani.data.corpora import load_corpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.compiled import CompiledDecoder
from vaswani.decoding.config import SearchConfig
from vaswani.decoding.reference import UncachedModel
from vaswani.decoding.search import SearchableModel, generate
from vaswani.devices import resolve_device, synchronize
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text, check_output
from vaswani.model import Transformer
from vaswani.model.serialization import load_model, resolve_checkpoint
from vaswani.precision import resolve_precision
from vaswani.provenance import provenance, provenance_lines
from vaswani.records import write_record
from vaswani.settings import MAX_BATCH, MAX_COUNT, MAX_LENGTH, MAX_THREADS, PRECISIONS

RANDOM_SOURCE_LENGTHS = (8, 24)  # tokens incl. </s>: roughly Multi30k German with a 10k BPE vocabulary


@dataclass
class SearchTiming:
    """One contender's decoding speed: the same sentences searched ``len(runs)`` times."""

    name: str
    sentences: int
    tokens: int  # output tokens of the best hypotheses, </s> included
    runs: list[float]  # wall seconds of each repeat

    @property
    def seconds(self) -> float:
        # The fastest repeat: interference from other processes only ever adds time, so the minimum is the
        # best estimate of the cost itself (the reasoning of Python's timeit).
        return min(self.runs)

    @property
    def sentences_per_s(self) -> float:
        return self.sentences / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def row(self) -> TimingRow:
        return TimingRow(self.name, self.sentences, self.tokens, self.runs, self.seconds, self.sentences_per_s,
                         self.tokens_per_s)


# ---- inputs ---------------------------------------------------------------------------------------------------
def random_sources(n: int, vocab_size: int, seed: int) -> list[list[int]]:
    """``n`` random id sequences ending in </s>, lengths uniform in RANDOM_SOURCE_LENGTHS."""
    generator = torch.Generator().manual_seed(seed)
    low, high = RANDOM_SOURCE_LENGTHS
    lengths = torch.randint(low, high + 1, (n,), generator=generator).tolist()
    return [torch.randint(4, vocab_size, (length - 1,), generator=generator).tolist() + [2] for length in lengths]


def test_set_sources(tokenizer_file: Path, dataset: str, split: str, data_dir: str | None, n: int) -> list[list[int]]:
    tokenizer = Tokenizer.load(tokenizer_file)
    sentences = list(load_corpus(dataset, split, data_dir=data_dir).source)[:n]
    return [ids + [tokenizer.eos_id] for ids in tokenizer.encode_batch(sentences)]


def batches(sources: list[list[int]], batch_size: int, device: torch.device) -> list[torch.Tensor]:
    """Length-sorted, padded (B, S) batches, as the Translator makes them."""
    ordered = sorted(sources, key=len, reverse=True)
    out = []
    for start in range(0, len(ordered), batch_size):
        chunk = ordered[start : start + batch_size]
        src = torch.zeros(len(chunk), len(chunk[0]), dtype=torch.long)
        for row, ids in enumerate(chunk):
            src[row, : len(ids)] = torch.tensor(ids)
        out.append(src.to(device))
    return out


# ---- timing ---------------------------------------------------------------------------------------------------
def time_search(name: str, model: Any, src_batches: list[torch.Tensor], config: SearchConfig,
                repeats: int) -> SearchTiming:
    """Wall time of searching all batches, ``repeats`` times (after one untimed warm-up batch)."""
    generate(model, src_batches[-1][:2], config)  # warm-up: allocator, kernels, lazy init
    runs, tokens = [], 0
    for _ in range(repeats):
        synchronize(src_batches[0].device)
        start, tokens = time.perf_counter(), 0
        for src in src_batches:
            tokens += sum(len(nbest[0].tokens) + 1 for nbest in generate(model, src, config))
        synchronize(src_batches[0].device)
        runs.append(time.perf_counter() - start)
    return SearchTiming(name, sum(b.size(0) for b in src_batches), tokens, runs)



def time_interleaved(models: dict[str, SearchableModel], src_batches: list[torch.Tensor], config: SearchConfig,
                     repeats: int, configs: dict[str, SearchConfig] | None = None) -> list[SearchTiming]:
    """Like :func:`time_search` for several models, their repeats interleaved (A, B, A, B, …) so that a change of
    load on the machine hits all of them alike. ``configs`` gives some of them a search of their own."""
    configs = {name: (configs or {}).get(name, config) for name in models}
    for name, model in models.items():
        generate(model, src_batches[-1][:2], configs[name])  # warm-up
    runs: dict[str, list[float]] = {name: [] for name in models}
    tokens: dict[str, int] = {}
    for _ in range(repeats):
        for name, model in models.items():
            synchronize(src_batches[0].device)
            start, count = time.perf_counter(), 0
            for src in src_batches:
                count += sum(len(nbest[0].tokens) + 1 for nbest in generate(model, src, configs[name]))
            synchronize(src_batches[0].device)
            runs[name].append(time.perf_counter() - start)
            tokens[name] = count
    n = sum(b.size(0) for b in src_batches)
    return [SearchTiming(name, n, tokens[name], runs[name]) for name in models]


# ---- command --------------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", metavar="DIR", help="trained checkpoint (omitted: random weights)")
    parser.add_argument("--preset", default="small", help="model preset when there is no checkpoint")
    parser.add_argument("--dataset", default="multi30k", help="test set with --checkpoint")
    parser.add_argument("--split", default="test2016", help="split of --dataset")
    add_data_dir_argument(parser)
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=64,
                        help="sentences for the batched measurements")
    parser.add_argument("--batch-size", type=ranged(int, ge=1, le=MAX_BATCH), default=64, help="sentences per batch")
    parser.add_argument("--beams", type=ranged(int, ge=1, le=MAX_LENGTH), nargs="+", default=[4, 5],
                        help="beam sizes to measure")
    parser.add_argument("--output-len", type=ranged(int, ge=1, le=MAX_LENGTH), default=64,
                        help="fixed output length (tokens incl. </s>) of random models and of cached vs uncached")
    parser.add_argument("--uncached-sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=16,
                        help="sentences for cached vs uncached")
    parser.add_argument("--single-sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=8,
                        help="sentences decoded one at a time for batched vs one-at-a-time beam")
    parser.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=3,
                        help="timed repeats (the fastest is reported)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="autocast precision (default fp32; auto = bf16 where the device computes it fast)")
    parser.add_argument("--threads", type=ranged(int, ge=1, le=MAX_THREADS), default=None,
                        help="torch intra-op threads (None: torch's choice)")
    parser.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0)
    parser.add_argument("--out", type=Path, default=None,
                        help="write the results as JSON here (with --peer: a directory for results.json + table.md)")
    parser.add_argument("--peer", nargs="+", choices=("marian", "ctranslate2"), default=None,
                        help="compare with MarianMT generate and/or CTranslate2 float32/int8 instead (needs "
                        "pip install 'vaswani[export]'; see vaswani.benchmarks.decode_peers)")
    parser.add_argument("--peer-threads", type=ranged(int, ge=1, le=MAX_THREADS), nargs="+", default=None, metavar="N",
                        help="with --peer: thread counts every engine runs at, interleaved (default: 2)")
    parser.add_argument("--compile", action="store_true",
                        help="also time the decoding step compiled with torch.compile against eager, and the first "
                        "pass that compiles it")
    parser.add_argument("--profile", action="store_true",
                        help="with --peer: also profile the torch engines by operator kind (profile.md)")
    add_passes_argument(parser)


def run(args: argparse.Namespace) -> int:
    _check_outputs(args)
    if args.peer:
        from vaswani.benchmarks.decode_peers import run_peers  # it builds on this module's batches

        return run_peers(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    model, sources, fixed_length = _model_and_sources(args, device)
    natural, fixed = search_configs(args, model, device, fixed_length)
    session = _Session(batches(sources, args.batch_size, device), args.repeats, _Table(args, device))
    searches = [("greedy", natural)] + [(f"beam {k}", replace(natural, beam_size=k)) for k in args.beams]

    speeds = {label: session.time(label, model, session.batches, search) for label, search in searches}
    cache = _cache_speedups(session, model, batches(sources[: args.uncached_sentences], args.batch_size, device),
                            fixed, args.output_len)
    beam_label = f"beam {args.beams[0]}"
    one_by_one = session.time(f"{beam_label} one sentence at a time", model,
                              batches(sources[: args.single_sentences], 1, device), dict(searches)[beam_label])
    batched = speeds[beam_label]
    # What preallocating the self-attention caches buys against growing them by a copy per step (the default).
    preallocation = session.speedups(searches, "preallocated caches", model, "caches grown per step (default)",
                                     model, preallocate_candidate_cache=True)
    backends = _attention_backend_speedups(session, searches, model, device)
    compiled = _compiled_speedups(session, searches, model) if args.compile else None

    comparisons = Comparisons(
        cache["cache_speedup"], cache["cache_speedup_decoder_only"],
        (one_by_one.seconds / one_by_one.sentences) / (batched.seconds / batched.sentences), preallocation,
        backends, compiled)
    print_comparisons(comparisons, beam_label)
    if args.out:
        _write_report(args, device, model, fixed_length, natural, fixed, session, comparisons)
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before minutes of timing, not after: with --peer a directory,
    else a JSON file and its .md beside it."""
    inputs = [args.checkpoint]
    if args.out and args.peer:
        check_output(args.out, command="bench decode", writes="files", inputs=inputs)
    elif args.out:
        for path in (args.out, args.out.with_suffix(".md")):
            check_output(path, command="bench decode", writes="file", inputs=inputs)


def search_configs(args: argparse.Namespace, model: Transformer, device: torch.device,
                   fixed_length: bool) -> tuple[SearchConfig, SearchConfig]:
    """(natural, fixed): the search every measurement uses, and the one with a fixed output length. A random model
    searches with the fixed one throughout (it rarely emits </s>)."""
    if model.config.positions == "learned" and args.output_len > model.config.max_len:
        raise VaswaniError(f"--output-len {args.output_len} exceeds the learned positions' max_len "
                           f"{model.config.max_len}")
    base = SearchConfig(beam_size=1, precision=resolve_precision(args.precision, device))
    # Fixed length: no </s> before the limit, and a limit that does not depend on the source length (the
    # default 1.5·|src| + 10 would stop short sentences early).
    fixed = replace(base, allow_eos=False, max_len_a=0.0, max_len_b=args.output_len)
    return (fixed if fixed_length else base), fixed


@dataclass
class _Session:
    """What every measurement of one run shares: the batches, the repeats, and the table each row goes to
    (``rows`` in the order they were measured)."""

    batches: list[torch.Tensor]
    repeats: int
    table: "_Table"
    rows: list[SearchTiming] = field(default_factory=list)

    def time(self, name: str, model: Any, src_batches: list[torch.Tensor], config: SearchConfig) -> SearchTiming:
        row = self.table.add(time_search(name, model, src_batches, config, self.repeats))
        self.rows.append(row)
        return row

    def speedups(self, searches: list[tuple[str, SearchConfig]], candidate_name: str, candidate: Any,
                 reference_name: str, reference: Any,
                 preallocate_candidate_cache: bool = False) -> dict[str, float]:
        """Per search, the median over interleaved repeats of reference time / candidate time (> 1: the candidate
        is faster); ``preallocate_candidate_cache``: only the candidate searches with preallocated caches."""
        ratios = {}
        for label, search in searches:
            candidate_label = f"{label}, {candidate_name}"
            candidate_search = replace(search, preallocate_cache=True) if preallocate_candidate_cache else search
            timed_candidate, timed_reference = time_interleaved(
                {candidate_label: candidate, f"{label}, {reference_name}": reference}, self.batches, search,
                self.repeats, configs={candidate_label: candidate_search})
            for row in (timed_candidate, timed_reference):
                self.rows.append(self.table.add(row))
            ratios[label] = statistics.median(r / c for c, r in zip(timed_candidate.runs, timed_reference.runs))
        return ratios


def _cache_speedups(session: _Session, model: Transformer, few: list[torch.Tensor], fixed: SearchConfig,
                    length: int) -> dict[str, float]:
    """What the key/value cache saves: cached greedy against rerunning ``model(src, prefix)`` every step, and
    against rerunning the decoder only, at a fixed output length."""
    cached = session.time(f"greedy cached, {length} tokens", model, few, fixed)
    uncached = session.time(f"greedy uncached model(src, prefix), {length} tokens", UncachedModel(model), few,
                            fixed)
    decoder_only = session.time(f"greedy uncached decoder, encoder kept, {length} tokens",
                                UncachedModel(model, reencode=False), few, fixed)
    return {"cache_speedup": uncached.seconds / cached.seconds,
            "cache_speedup_decoder_only": decoder_only.seconds / cached.seconds}


def _attention_backend_speedups(session: _Session, searches: list[tuple[str, SearchConfig]], model: Transformer,
                                device: torch.device) -> BackendComparison:
    """What the attention backend costs when decoding: the same weights under the other backend, interleaved."""
    other = "sdpa" if model.config.attention == "standard" else "standard"
    twin = Transformer(replace(model.config, attention=other)).to(device).eval()
    twin.load_state_dict(model.state_dict())
    own = session.speedups(searches, f"{model.config.attention} attention (the model's)", model,
                           f"{other} attention", twin)
    return BackendComparison(model.config.attention, other, own)


def _compiled_speedups(session: _Session, searches: list[tuple[str, SearchConfig]],
                       model: Transformer) -> CompiledComparison:
    """What torch.compile buys once compiled, and what the first pass over the batches costs (it compiles)."""
    decoder = CompiledDecoder(model)
    first_pass = {}
    for label, search in searches:
        start = time.perf_counter()
        for src in session.batches:
            generate(decoder, src, search)
        first_pass[label] = time.perf_counter() - start
    return CompiledComparison(session.speedups(searches, "compiled decoding step", decoder, "eager", model),
                              first_pass)


def _write_report(args: argparse.Namespace, device: torch.device, model: Transformer, fixed_length: bool,
                  natural: SearchConfig, fixed: SearchConfig, session: _Session, comparisons: Comparisons) -> None:
    """The JSON at ``--out`` and its markdown table beside it."""
    report = DecodeReport(
        **provenance(device).to_json(),
        arguments={key: (str(v) if isinstance(v, Path) else v) for key, v in vars(args).items()
                   if key not in ("handler",)},
        model=BenchModel(args.checkpoint, None if args.checkpoint else args.preset, model.num_parameters(),
                         model.config.to_dict()),
        fixed_output_length=fixed_length,
        search={"natural": natural, "fixed": fixed},
        results=[row.row() for row in session.rows],
        comparisons=comparisons,
    )
    write_record(args.out, report)
    backends = comparisons.attention_backend
    preallocation = ", ".join(f"{label} {x:.2f}×" for label, x in comparisons.preallocated_cache_speedup.items())
    atomic_write_text(args.out.with_suffix(".md"), "\n".join([
        f"# `vaswani bench decode`: {session.table.title}", "", *session.table.markdown, "",
        f"Preallocated caches vs caches grown per step (median of interleaved repeats): {preallocation}.  ",
        f"KV cache vs model(src, prefix): {comparisons.cache_speedup:.1f}×.  ",
        f"The model's {backends.model} attention vs the same weights with {backends.other} attention (median "
        "of interleaved repeats, > 1: the model's own is faster): "
        + ", ".join(f"{label} {x:.2f}×" for label, x in backends.own_speedup.items()) + ".",
        *compiled_lines(comparisons.compiled_step), "", *provenance_lines(report.provenance()), ""]))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")


def _model_and_sources(args: argparse.Namespace, device: torch.device) -> tuple[Transformer, list[list[int]], bool]:
    """(model, source ids, whether outputs have a fixed length)."""
    if args.checkpoint:
        directory = resolve_checkpoint(args.checkpoint)
        model = load_model(directory, device=device).eval()
        sources = test_set_sources(directory / "tokenizer.json", args.dataset, args.split, args.data_dir,
                                   args.sentences)
        return model, sources, False
    model = Transformer(ModelConfig.preset(args.preset, dropout=0.0)).to(device).eval()
    return model, random_sources(args.sentences, model.config.vocab_size, args.seed), True


class _Table:
    """Prints each measurement as soon as it is taken (the uncached rows take minutes on a CPU)."""

    WIDTH = 50

    def __init__(self, args: argparse.Namespace, device: torch.device):
        precision = resolve_precision(args.precision, device)
        model = f"checkpoint {args.checkpoint}" if args.checkpoint else f"random {args.preset} model"
        self.title = f"decoding speed on {device} ({torch.get_num_threads()} threads, {precision}), {model}"
        print(self.title)
        print(f"{'search':<{self.WIDTH}}  {'sentences':>9}  {'seconds':>8}  {'sent/s':>8}  {'tokens/s':>9}")
        self.markdown = ["| search | sentences | seconds (fastest repeat) | sentences/s | tokens/s |",
                         "|---|---:|---:|---:|---:|"]

    def add(self, row: SearchTiming) -> SearchTiming:
        print(f"{row.name:<{self.WIDTH}}  {row.sentences:>9}  {row.seconds:>8.2f}  {row.sentences_per_s:>8.1f}  "
              f"{row.tokens_per_s:>9.0f}", flush=True)
        self.markdown.append(f"| {row.name} | {row.sentences} | {row.seconds:.2f} | {row.sentences_per_s:.1f} | "
                             f"{row.tokens_per_s:.0f} |")
        return row
