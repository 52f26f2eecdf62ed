"""`vaswani bench decode --peer marian|ctranslate2`: our search against the engines a user would deploy instead.

The same model in every engine — ours, Hugging Face MarianMT ``generate`` (built by the HF export), CTranslate2
float32 and int8 (the conversion the CTranslate2 engine loads) — on the same length-sorted batches, greedy and
beam 4, with every engine on the same threads (``--peer-threads``, default 2: torch intra-op threads; CTranslate2
intra_threads, inter_threads=1). The timed repeats are interleaved (ours, peer, peer, …, ours, peer, …) in one
process, so machine noise hits all engines alike; each figure is the median of the repeats, with the min–max
spread. With several thread counts every repeat runs each of them too, so the scaling from 1 to 2 threads is
measured under the same load.

``--compile`` adds a second engine of ours, ``ours, compiled step``: the same search with its decoding step
compiled by torch.compile (:class:`~vaswani.decoding.compiled.CompiledDecoder`), compiled during the untimed
warm-up; every peer's ratio is then given for both.

``--profile`` adds where the time goes: more passes of each torch engine (ours, MarianMT) under
``torch.profiler`` (``--profile-passes``), its operators' self CPU time summed by kind (matrix products, the
attention kernel, softmax, search reductions, copies, …), written to ``profile.md`` next to the timings, with the
ceiling every other engine leaves ours (see ``profiling.ceiling_line``). CTranslate2 is compiled code the profiler
cannot see into: only its unprofiled total is known, and it is what its ceiling is taken against.

Two settings:

- ``--checkpoint RUN``: a trained model on the first ``--sentences`` of a real test set (Multi30k test2016), with
  BLEU of each engine's outputs. Every engine gets the same output limit per batch, 1.5 × its longest source
  + 10 tokens (generate and CTranslate2 take one limit per call); outputs end at </s>.
- no checkpoint: random weights at the fixed shape the speed targets are stated at (d_model 256, 3+3 layers,
  8 heads, d_ff 1024, vocabulary 8000), 64 random 16-token sources, and exactly ``--output-len`` decoder steps for
  every sentence (</s> suppressed until the last step in every engine): pure decoding speed, no BLEU.

Search settings that match across engines: beam scores are log P / |Y| (our length_norm=average, generate's
length_penalty=1.0, CTranslate2's length_penalty=1), a sentence's beam stops when k hypotheses have ended.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch

from vaswani.benchmarks.decode import batches as padded_batches
from vaswani.benchmarks.decode_peers_report import (
    OURS,
    OURS_COMPILED,
    EngineProfile,
    PeerRow,
    PeersReport,
    PeerThreads,
    RandomModel,
    SpeedRatio,
    ThreadScaling,
    TrainedModel,
    TrainingRecord,
    is_ours,
    print_report,
    render_profile,
    render_table,
)
from vaswani.benchmarks.profiling import PROFILE_PASSES, matmul_peak, profile_by_kind
from vaswani.config import ModelConfig
from vaswani.data.corpora import load_corpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.compiled import CompiledDecoder
from vaswani.decoding.config import SearchConfig
from vaswani.decoding.ct2_model import model_spec
from vaswani.decoding.ct2_model import vocabulary as ct2_vocabulary
from vaswani.decoding.search import generate
from vaswani.errors import VaswaniError
from vaswani.evaluation.metrics import corpus_scores
from vaswani.export.hf import to_marian
from vaswani.io import atomic_write_text
from vaswani.model import Transformer
from vaswani.model.serialization import load_model, resolve_checkpoint
from vaswani.provenance import PROVENANCE_FILE, first_training_start, provenance
from vaswani.records import to_json
from vaswani.training.summary import SUMMARY_FILE, RunSummary

PEERS = ("marian", "ctranslate2")
DEFAULT_THREADS = [2]
# The fixed shape the decoding speed targets are stated at, for the random-weights comparison.
FIXED_SHAPE = dict(vocab_size=8000, d_model=256, n_heads=8, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024,
                   max_len=128, dropout=0.0)
FIXED_SOURCE_LEN = 16  # tokens incl. </s>


@dataclass
class Engine:
    name: str
    # decode(batch index, beam, threads) -> output ids per sentence (no </s>); closes over prepared inputs
    decode: Callable[[int, int, int], list[list[int]]]
    profiled: bool = True  # runs torch operators that torch.profiler can see


@dataclass
class Row:
    engine: str
    search: str
    threads: int
    sentences: int
    runs: list[float] = field(default_factory=list)
    tokens: int = 0  # output tokens of the last repeat, </s> included
    bleu: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def result(self) -> PeerRow:
        return PeerRow(self.engine, self.search, self.threads, self.sentences, self.runs, self.median,
                       self.sentences / self.median, self.sentences / max(self.runs), self.sentences / min(self.runs),
                       self.tokens, self.bleu)


# ---- inputs ---------------------------------------------------------------------------------------------------
def _cpu_batches(sources: list[list[int]], batch_size: int) -> list[torch.Tensor]:
    """Length-sorted (B, S) batches of ids ending in </s>, padded with 0 — what every engine decodes: the ones
    ``vaswani bench decode`` times ours on."""
    return padded_batches(sources, batch_size, torch.device("cpu"))


def _batch_limits(batches: list[torch.Tensor], fixed: int | None) -> list[int]:
    """Output limit per batch (tokens incl. </s>): fixed, or 1.5 × the longest source + 10 (our default)."""
    if fixed is not None:
        return [fixed] * len(batches)
    return [int(1.5 * int((src != 0).sum(1).max()) + 10) for src in batches]


# ---- engines --------------------------------------------------------------------------------------------------


def ours(model: Transformer, batches: list[torch.Tensor], limits: list[int], fixed: bool,
         compile: bool = False) -> Engine:
    """Our search; with ``compile`` its decoding step runs through torch.compile (CompiledDecoder)."""
    decoder = CompiledDecoder(model) if compile else model

    def decode(i: int, beam: int, threads: int) -> list[list[int]]:  # torch's threads are set by the caller
        # fp32, as the peers compute: "auto" would be bf16 on a CPU with bf16 units, another precision than theirs.
        config = SearchConfig(beam_size=beam, length_norm="average", max_len_a=0.0, max_len_b=limits[i],
                              allow_eos=not fixed, precision="fp32")
        return [nbest[0].tokens for nbest in generate(decoder, batches[i], config)]

    # The profiler would see the compiled step as one opaque region: only the eager engine is profiled.
    return Engine(OURS_COMPILED if compile else OURS, decode, profiled=not compile)


def marian(model: Transformer, batches: list[torch.Tensor], limits: list[int], fixed: bool) -> Engine:
    ids = SimpleNamespace(pad_id=0, bos_id=1, eos_id=2)  # our special ids (the tokenizer's fixed convention)
    hf_model = to_marian(model, ids)

    def decode(i: int, beam: int, threads: int) -> list[list[int]]:  # torch's threads are set by the caller
        src = batches[i]
        # Lengths in generate count the decoder start token too; forced_eos_token_id (the export's generation
        # config) makes the last allowed token </s>, as ours does.
        settings = dict(min_length=limits[i] + 1) if fixed else {}
        with torch.inference_mode():
            out = hf_model.generate(input_ids=src, attention_mask=src != 0, num_beams=beam, do_sample=False,
                                    length_penalty=1.0, early_stopping=True, max_length=limits[i] + 1, **settings)
        rows = [row[1:].tolist() for row in out]
        return [row[: row.index(2)] if 2 in row else row for row in rows]

    return Engine("marian", decode)


def ctranslate2_engines(model: Transformer, vocabulary: list[str], batches: list[torch.Tensor], limits: list[int],
                        fixed: bool, workdir: Path, thread_counts: list[int]) -> list[Engine]:
    import ctranslate2


    index = {token: i for i, token in enumerate(vocabulary)}
    # Token strings prepared outside the timed region, as our engine gets ready-made id tensors.
    # The model config appends </s> itself, so each source is given up to its </s> (then padding).
    tokens = [[[vocabulary[t] for t in row[: row.index(2)]] for row in src.tolist()] for src in batches]
    engines = []
    for quantization in ("float32", "int8"):
        directory = workdir / quantization
        spec = model_spec(model, vocabulary)
        spec.validate()
        spec.optimize(quantization=quantization)
        directory.mkdir(parents=True)
        spec.save(str(directory))
        translators = {n: ctranslate2.Translator(str(directory), device="cpu", compute_type=quantization,
                                                 intra_threads=n, inter_threads=1) for n in thread_counts}

        def decode(i: int, beam: int, threads: int, translators=translators) -> list[list[int]]:
            # CTranslate2's lengths count tokens without </s>, ours count </s>; at a fixed length every engine
            # runs `limit` decoder steps (ours: limit - 1 tokens, then the forced </s>).
            length = limits[i] if fixed else limits[i] - 1
            settings = dict(min_decoding_length=length) if fixed else {}
            results = translators[threads].translate_batch(tokens[i], beam_size=beam, max_decoding_length=length,
                                                           length_penalty=1.0, **settings)
            return [[index[t] for t in result.hypotheses[0]] for result in results]

        engines.append(Engine(f"ctranslate2 {quantization}", decode, profiled=False))
    return engines


# ---- the benchmark --------------------------------------------------------------------------------------------
def run_peers(args: argparse.Namespace) -> int:
    thread_counts = args.peer_threads or DEFAULT_THREADS
    torch.manual_seed(args.seed)
    if args.device not in ("auto", "cpu"):
        raise VaswaniError("--peer compares CPU engines; use --device cpu")
    fixed = not args.checkpoint
    if args.checkpoint:
        model, vocabulary, sources, references, tokenizer, model_info = _trained(args)
    else:
        model, vocabulary, sources = _random(args)
        references, tokenizer = None, None
        model_info = RandomModel(random_weights=True, config=model.config.to_dict())
    batches = _cpu_batches(sources, args.batch_size)
    limits = _batch_limits(batches, args.output_len if fixed else None)

    searches = [("greedy", 1)] + [(f"beam {k}", k) for k in args.beams]
    engines = [ours(model, batches, limits, fixed)]
    if args.compile:
        engines.append(ours(model, batches, limits, fixed, compile=True))
    with tempfile.TemporaryDirectory() as workdir:
        if "marian" in args.peer:
            engines.append(marian(model, batches, limits, fixed))
        if "ctranslate2" in args.peer:
            engines += ctranslate2_engines(model, vocabulary, batches, limits, fixed, Path(workdir), thread_counts)
        rows = {(e.name, s, n): Row(e.name, s, n, len(sources)) for e in engines for s, _ in searches
                for n in thread_counts}
        outputs: dict[tuple[str, str, int], list[list[int]]] = {}
        for engine in engines:  # warm-up, untimed: lazy initialisation, allocator, first-call costs, compiling
            for threads in thread_counts:
                torch.set_num_threads(threads)
                for _, beam in searches:
                    engine.decode(0, beam, threads)
        for repeat in range(args.repeats):
            for search, beam in searches:
                for threads in thread_counts:
                    torch.set_num_threads(threads)  # torch engines; CTranslate2 has a translator per count
                    for engine in engines:  # interleaved: every repeat runs each engine once, back to back
                        start = time.perf_counter()
                        result = [engine.decode(i, beam, threads) for i in range(len(batches))]
                        rows[engine.name, search, threads].runs.append(time.perf_counter() - start)
                        outputs[engine.name, search, threads] = [ids for batch in result for ids in batch]
            print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)
        profiles = ([profile_engine(engine, search, beam, threads, len(batches), args.profile_passes)
                     for search, beam in searches for threads in thread_counts for engine in engines
                     if engine.profiled] if args.profile else [])
        # The rate the profiled matrix products are compared with, measured in this run (see matmul_peak).
        peaks = {str(threads): matmul_peak(threads) for threads in thread_counts} if profiles else {}

    ordered_sources = [s for src in batches for s in src.tolist()]
    for key, row in rows.items():
        row.tokens = sum(len(ids) + 1 for ids in outputs[key])
        if tokenizer is not None:
            row.bleu = _bleu(tokenizer, outputs[key], ordered_sources, sources, references)
    report = _report(args, model_info, list(rows.values()), fixed, thread_counts, profiles, peaks)
    print_report(report)
    if args.out:
        out = Path(args.out)
        report.write(out / "results.json")
        atomic_write_text(out / "table.md", render_table(report))
        if profiles:
            atomic_write_text(out / "profile.md", render_profile(report))
        print(f"wrote {out / 'results.json'} and {out / 'table.md'}" + (" and profile.md" if profiles else ""))
    return 0


def _trained(args: argparse.Namespace):
    directory = resolve_checkpoint(args.checkpoint)
    model = load_model(directory).eval()
    tokenizer = Tokenizer.load(directory / "tokenizer.json")
    corpus = load_corpus(args.dataset, args.split, data_dir=args.data_dir)
    sentences = list(corpus.source)[: args.sentences]
    references = list(corpus.target)[: args.sentences]
    sources = [ids + [tokenizer.eos_id] for ids in tokenizer.encode_batch(sentences)]
    info = TrainedModel(str(directory), model.num_parameters(), model.config.to_dict(),
                        f"{args.dataset} {args.split}, first {len(sentences)} sentences", _training_record(directory))
    return model, ct2_vocabulary(tokenizer, model.config.vocab_size), sources, references, tokenizer, info


def _training_record(checkpoint: Path) -> TrainingRecord | None:
    """How the checkpoint was trained, from its run directory (command, commit, where it stopped), if there."""
    run_dir = checkpoint.resolve().parent.parent if checkpoint.resolve().parent.name == "checkpoints" else None
    if run_dir is None or not (run_dir / PROVENANCE_FILE).is_file():
        return None
    summary = to_json(RunSummary.read(run_dir)) if (run_dir / SUMMARY_FILE).is_file() else None
    return TrainingRecord(first_training_start(run_dir).record or None, summary)


def _random(args: argparse.Namespace):
    model = Transformer(ModelConfig(**FIXED_SHAPE)).eval()
    generator = torch.Generator().manual_seed(args.seed)
    sources = [torch.randint(4, FIXED_SHAPE["vocab_size"], (FIXED_SOURCE_LEN - 1,), generator=generator).tolist()
               + [2] for _ in range(args.sentences)]
    vocabulary = ["<pad>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, FIXED_SHAPE["vocab_size"])]
    return model, vocabulary, sources


def _bleu(tokenizer: Any, outputs: list[list[int]], ordered_sources: list[list[int]], sources: list[list[int]],
          references: list[str]) -> float:
    """Corpus BLEU of outputs given in batch order, matched back to their references by source."""
    by_source: dict[tuple[int, ...], list[int]] = {}
    for src, ids in zip(ordered_sources, outputs):
        by_source[tuple(t for t in src if t != 0)] = ids
    hypotheses = tokenizer.decode_batch([by_source[tuple(s)] for s in sources])
    return round(corpus_scores([" ".join(h.splitlines()) for h in hypotheses], references).bleu, 2)


def _report(args: argparse.Namespace, model_info: RandomModel | TrainedModel, rows: list[Row], fixed: bool,
            thread_counts: list[int], profiles: list[EngineProfile], peaks: dict[str, float]) -> PeersReport:
    by = {(r.engine, r.search, r.threads): r for r in rows}
    ratios = [SpeedRatio(own, engine, search, threads, round(row.median / by[own, search, threads].median, 3))
              for (engine, search, threads), row in by.items() if not is_ours(engine)
              for own in (OURS, OURS_COMPILED) if (own, search, threads) in by]
    scaling = [ThreadScaling(engine, search, threads, round(by[engine, search, 1].median / row.median, 3))
               for (engine, search, threads), row in by.items() if threads != 1 and (engine, search, 1) in by]
    return PeersReport(
        **provenance("cpu").to_json(),
        setting="random weights, fixed output length" if fixed else "trained checkpoint, outputs end at </s>",
        model=model_info,
        threads=PeerThreads(thread_counts, ctranslate2_inter=1),
        sentences=args.sentences,
        batch_size=args.batch_size,
        repeats=args.repeats,
        output_len=args.output_len if fixed else "1.5 x longest source in the batch + 10",
        results=[r.result() for r in rows],
        speed_ratios=ratios,
        thread_scaling=scaling,
        profile=profiles,
        matmul_peak_gflops=peaks,
        profile_passes=args.profile_passes,
    )


# ---- where the time goes ----------------------------------------------------------------------------------------
def profile_engine(engine: Engine, search: str, beam: int, threads: int, n_batches: int,
                   passes: int = PROFILE_PASSES) -> EngineProfile:
    """Untimed passes of ``engine`` over every batch under torch.profiler: self CPU ms by operator kind."""
    torch.set_num_threads(threads)
    profile = profile_by_kind(lambda: [engine.decode(i, beam, threads) for i in range(n_batches)], passes=passes)
    return EngineProfile(engine=engine.name, search=search, threads=threads, **vars(profile))
