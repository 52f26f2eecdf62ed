"""The CTranslate2 engine: the checkpoint's conversion searched by ``ctranslate2.Translator.translate_batch``.

Every search option maps to a ``translate_batch`` argument or is refused in one line naming it (:meth:`bind`):

- ``beam_size``, ``nbest``: ``beam_size``; the ``nbest`` best (by our scores) of the ``num_hypotheses=beam`` it
  returns;
- the length penalty: CTranslate2 ranks a finished hypothesis by log P / |Y|^p, with |Y| counting </s> when it
  returns the end token (we ask it to, as our lengths count </s>). So ``power`` with α is p = α, ``average`` is
  p = 1, and ``none`` (or GNMT with α = 0) is a p so small that |Y|^p rounds to 1 in float32: p = 0 exactly
  would switch CTranslate2 to stopping as soon as its top beam ends, another rule than ours when several
  hypotheses are asked for. GNMT's ((5 + |Y|) / 6)^α has no counterpart, so it is refused for beam search (greedy
  search does not rank, and its score is recomputed with GNMT here);
- ``max_len_a`` / ``max_len_b``: ``max_decoding_length``, one per call, so a batch is decoded to its longest
  limit and each output is cut at its own (:func:`~vaswani.decoding.engine.output_limits`);
- ``repetition_penalty``: ``repetition_penalty`` (the same CTRL rule on the logits, over the tokens generated);
- ``no_repeat_ngram``: ``no_repeat_ngram_size`` (banned before the softmax, as ours);
- ``precision`` and the engine option ``compile`` are the torch engine's; CTranslate2's arithmetic is its
  ``quantization``.

With those, float32 outputs are the torch engine's (tested on a trained model): the two searches keep the same
beams (the 2k best candidates, </s> among the top k ends a hypothesis) and stop at the same step. They part only
where an output reaches its length limit: there the torch search forces </s> and scores it, while CTranslate2 cuts
the hypothesis; a greedy output is the same either way (cut outputs are rescored with </s>, as ours), a beam may
then pick another of the cut hypotheses, and such a sentence's output may depend on the longest limit of its batch.
Outputs past the converted position table (2,048 tokens for sinusoidal positions) are cut there.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Sequence

from vaswani.config import ModelConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.ct2_checked import checked_conversion, record_check
from vaswani.decoding.ct2_model import (
    CHECKPOINT_FILES,
    cannot_express,
    conversion_roots,
    converted_model,
    position_rows,
    vocabulary,
    weight_parameters,
)
from vaswani.decoding.engine import CTRANSLATE2, EngineDescription, Hypothesis, length_penalty, output_limits
from vaswani.errors import ConfigError, EnvironmentFault, VaswaniError

# The exponent that stands for "no length penalty": |Y|^p == 1.0 in float32 for every length, yet p != 0, which
# keeps CTranslate2's stopping rule (k finished hypotheses) rather than its early exit.
NO_PENALTY_EXPONENT = 1e-30
# Refused on the CPU by name, with the reason (CTranslate2 would silently compute in another type).
GPU_QUANTIZATIONS = ("float16", "bfloat16", "int8_float16", "int8_bfloat16")


def ctranslate2_module() -> Any:
    """The ``ctranslate2`` package, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise EnvironmentFault("`engine` ctranslate2 needs the ctranslate2 package: pip install 'vaswani[export]' "
                               "(or use `engine` torch)") from None
    return ctranslate2


def resolve_device(device: str | None) -> tuple[str, int]:
    """``auto``/None -> cuda when CTranslate2 sees a GPU, else cpu; ``cuda:N`` -> ("cuda", N)."""
    ctranslate2 = ctranslate2_module()
    name = device or "auto"
    if name == "auto":
        return ("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"), 0
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ConfigError(f"device {name!r} is not a device name; use auto, cpu, cuda or cuda:N")
    if kind == "cuda":
        count = ctranslate2.get_cuda_device_count()
        if count == 0:
            raise EnvironmentFault(f"device {name!r} was asked for but CTranslate2 sees no CUDA device (ctranslate2 "
                                   f"{ctranslate2.__version__}); use `device` cpu")
        if int(index or 0) >= count:
            raise EnvironmentFault(f"device {name!r} was asked for but CTranslate2 sees only {count} CUDA device(s)")
    return kind, int(index or 0)


def check_quantization(quantization: str, device: str) -> None:
    """A quantization CTranslate2 computes on ``device`` (as this build and this CPU or GPU support it)."""
    supported = sorted(ctranslate2_module().get_supported_compute_types(device))
    if quantization not in supported:
        needs = " (it needs a GPU)" if device == "cpu" and quantization in GPU_QUANTIZATIONS else ""
        raise ConfigError(f"`quantization` {quantization}: CTranslate2 cannot compute it on this {device}{needs}; "
                          f"here it can: {', '.join(supported)}", field="quantization")


def length_exponent(config: SearchConfig) -> float:
    """CTranslate2's ``length_penalty`` for ``config``'s length normalisation (see the module docstring)."""
    if config.length_norm == "power":
        return config.alpha if config.alpha > 0 else NO_PENALTY_EXPONENT
    if config.length_norm == "average":
        return 1.0
    return NO_PENALTY_EXPONENT  # none, greedy search with any norm, and GNMT with α = 0


# CTranslate2 forces a target prefix on every beam of a sentence, which then hold copies of one hypothesis.
PREFIXED_BEAM = ("a target prefix in beam search: CTranslate2 forces it on every beam, which then hold "
                 "copies of one hypothesis; use `beam` 1, or `engine` torch")
CONSTRAINED = ("lexical constraints: they are placed by the torch engine's constrained beam search (dynamic beam "
               "allocation); use `engine` torch")


def cannot_run(config: SearchConfig, prefixed: bool = False, constrained: bool = False) -> str | None:
    """The option of ``config`` CTranslate2 cannot run, with why, in one line (None if it runs them all);
    ``prefixed``: with target prefixes; ``constrained``: with lexical constraints."""
    if constrained:
        return CONSTRAINED
    if prefixed and config.beam_size > 1:
        return PREFIXED_BEAM
    if config.length_norm == "gnmt" and config.alpha > 0 and config.beam_size > 1:
        return (f"`search.length_norm` gnmt (alpha {config.alpha:g}): CTranslate2 ranks a beam by log P / |Y|^alpha "
                "and has no GNMT penalty; use `search.length_norm` power (or average, none), or `engine` torch")
    if config.precision != "auto":
        return (f"`search.precision` {config.precision}: autocast is the torch engine's; CTranslate2 computes in its "
                "`quantization` (leave out `search.precision`, or use `engine` torch)")
    if not config.allow_eos:
        return "search.allow_eos=False (fixed-length decoding) is the torch engine's; use `engine` torch"
    return None


# Where CTranslate2 keeps the vocabulary a conversion was made with (the one list for source and target).
SHARED_VOCABULARY_FILE = "shared_vocabulary.json"


def stored_vocabulary(directory: Path, size: int) -> list[str] | None:
    """The token strings by id that the converted model in ``directory`` was made with, read from its own file (a
    JSON list: a millisecond, where rebuilding it from the tokenizer costs tens at every start-up), or None when
    it has none of ``size`` strings. The conversion's key covers tokenizer.json, so the list is the tokenizer's.
    The file is one the conversion's manifest vouches for (checked by sha256 before the engine opens it), so it is
    parsed as it is, without the shape checks of a file a user hands in."""
    try:
        tokens = json.loads((directory / SHARED_VOCABULARY_FILE).read_bytes())
    except (OSError, ValueError, RecursionError):  # missing, not UTF-8 or not JSON: rebuilt from the tokenizer
        return None
    if not isinstance(tokens, list) or len(tokens) != size or not all(isinstance(token, str) for token in tokens):
        return None
    return tokens


class CTranslate2Engine:
    name = CTRANSLATE2

    def __init__(self, directory: Path, model_config: ModelConfig, tokenizer: Tokenizer, quantization: str,
                 device: str = "cpu", device_index: int = 0, threads: int = 0, checkpoint: Path | None = None):
        """``directory``: a converted model (model.bin); ``threads``: CTranslate2's intra_threads (0: its
        default); ``checkpoint``: where the torch reference model can be loaded from, when asked for."""
        ctranslate2 = ctranslate2_module()
        check_quantization(quantization, device)
        self.directory, self.checkpoint = directory, checkpoint
        self.model_config, self.quantization, self.threads = model_config, quantization, threads
        self.device = device if device == "cpu" else f"{device}:{device_index}"
        try:
            self.translator = ctranslate2.Translator(str(directory), device=device, device_index=device_index,
                                                     compute_type=quantization, intra_threads=threads,
                                                     inter_threads=1)
        except (RuntimeError, ValueError) as error:
            raise VaswaniError(f"{directory}: CTranslate2 cannot load this model ({error})") from None
        self.vocabulary = stored_vocabulary(directory, model_config.vocab_size) or vocabulary(tokenizer,
                                                                                            model_config.vocab_size)
        self.ids = dict(zip(self.vocabulary, range(len(self.vocabulary))))
        self.eos = self.vocabulary[tokenizer.eos_id]
        self._reference: Any = None

    @classmethod
    def load(cls, checkpoint: Path, model_config: ModelConfig, tokenizer: Tokenizer,
             options: EngineOptions) -> "CTranslate2Engine":
        """The engine for the checkpoint in directory ``checkpoint``, converting it first if needed: in
        ``options.quantization`` (None: float32), on ``options.device`` with ``options.threads``. The checkpoint is
        checked first as every engine checks it (its files against their fingerprint and manifest), since its
        conversion stands for it; a load whose files all are as the last full check found them skips the hashing
        (ct2_checked.py)."""
        from vaswani.model.serialization import INFERENCE_FILES, check_checkpoint  # torch: not for a conversion

        reason = cannot_express(model_config)
        if reason is not None:
            raise ConfigError(f"CTranslate2 cannot run {reason}; use `engine` torch")
        quantization = options.quantization or "float32"
        kind, index = resolve_device(options.device)
        check_quantization(quantization, kind)
        checked = tuple(dict.fromkeys((*INFERENCE_FILES, *CHECKPOINT_FILES)))  # what the check and the key read
        roots = conversion_roots(checkpoint)
        conversion = checked_conversion(roots, checkpoint, quantization, checked)
        if conversion is None:  # something changed since the last full check, or there was none
            started = time.time_ns()
            check_checkpoint(checkpoint)
            conversion = converted_model(checkpoint, quantization)
            record_check(conversion.parent, checkpoint, quantization, conversion, checked, started)
        return cls(conversion, model_config, tokenizer, quantization, kind, index, options.threads, checkpoint)

    # ---- the engine interface ---------------------------------------------------------------------------------
    def bind(self, config: SearchConfig) -> SearchConfig:
        reason = cannot_run(config)
        if reason is not None:
            raise ConfigError(f"CTranslate2 cannot run {reason}")
        return config

    def search(self, sources: Sequence[list[int]], config: SearchConfig,
               prefixes: Sequence[list[int]] | None = None,
               constraints: Sequence[list[list[int]]] | None = None,
               continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        if constraints is not None and any(constraints):
            raise ConfigError(f"CTranslate2 cannot run {CONSTRAINED}", field="constraints")
        limits = output_limits([len(source) for source in sources], config, self.model_config)
        rows = position_rows(self.model_config)
        if rows is not None:  # the decoder reads <s> at position 0: a limit of n tokens needs positions 0 .. n-2
            limits = [min(limit, rows + 1) for limit in limits]
        tokens = []
        for source in sources:
            if config.pad_id in source[:-1]:
                raise VaswaniError("`engine` ctranslate2 cannot mask tokens inside a source (padding ids among "
                                   "them); use `engine` torch")
            tokens.append([self.vocabulary[i] for i in source[:-1]])  # the converted model appends </s> itself
        exponent = length_exponent(config)
        longest = max(limits) - 1  # CTranslate2 counts generated tokens, </s> included; ours stop one before
        if longest == 0:  # every output is </s> alone: nothing to generate, only to score
            return [[hypothesis] for hypothesis in self._rescored([([], source) for source in tokens], config)]
        forced: dict[str, list] = {}
        if prefixes is not None and any(prefixes):  # forced and scored as the torch search does
            if config.beam_size > 1:
                raise ConfigError(f"CTranslate2 cannot run {PREFIXED_BEAM}", field="target_prefix")
            forced["target_prefix"] = [[self.vocabulary[i] for i in prefix] or None for prefix in prefixes]
        if config.sample:
            return self._sampled(tokens, limits, config, forced)
        # Every finished hypothesis of the beam comes back, not only the n best: a sentence decoded past its own limit
        # (to its batch's longest) may rank first one that is cut and rescored below, and the n best by our scores
        # are then among the others.
        results = self.translator.translate_batch(
            tokens, **forced, beam_size=config.beam_size, num_hypotheses=config.beam_size,
            length_penalty=exponent,
            repetition_penalty=config.repetition_penalty, no_repeat_ngram_size=config.no_repeat_ngram,
            max_decoding_length=longest, min_decoding_length=0, max_input_length=0, return_scores=True,
            return_end_token=True,
        )
        out: list[list[Hypothesis | None]] = []
        cut: list[tuple[int, int, list[int]]] = []  # (sentence, place in its n-best list, ids cut at its limit)
        for sentence, (limit, result) in enumerate(zip(limits, results)):
            nbest: list[Hypothesis | None] = []
            for output, score in zip(result.hypotheses, result.scores):
                ended = bool(output) and output[-1] == self.eos
                ids = [self.ids[token] for token in (output[:-1] if ended else output)]
                if ended and len(ids) < limit:
                    log_prob = score * (len(ids) + 1) ** exponent
                    nbest.append(Hypothesis(ids, _normalised(log_prob, len(ids) + 1, config), log_prob))
                else:  # reached the length limit: cut at this sentence's own and end it with </s>, as ours does
                    cut.append((sentence, len(nbest), ids[: limit - 1]))
                    nbest.append(None)
            out.append(nbest)
        for (sentence, place, _), hypothesis in zip(cut, self._rescored(
                [(ids, tokens[sentence]) for sentence, _, ids in cut], config)):
            out[sentence][place] = hypothesis
        return [sorted(nbest, key=lambda h: h.score, reverse=True)[: config.nbest]  # type: ignore[arg-type, union-attr]
                for nbest in out]

    def score(self, sources: Sequence[list[int]], targets: Sequence[list[int]],
              config: SearchConfig) -> list[list[float]]:
        """``score_batch``: the converted model appends </s> to each source and scores the target's tokens
        and the </s> it appends to them."""
        source_tokens = [[self.vocabulary[i] for i in source[:-1]] for source in sources]
        target_tokens = [[self.vocabulary[i] for i in target] for target in targets]
        results = self.translator.score_batch(source_tokens, target_tokens, max_input_length=0)
        return [list(result.log_probs) for result in results]

    def describe(self) -> EngineDescription:
        return EngineDescription(self.name, self.device, self.quantization, threads=self.threads,
                                 model=str(self.directory))

    def parameters(self) -> int:
        """Parameters of the checkpoint's weights, read from the safetensors header (no torch needed)."""
        return weight_parameters(self.checkpoint) if self.checkpoint is not None else 0

    def synchronize(self) -> None:
        """translate_batch returns when its work is done, on any device."""

    @property
    def model(self) -> Any:
        """The torch reference model of the same weights, loaded on first use (e.g. for every layer's and head's
        attention): CTranslate2 gives the last layer's, averaged over the heads."""
        if self._reference is None:
            if self.checkpoint is None:
                raise VaswaniError(f"{self.directory}: a converted model without its checkpoint has no torch model")
            from vaswani.model.serialization import load_model  # torch: only for the reference model

            self._reference = load_model(self.checkpoint).eval()
        return self._reference

    def attention(self, source: list[int], config: SearchConfig) -> tuple[Hypothesis, list[list[float]]]:
        """The best translation of one source and its cross-attention, one row per output token (</s> included)
        and one column per source token (</s> included): the last decoder layer's, averaged over the heads."""
        best = self.search([source], dataclasses.replace(config, nbest=1))[0][0]
        # The translation is given back as the prefix to decode after <s>: every row of it, and one more, the row
        # of the </s> that ends it (ended by the model, or cut at the limit), whatever token CTranslate2 picks there.
        prefix = [self.vocabulary[i] for i in best.tokens]
        result = self.translator.translate_batch(
            [[self.vocabulary[i] for i in source[:-1]]], target_prefix=[prefix], beam_size=1, min_decoding_length=0,
            max_decoding_length=len(prefix) + 1, max_input_length=0, return_end_token=True,
            return_attention=True)[0]
        rows = result.attention[0][: len(prefix) + 1]
        # CTranslate2 returns the columns of the tokens it was given; the </s> it appended takes the rest of each row.
        return best, [[*row, max(0.0, 1.0 - sum(row))] for row in rows]

    # ---- helpers ---------------------------------------------------------------------------------------------------
    def _sampled(self, tokens: list[list[str]], limits: list[int], config: SearchConfig,
                 forced: dict[str, list]) -> list[list[Hypothesis]]:
        """``config.nbest`` draws per sentence by CTranslate2's sampling, seeded, each cut at its own limit
        and scored by the model (as the torch engine scores a draw), best first."""
        ctranslate2_module().set_random_seed(config.seed)
        results = self.translator.translate_batch(
            tokens, **forced, beam_size=1, num_hypotheses=config.nbest, sampling_topk=config.top_k,
            sampling_topp=config.top_p, sampling_temperature=config.temperature,
            repetition_penalty=config.repetition_penalty, no_repeat_ngram_size=config.no_repeat_ngram,
            max_decoding_length=max(limits) - 1, min_decoding_length=0, max_input_length=0,
            return_end_token=True)
        draws = []
        for sentence, (limit, result) in enumerate(zip(limits, results)):
            for output in result.hypotheses:
                ended = bool(output) and output[-1] == self.eos
                ids = [self.ids[token] for token in (output[:-1] if ended else output)]
                draws.append((sentence, ids[: limit - 1]))
        scored = self._rescored([(ids, tokens[sentence]) for sentence, ids in draws], config)
        out: list[list[Hypothesis]] = [[] for _ in tokens]
        for (sentence, _), hypothesis in zip(draws, scored):
            out[sentence].append(hypothesis)
        return [sorted(nbest, key=lambda h: h.score, reverse=True) for nbest in out]

    def _rescored(self, outputs: list[tuple[list[int], list[str]]], config: SearchConfig) -> list[Hypothesis]:
        """Each (ids, source tokens) ended by </s> and scored by the model, in one call: what the torch search gives
        an output cut at its limit."""
        if not outputs:
            return []
        scored = self.translator.score_batch([source for _, source in outputs],
                                             [[self.vocabulary[i] for i in ids] for ids, _ in outputs],
                                             max_input_length=0)
        hypotheses = []
        for (ids, _), result in zip(outputs, scored):
            log_prob = sum(result.log_probs)  # the target's tokens and the </s> CTranslate2 appends
            hypotheses.append(Hypothesis(ids, _normalised(log_prob, len(ids) + 1, config), log_prob))
        return hypotheses


def _normalised(log_prob: float, length: int, config: SearchConfig) -> float:
    """Our score of a hypothesis of ``length`` tokens (</s> included)."""
    return log_prob / length_penalty(length, config.alpha, config.length_norm)
