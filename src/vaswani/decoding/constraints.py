"""Lexically constrained beam search: every output contains given phrases, by dynamic beam allocation (Post &
Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation", the algorithm of fairseq's
``--constraints``).

Each hypothesis carries a :class:`ConstraintState`: which phrases it has produced, and how far into the phrase it
is producing. A step of the search looks at more candidates than plain beam search: the best 2k extensions of
the sentence's beams, each beam's best token, and each beam's *next constraint tokens* (the tokens that advance a
phrase), so a phrase the model would never pick is still tried. The candidates are then grouped into *banks* by
how many constraint tokens they have met, and the k beams are dealt to the banks in turn, most met first
(:func:`allocate`): hypotheses that have placed their constraints do not have to beat, on score alone, those that
have not, and those that have placed none still compete. A hypothesis may end (</s>) only once every phrase is
in it, so every finished hypothesis holds every constraint. A phrase counts only as whole words: the token after
it must start a new word (or be </s>), so "dog" inside "dogs" (``Ġdog`` + ``s``) does not; a beam that has just
produced a phrase also tries its best token that starts a word.

It runs only when constraints are given (:func:`vaswani.decoding.search.generate` calls it); the plain search
pays nothing for it. The banks are dealt in Python per sentence and step: a few microseconds per candidate,
beside a decoding step that costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from vaswani.decoding.config import SearchConfig
from vaswani.decoding.engine import Hypothesis
from vaswani.decoding.penalties import normalise
from vaswani.decoding.search import (
    NEG_INF,
    FinishedHypotheses,
    Prefixes,
    SearchableModel,
    beam_done,
    best_hypotheses,
    cache_capacity,
    force_eos_rows,
    force_prefix,
    max_output_lengths,
    next_token_log_probs,
)


@dataclass(frozen=True)
class ConstraintState:
    """Where one hypothesis stands with its sentence's phrases (each a tuple of token ids).

    ``met[i]``: phrase i has been produced whole, as whole words; ``active``: the phrase being produced (-1:
    none), of which ``progress`` tokens are out; ``ending``: the phrase whose last token was just produced and
    which is met once the next token starts a new word (-1: none). ``continuations`` are the ids of the tokens
    that continue a word (:attr:`vaswani.data.tokenizer.Tokenizer.word_continuations`): a phrase followed by
    one of them ended inside a longer word ("dog" in "dogs") and counts for nothing; </s> ends every word.
    Without them (ids with no tokenizer behind them) a phrase is met by its last token. A phrase left half-way
    (the hypothesis took another token) counts for nothing either: it has to start again.
    """

    phrases: tuple[tuple[int, ...], ...]
    met: tuple[bool, ...]
    active: int = -1
    progress: int = 0
    ending: int = -1
    continuations: frozenset[int] = frozenset()

    @classmethod
    def start(cls, phrases: Sequence[Sequence[int]], continuations: frozenset[int] = frozenset(),
              ) -> "ConstraintState":
        return cls(tuple(tuple(phrase) for phrase in phrases), (False,) * len(phrases), continuations=continuations)

    @property
    def bank(self) -> int:
        """Constraint tokens met: whole phrases (the ending one included) and the part of the active one."""
        ending = len(self.phrases[self.ending]) if self.ending >= 0 else 0
        return sum(len(phrase) for phrase, met in zip(self.phrases, self.met) if met) + ending + self.progress

    @property
    def complete(self) -> bool:
        """Every phrase is in the hypothesis: it may end (</s> ends the phrase just produced as a word)."""
        return all(met or index == self.ending for index, met in enumerate(self.met))

    def next_tokens(self) -> set[int]:
        """The tokens that would advance a constraint: the active phrase's next one, else every first token of a
        phrase not met (nor ending)."""
        if self.active >= 0:
            return {self.phrases[self.active][self.progress]}
        return {phrase[0] for index, (phrase, met) in enumerate(zip(self.phrases, self.met))
                if not met and index != self.ending}

    def advance(self, token: int) -> "ConstraintState":
        """The state after ``token``."""
        state = self
        if self.ending >= 0:
            state = self._replace() if token in self.continuations else self._met(self.ending)
        elif self.active >= 0:
            phrase = self.phrases[self.active]
            if token == phrase[self.progress]:
                if self.progress + 1 < len(phrase):
                    return self._replace(active=self.active, progress=self.progress + 1)
                return self._produced(self.active)
            state = self._replace()  # left half-way
        for index, (phrase, met) in enumerate(zip(state.phrases, state.met)):
            if not met and phrase[0] == token:
                return state._produced(index) if len(phrase) == 1 else state._replace(active=index, progress=1)
        return state

    def _replace(self, active: int = -1, progress: int = 0, ending: int = -1) -> "ConstraintState":
        """This state's phrases and met ones, at another place in them (default: none under way)."""
        return ConstraintState(self.phrases, self.met, active, progress, ending, self.continuations)

    def _produced(self, index: int) -> "ConstraintState":
        """Phrase ``index`` has just been produced whole: met now, or once a new word starts."""
        return self._replace(ending=index) if self.continuations else self._met(index)

    def _met(self, index: int) -> "ConstraintState":
        met = tuple(met or i == index for i, met in enumerate(self.met))
        return ConstraintState(self.phrases, met, continuations=self.continuations)


@dataclass(frozen=True)
class Candidate:
    """A one-token extension of beam ``parent``: its summed log-prob and constraint state."""

    score: float
    parent: int
    token: int
    state: ConstraintState


def allocate(candidates: Sequence[Candidate], k: int) -> list[Candidate]:
    """The next ``k`` beams: candidates grouped in banks by constraint tokens met, best first in each; the slots
    are dealt round-robin over the banks, the bank with most met first (a bank with fewer candidates than its
    share leaves its slots to the others)."""
    banks: dict[int, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: -c.score):
        banks.setdefault(candidate.state.bank, []).append(candidate)
    dealt = sorted(((rank, -bank), candidate) for bank, members in banks.items()
                   for rank, candidate in enumerate(members))
    return [candidate for _, candidate in dealt[:k]]


def constrained_beam_search(model: SearchableModel, src: torch.Tensor, config: SearchConfig,
                            constraints: Sequence[list[list[int]]], forced: Prefixes | None = None,
                            continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
    """Beam search (k = ``config.beam_size``, 1 included) whose outputs contain each sentence's phrases
    (``constraints``, ids; [] for a sentence without any), each ending where a word ends: before a token not
    among ``continuations`` (the tokenizer's word-continuing tokens; see :class:`ConstraintState`) or </s>.
    The decoding batch is laid out as in :func:`~vaswani.decoding.search.beam_search` (row a·k + j: beam j of
    active sentence a); its stopping rules are the same. A sentence whose phrases find no room before its length
    limit gets an empty hypothesis."""
    batch, k, device = src.size(0), config.beam_size, src.device
    limits = max_output_lengths(src, model, config)
    longest, shortest = int(limits.max()), int(limits.min())
    state = model.start_decoding(src, capacity=cache_capacity(longest, config))
    state = state.reorder(torch.arange(batch, device=device).repeat_interleave(k))
    sentences = torch.arange(batch, device=device)
    tokens = torch.full((batch * k,), config.bos_id, dtype=torch.long, device=device)
    generated = tokens.new_empty(batch * k, 0)
    beam_scores = torch.full((batch, k), NEG_INF, device=device)
    beam_scores[:, 0] = 0.0
    states = [[ConstraintState.start(phrases, continuations)] * k for phrases in constraints]  # per sentence, beam
    inside_word = None  # (V,) the continuations as a mask, once the vocabulary's size is known
    finished = FinishedHypotheses.empty(batch, k, longest, config.pad_id, device)

    for step in range(longest):
        active = sentences.size(0)
        row_limits = limits[sentences].repeat_interleave(k)
        logits = model.decode_step(tokens, state)
        log_probs = next_token_log_probs(logits, generated, force_eos_rows(step, row_limits, shortest), config)
        if forced is not None:
            log_probs = force_prefix(log_probs, step, sentences.repeat_interleave(k), forced)
        flat_states = [beam for beams in states for beam in beams]
        incomplete = torch.tensor([not beam.complete for beam in flat_states], device=device)
        log_probs[:, config.eos_id] = log_probs[:, config.eos_id].masked_fill(incomplete, NEG_INF)
        totals = beam_scores.view(-1, 1) + log_probs  # (A·k, V)
        if continuations and inside_word is None:
            inside_word = torch.zeros(totals.size(1), dtype=torch.bool)
            inside_word[[token for token in continuations if token < totals.size(1)]] = True
            inside_word = inside_word.to(device)
        ends, chosen = _candidates(totals, flat_states, active, k, config.eos_id, inside_word)

        end_scores = torch.tensor(ends, device=device)  # (A, k) by parent beam; -inf: no end
        if bool((end_scores > NEG_INF).any()):
            finished.add(sentences, score=normalise(end_scores, step + 1, config.alpha, config.length_norm),
                         log_prob=end_scores, length=step + 1,
                         tokens=torch.cat((generated.view(active, k, step),
                                           torch.full((active, k, 1), config.eos_id, device=device)), dim=2))

        beam_scores = torch.tensor([[c.score for c in beams] for beams in chosen], device=device)
        parent = torch.tensor([[c.parent for c in beams] for beams in chosen], device=device)
        token = torch.tensor([[c.token for c in beams] for beams in chosen], device=device)
        done = beam_done(finished, sentences, beam_scores, limits, config)
        keep = (~done).nonzero().squeeze(1)
        if keep.numel() == 0:
            break
        rows = (keep[:, None] * k + parent[keep]).view(-1)
        same_sentence = None if keep.numel() == active else (keep[:, None] * k + torch.arange(k, device=device))
        state = state.reorder_beams(rows, None if same_sentence is None else same_sentence.view(-1))
        tokens = token[keep].view(-1)
        generated = torch.cat((generated[rows], tokens[:, None]), dim=1)
        beam_scores, sentences = beam_scores[keep], sentences[keep]
        states = [[c.state for c in chosen[a]] for a in keep.tolist()]

    return best_hypotheses(finished.tokens, finished.length, finished.score, finished.log_prob, config.nbest)


def _candidates(totals: torch.Tensor, flat_states: list[ConstraintState], active: int, k: int, eos_id: int,
                inside_word: torch.Tensor | None = None) -> tuple[list[list[float]], list[list[Candidate]]]:
    """Per active sentence: the score of each beam's </s> when it ends (-inf where it does not), and the k next
    beams, dealt by :func:`allocate` (padded with -inf beams when fewer candidates are finite).

    A </s> ends its hypothesis when it ranks among the sentence's k best extensions (the plain search's rule) or
    is its beam's best: a beam that has just placed its last phrase may be far below the top k and still be
    the best way to finish. A beam whose phrase waits for its word to end (``inside_word``: the tokens that
    continue a word) also tries its best token that starts a new word, and ends when </s> is that token: the
    model may much prefer to continue the word ("dog" + "s")."""
    vocab = totals.size(1)
    top_scores, top_index = totals.view(active, k * vocab).topk(2 * k, dim=1)
    best_scores, best_tokens = totals.max(dim=1)
    wanted = [(row, token) for row, beam in enumerate(flat_states) for token in beam.next_tokens()]
    wanted_scores = totals[[r for r, _ in wanted], [t for _, t in wanted]].tolist() if wanted else []
    top_scores, top_index = top_scores.tolist(), top_index.tolist()
    best_scores, best_tokens = best_scores.tolist(), best_tokens.tolist()

    found: list[dict[tuple[int, int], float]] = [{} for _ in range(active)]
    ends = [[NEG_INF] * k for _ in range(active)]
    for a in range(active):
        for rank, (score, index) in enumerate(zip(top_scores[a], top_index[a])):
            parent, token = divmod(index, vocab)
            if token == eos_id and rank < k and score > NEG_INF:
                ends[a][parent] = score
            found[a][parent, token] = score
        for parent in range(k):
            row = a * k + parent
            if best_tokens[row] == eos_id and best_scores[row] > NEG_INF:
                ends[a][parent] = best_scores[row]
            found[a][parent, best_tokens[row]] = best_scores[row]
    for (row, token), score in zip(wanted, wanted_scores):
        found[row // k][row % k, token] = score
    ending = [row for row, beam in enumerate(flat_states) if beam.ending >= 0]
    if ending and inside_word is not None:
        word_ends = totals[ending].masked_fill(inside_word, NEG_INF)
        end_scores, end_tokens = word_ends.max(dim=1)
        word_ends[:, eos_id] = NEG_INF
        next_scores, next_tokens = word_ends.max(dim=1)
        for row, end_score, end_token, score, token in zip(ending, end_scores.tolist(), end_tokens.tolist(),
                                                           next_scores.tolist(), next_tokens.tolist()):
            if end_token == eos_id and end_score > NEG_INF:
                ends[row // k][row % k] = end_score
            found[row // k][row % k, token] = score

    chosen = []
    for a in range(active):
        extensions = [Candidate(score, parent, token, flat_states[a * k + parent].advance(token))
                      for (parent, token), score in found[a].items() if token != eos_id and score > NEG_INF]
        beams = allocate(extensions, k)
        padding = Candidate(NEG_INF, 0, eos_id, flat_states[a * k])
        chosen.append(beams + [padding] * (k - len(beams)))
    return ends, chosen
