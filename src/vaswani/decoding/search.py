"""Greedy and beam search, batched over sentences (and beams) and driven by the model's key/value cache.

Any model with the incremental-decoding interface of :class:`vaswani.model.Transformer` can be searched
(:class:`SearchableModel`)::

    state = model.start_decoding(src, capacity)    # src (B, S): encoder + cross-attention K/V, once
    logits = model.decode_step(tokens, state)      # tokens (N,) -> (N, V); the self-attention cache grows by one
    state = state.reorder(index)                   # keep / duplicate rows (sentences not done, k beams each)
    state = state.reorder_beams(rows, sentences)   # the beams that survive a step of beam search

``capacity`` is the search's longest output when ``config.preallocate_cache`` is set: the model may then allocate
its caches for that many positions up front and write each step in place (the Transformer does); without it
they grow by one position (one copy) per step.

Rows of the decoding batch are always *live* hypotheses: a sentence (greedy) or a sentence's beams (beam search)
that are done are dropped from the batch by the state's reorder, so no step computes anything for them and no
step needs a per-sentence Python loop. ``reorder_beams`` is the reorder of a beam search step: row i continues
``rows[i]``, and ``sentences`` (None while no sentence has left) gives a row of the same sentence for each, which
lets a state keep what all beams of a sentence share (the Transformer's cross-attention keys and values) untouched
while its sentences stay; a state with nothing shared may treat it as ``reorder(rows)``. Positions: the decoder
reads <s> at position 0 and emits y1; generating n tokens (</s> included) therefore needs positions 0 .. n-1.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence, runtime_checkable

import torch
import torch.nn.functional as F

from vaswani.decoding.config import SearchConfig
from vaswani.decoding.engine import Hypothesis, output_limits
from vaswani.decoding.penalties import apply_repetition_penalty, block_repeated_ngrams, normalise
from vaswani.decoding.sampling import Sampler
from vaswani.precision import autocast, resolve_precision

NEG_INF = float("-inf")


class DecodingState(Protocol):
    """What a model carries from one decoding step to the next, per batch row."""

    def reorder(self, index: torch.Tensor) -> DecodingState:
        """Keep or duplicate batch rows (sentences not done, k beams each)."""
        ...

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> DecodingState:
        """The beams that survive a step of beam search: row i continues ``rows[i]``; ``sentences`` gives a row of
        the same sentence for each (None while no sentence has left)."""
        ...


@runtime_checkable
class SearchableModel(Protocol):
    """What greedy and beam search need from a model (:class:`vaswani.model.Transformer` has it, and so do the
    benchmarks' compiled and peer decoders). A model that is an ``nn.Module`` is put in eval mode while it is
    searched; one with a ``config`` (a ModelConfig) has its output limited by its positions."""

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> DecodingState:
        """Encode ``src`` (B, S) once; ``capacity``: the longest output, for caches allocated up front."""
        ...

    def decode_step(self, tokens: torch.Tensor, state: DecodingState) -> torch.Tensor:
        """The next-token logits (N, V) of each row after ``tokens`` (N,); the state grows by one position."""
        ...


# ---- helpers shared by greedy and beam search -----------------------------------------------------------------
def max_output_lengths(src: torch.Tensor, model: SearchableModel, config: SearchConfig) -> torch.Tensor:
    """(B,) longest output per sentence, </s> included: a · |source| + b, at least 1 (see
    :func:`~vaswani.decoding.engine.output_limits`, the rule both engines follow)."""
    src_len = (src != config.pad_id).sum(dim=1).tolist()
    return torch.tensor(output_limits(src_len, config, getattr(model, "config", None)), device=src.device)


def next_token_log_probs(
    logits: torch.Tensor,
    generated: torch.Tensor,
    force_eos: torch.Tensor | None,
    config: SearchConfig,
) -> torch.Tensor:
    """Raw logits (N, V) -> float32 log-probs with every penalty applied.

    ``generated`` (N, t) are the tokens so far; ``force_eos`` (N,) marks rows at their length limit, whose only
    continuation is </s> (keeping </s>'s own log-prob, so the hypothesis is scored honestly).
    """
    logits = apply_repetition_penalty(logits.float(), generated, config.repetition_penalty)
    # Banned n-grams leave before the softmax: the allowed tokens form a distribution of their own (the rule of
    # CTranslate2 too, so both engines score a search with blocking alike). </s> is never in `generated`, so it
    # is never banned and a row always keeps a token it may take.
    logits = block_repeated_ngrams(logits, generated, config.no_repeat_ngram)
    log_probs = torch.log_softmax(logits, dim=-1)
    eos_log_prob = log_probs[:, config.eos_id].clone()
    if not config.allow_eos:
        log_probs[:, config.eos_id] = NEG_INF
    if force_eos is not None:
        only_eos = torch.full_like(log_probs, NEG_INF)
        only_eos[:, config.eos_id] = eos_log_prob
        log_probs = torch.where(force_eos[:, None], only_eos, log_probs)
    return log_probs


@dataclass
class Prefixes:
    """Tokens each sentence's output must start with (a translator typed them), padded: ``tokens`` (B, P) and
    ``lengths`` (B,), 0 for a sentence without one."""

    tokens: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def of(cls, prefixes: Sequence[list[int]], device: torch.device) -> "Prefixes":
        width = max(1, max(len(prefix) for prefix in prefixes))
        tokens = torch.zeros(len(prefixes), width, dtype=torch.long)
        for row, prefix in enumerate(prefixes):
            tokens[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        lengths = torch.tensor([len(prefix) for prefix in prefixes])
        return cls(tokens.to(device), lengths.to(device))

    @property
    def longest(self) -> int:
        return int(self.lengths.max())


def force_prefix(log_probs: torch.Tensor, step: int, sentences: torch.Tensor, prefixes: Prefixes | None,
                 ) -> torch.Tensor:
    """Rows (of ``sentences``) still inside their prefix at ``step`` may only continue with its next token,
    which keeps its own log-prob (the output is scored honestly, as CTranslate2 scores its
    ``target_prefix``)."""
    if prefixes is None or step >= prefixes.longest:
        return log_probs
    forced = prefixes.lengths[sentences] > step  # (N,)
    token = prefixes.tokens[sentences, step]  # (N,)
    only = torch.full_like(log_probs, NEG_INF)
    only.scatter_(1, token[:, None], log_probs.gather(1, token[:, None]))
    return torch.where(forced[:, None], only, log_probs)


def force_eos_rows(step: int, limits: torch.Tensor, shortest: int) -> torch.Tensor | None:
    """(N,) rows whose token at this step is their last allowed one; None while no row is near its limit."""
    return limits <= step + 1 if step + 1 >= shortest else None


def cache_capacity(longest: int, config: SearchConfig) -> int | None:
    """What the search asks the model to preallocate its caches for: the longest output, or nothing (grown)."""
    return longest if config.preallocate_cache else None


@contextlib.contextmanager
def eval_mode(model: SearchableModel) -> Iterator[None]:
    """Dropout off while searching; the caller's train/eval mode is restored afterwards (validation in training)."""
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def best_hypotheses(
    tokens: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor, log_probs: torch.Tensor, nbest: int
) -> list[list[Hypothesis]]:
    """(B, n, L) token buffers, best first -> per sentence the ``nbest`` finished hypotheses, </s> stripped."""
    tokens, lengths, scores, log_probs = (t.cpu().tolist() for t in (tokens, lengths, scores, log_probs))
    results = []
    for row_tokens, row_lengths, row_scores, row_log_probs in zip(tokens, lengths, scores, log_probs):
        hyps = [
            Hypothesis(toks[: length - 1], score, log_prob)
            for toks, length, score, log_prob in zip(row_tokens, row_lengths, row_scores, row_log_probs)
            if score > NEG_INF
        ]
        results.append(hyps[:nbest] or [Hypothesis([], NEG_INF, NEG_INF)])
    return results


# ---- greedy ---------------------------------------------------------------------------------------------------
def greedy_search(model: SearchableModel, src: torch.Tensor, config: SearchConfig,
                  forced: Prefixes | None = None, sampler: Sampler | None = None) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step (the prefix's while there is one; with a ``sampler``, a
    token it draws); one hypothesis per sentence. src: (B, S) padded ids."""
    batch, device = src.size(0), src.device
    limits = max_output_lengths(src, model, config)  # (B,)
    longest, shortest = int(limits.max()), int(limits.min())

    state = model.start_decoding(src, capacity=cache_capacity(longest, config))
    rows = torch.arange(batch, device=device)  # (N,) sentence of each live row
    tokens = torch.full((batch,), config.bos_id, dtype=torch.long, device=device)  # (N,) last token
    generated = tokens.new_empty(batch, 0)  # (N, t)
    log_prob = torch.zeros(batch, device=device)  # (N,)
    out_tokens = torch.full((batch, longest), config.pad_id, dtype=torch.long, device=device)
    out_length = torch.zeros(batch, dtype=torch.long, device=device)
    out_log_prob = torch.zeros(batch, device=device)

    for step in range(longest):
        logits = model.decode_step(tokens, state)  # (N, V)
        log_probs = next_token_log_probs(logits, generated, force_eos_rows(step, limits[rows], shortest), config)
        log_probs = force_prefix(log_probs, step, rows, forced)
        best, tokens = log_probs.max(dim=-1) if sampler is None else sampler.pick(log_probs)  # (N,), (N,)
        log_prob = log_prob + best
        generated = torch.cat((generated, tokens[:, None]), dim=1)
        ended = tokens == config.eos_id
        if not ended.any():
            continue
        done_rows = rows[ended]
        out_tokens[done_rows, : step + 1] = generated[ended]
        out_length[done_rows] = step + 1
        out_log_prob[done_rows] = log_prob[ended]
        live = (~ended).nonzero().squeeze(1)
        if live.numel() == 0:
            break
        # Finished sentences leave the batch: later steps cost only what is still being decoded.
        state = state.reorder(live)
        rows, tokens, generated, log_prob = rows[live], tokens[live], generated[live], log_prob[live]

    scores = normalise(out_log_prob, out_length, config.alpha, config.length_norm)
    return best_hypotheses(out_tokens[:, None], out_length[:, None], scores[:, None], out_log_prob[:, None], 1)


# ---- beam -----------------------------------------------------------------------------------------------------
@dataclass
class FinishedHypotheses:
    """The best ``k`` finished hypotheses of every sentence, best first (-inf score = empty slot)."""

    score: torch.Tensor  # (B, k) normalised
    log_prob: torch.Tensor  # (B, k)
    length: torch.Tensor  # (B, k) tokens incl. </s>
    tokens: torch.Tensor  # (B, k, L)
    pad_id: int

    @classmethod
    def empty(cls, batch: int, k: int, longest: int, pad_id: int, device: torch.device) -> "FinishedHypotheses":
        return cls(
            score=torch.full((batch, k), NEG_INF, device=device),
            log_prob=torch.full((batch, k), NEG_INF, device=device),
            length=torch.zeros(batch, k, dtype=torch.long, device=device),
            tokens=torch.full((batch, k, longest), pad_id, dtype=torch.long, device=device),
            pad_id=pad_id,
        )

    def add(
        self,
        sentences: torch.Tensor,
        score: torch.Tensor,
        log_prob: torch.Tensor,
        length: int,
        tokens: torch.Tensor,
    ) -> None:
        """Merge candidates (A, C) of the active ``sentences`` (A,) into their k best; -inf scores are no-ops."""
        k, longest = self.score.size(1), self.tokens.size(2)
        tokens = F.pad(tokens, (0, longest - tokens.size(2)), value=self.pad_id)  # (A, C, L)
        all_scores = torch.cat((self.score[sentences], score), dim=1)  # (A, k + C)
        best, which = all_scores.topk(k, dim=1)  # (A, k), sorted best first
        lengths = torch.full_like(log_prob, length, dtype=torch.long)
        self.score[sentences] = best
        self.log_prob[sentences] = torch.cat((self.log_prob[sentences], log_prob), 1).gather(1, which)
        self.length[sentences] = torch.cat((self.length[sentences], lengths), 1).gather(1, which)
        pick = which[..., None].expand(-1, -1, longest)
        self.tokens[sentences] = torch.cat((self.tokens[sentences], tokens), 1).gather(1, pick)


def beam_search(model: SearchableModel, src: torch.Tensor, config: SearchConfig,
                forced: Prefixes | None = None) -> list[list[Hypothesis]]:
    """Beam search over all sentences at once: the decoding batch is (active sentences × k beams). A sentence
    with a prefix keeps one beam, forced through its tokens, and searches from where it ends.

    Each step scores all k·V one-token extensions of a sentence's beams and keeps the 2k best: the </s>
    candidates among the top k become finished hypotheses (their score is frozen and length-normalised), the k
    best others are the next beams. A sentence is done when k hypotheses have finished, when no live beam can
    still beat its n-th best finished one, or at its length limit; done sentences leave the batch.
    """
    batch, k, device = src.size(0), config.beam_size, src.device
    limits = max_output_lengths(src, model, config)  # (B,)
    longest, shortest = int(limits.max()), int(limits.min())

    # Row a·k + j of the decoding batch is beam j of active sentence a.
    state = model.start_decoding(src, capacity=cache_capacity(longest, config))
    state = state.reorder(torch.arange(batch, device=device).repeat_interleave(k))
    sentences = torch.arange(batch, device=device)  # (A,) original index of each active sentence
    tokens = torch.full((batch * k,), config.bos_id, dtype=torch.long, device=device)  # (A·k,)
    generated = tokens.new_empty(batch * k, 0)  # (A·k, t)
    # All k beams start as the same <s>: only beam 0 may expand at step 0, or the beam would hold k copies.
    beam_scores = torch.full((batch, k), NEG_INF, device=device)  # (A, k) summed log-probs
    beam_scores[:, 0] = 0.0
    finished = FinishedHypotheses.empty(batch, k, longest, config.pad_id, device)
    rank = torch.arange(2 * k, device=device)  # (2k,)
    beam_index = torch.arange(k, device=device)  # (k,)

    for step in range(longest):
        active = sentences.size(0)
        row_limits = limits[sentences].repeat_interleave(k)  # (A·k,)
        logits = model.decode_step(tokens, state)  # (A·k, V)
        log_probs = next_token_log_probs(logits, generated, force_eos_rows(step, row_limits, shortest), config)
        if forced is not None:
            log_probs = force_prefix(log_probs, step, sentences.repeat_interleave(k), forced)
        vocab = log_probs.size(-1)
        candidates = (beam_scores.view(-1, 1) + log_probs).view(active, k * vocab)  # (A, k·V)
        # 2k candidates: even if k of them end in </s>, k live continuations remain.
        top_scores, top_index = candidates.topk(2 * k, dim=1)  # (A, 2k), best first
        parent, token = top_index // vocab, top_index % vocab  # (A, 2k) beam index, token id
        is_eos = token == config.eos_id

        # 1. </s> candidates ranked inside the top k end their hypothesis (further down they would have fallen
        #    out of a beam of k). Their score stops accumulating here.
        ends = is_eos & (rank < k) & (top_scores > NEG_INF)
        if ends.any():
            prefixes = generated.view(active, k, step).gather(1, parent[..., None].expand(-1, -1, step))
            finished.add(
                sentences,
                score=torch.where(ends, normalise(top_scores, step + 1, config.alpha, config.length_norm), NEG_INF),
                log_prob=torch.where(ends, top_scores, NEG_INF),
                length=step + 1,
                tokens=torch.cat((prefixes, token[..., None]), dim=2),  # (A, 2k, t + 1)
            )

        # 2. The k best candidates that do not end are the next beams (stable: non-</s> first, then by rank).
        keep_order = (is_eos.long() * 2 * k + rank).topk(k, dim=1, largest=False).indices  # (A, k)
        beam_scores = top_scores.gather(1, keep_order)
        parent, token = parent.gather(1, keep_order), token.gather(1, keep_order)

        # 3. Which sentences are done.
        done = beam_done(finished, sentences, beam_scores, limits, config)  # (A,)
        keep = (~done).nonzero().squeeze(1)  # (A',)
        if keep.numel() == 0:
            break
        rows = (keep[:, None] * k + parent[keep]).view(-1)  # (A'·k,) parent rows of the surviving beams
        same_sentence = None if keep.numel() == active else (keep[:, None] * k + beam_index).view(-1)
        state = state.reorder_beams(rows, same_sentence)
        tokens = token[keep].view(-1)
        generated = torch.cat((generated[rows], tokens[:, None]), dim=1)
        beam_scores, sentences = beam_scores[keep], sentences[keep]

    return best_hypotheses(finished.tokens, finished.length, finished.score, finished.log_prob, config.nbest)


def beam_done(
    finished: FinishedHypotheses,
    sentences: torch.Tensor,
    beam_scores: torch.Tensor,
    limits: torch.Tensor,
    config: SearchConfig,
) -> torch.Tensor:
    """(A,) True for sentences whose result can no longer change (or, for a full beam, is final by convention).

    A live beam's log-prob can only fall (every token adds log p ≤ 0) while its divisor lp(|Y|) can at most grow
    to lp(limit); so log-prob / lp(limit) bounds any score it can still reach. Once that bound is no better than
    the n-th best finished score, continuing cannot change the n-best list.
    """
    fin_scores = finished.score[sentences]  # (A, k)
    n_finished = (fin_scores > NEG_INF).sum(dim=1)
    best_live = beam_scores.max(dim=1).values  # (A,)
    bound = normalise(best_live, limits[sentences], config.alpha, config.length_norm)
    cannot_improve = bound <= fin_scores[:, config.nbest - 1]
    beam_full = n_finished >= config.beam_size  # the classic criterion: k hypotheses have ended
    return beam_full | cannot_improve | (best_live == NEG_INF)


# ---- entry point ----------------------------------------------------------------------------------------------
def generate(model: SearchableModel, src: torch.Tensor, config: SearchConfig,
             prefixes: Sequence[list[int]] | None = None,
             constraints: Sequence[list[list[int]]] | None = None,
             continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
    """Translate a padded batch of source ids (B, S): greedy when ``beam_size == 1``, else beam search.
    ``prefixes``: ids each output starts with ([] for none; None: no sentence has one), shorter than its
    length limit; ``constraints``: per sentence the phrases (ids) its output must contain ([] for none), found
    by the constrained beam search of constraints.py, which runs only when some sentence has one, as whole
    words: a phrase followed by one of the ``continuations`` (the tokenizer's word-continuing tokens) does not
    count.

    Runs under ``torch.inference_mode`` (no autograd bookkeeping) with the model in eval mode, and inside
    autocast in ``config.precision`` ("auto": bf16 only where the device computes it fast; log-softmax and scores
    stay float32).
    """
    precision = resolve_precision(config.precision, src.device)
    with torch.inference_mode(), autocast(src.device, precision), eval_mode(model):
        forced = Prefixes.of(prefixes, src.device) if prefixes is not None and any(prefixes) else None
        if constraints is not None and any(constraints):
            # Imported here: constraints.py builds on this module's steps, and the plain search never needs it.
            from vaswani.decoding.constraints import constrained_beam_search

            return constrained_beam_search(model, src, config, constraints, forced, continuations)
        if config.sample:
            return _sampled(model, src, config, prefixes if forced is not None else None)
        if config.beam_size == 1:
            return greedy_search(model, src, config, forced)
        return beam_search(model, src, config, forced)


def _sampled(model: SearchableModel, src: torch.Tensor, config: SearchConfig,
             prefixes: Sequence[list[int]] | None) -> list[list[Hypothesis]]:
    """``config.nbest`` draws per sentence (its row repeated), best first by score."""
    n = config.nbest
    rows = torch.arange(src.size(0), device=src.device).repeat_interleave(n)
    forced = Prefixes.of([prefixes[i] for i in rows.tolist()], src.device) if prefixes is not None else None
    draws = greedy_search(model, src[rows], config, forced, Sampler(config, src.device))
    return [sorted((nbest[0] for nbest in draws[i * n : (i + 1) * n]), key=lambda h: h.score, reverse=True)
            for i in range(src.size(0))]
