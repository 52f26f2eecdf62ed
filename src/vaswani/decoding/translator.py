"""Text in, text out: a checkpoint's tokenizer and a search, run by one of the engines.

    translator = Translator.load("runs/base/checkpoints/best", SearchConfig(beam_size=4))
    translator.translate(["Ein Mann fährt Fahrrad."])        # -> ["A man is riding a bike."]
    Translator.load("runs/base", options=EngineOptions(engine="ctranslate2", quantization="int8"))  # converted, int8

Sentences are sorted by length and cut into batches (at most ``batch_size`` sentences and ``max_tokens``
padded source tokens × beams), so that a batch wastes little compute on padding; results come back in input order.
Tokenizing, batching and detokenizing happen here, the same for every engine (engine.py); this module imports
no torch, so a translation on CTranslate2 never loads it.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.engine import TORCH, Engine, is_engine, open_engine, output_limits
from vaswani.decoding.scoring import PairScore, UnscorableText, pair_score
from vaswani.decoding.stored_ensemble import ENSEMBLE_FILE, check_ensemble_members, read_stored_ensemble
from vaswani.decoding.terminology import UnusableConstraint, UnusablePrefix
from vaswani.errors import ConfigError, VaswaniError, VaswaniWarning
from vaswani.model.serialization import CONFIG_FILE, TOKENIZER_FILE, read_model_config, resolve_checkpoint
from vaswani.progress import progress_reporter

if TYPE_CHECKING:
    from vaswani.model.transformer import Transformer


# Sources longer than this (in BPE tokens) are cut unless the model was built for longer ones: far past any
# training sentence, and small enough that standard attention over one such sentence takes megabytes, not gigabytes.
LONGEST_SOURCE = 1024


@dataclass
class Translation:
    text: str  # detokenized hypothesis
    score: float  # length-normalised log-prob (what n-best lists are sorted by)
    log_prob: float  # summed log-prob, </s> included
    length: int  # target tokens generated, </s> included
    alignment: str | None = None  # Pharaoh "i-j" word pairs, when asked for (alignment.py)


class Translator:
    def __init__(
        self,
        model: Transformer | Engine,
        tokenizer: Tokenizer,
        config: SearchConfig | None = None,
        batch_size: int = 64,
        max_tokens: int | None = 8192,
        options: EngineOptions | None = None,
    ):
        """``model``: an engine, or a Transformer, which the torch engine searches as ``options`` say (its device,
        default where the weights are; compile; threads)."""
        if is_engine(model):
            self.engine: Engine = model
        else:
            from vaswani.decoding.torch_engine import TorchEngine  # torch: not on CTranslate2

            options = options or EngineOptions()
            if options.engine not in (None, TORCH):
                raise ConfigError(f"`engine` {options.engine}: a model given as weights runs on the torch engine; "
                                  "load its checkpoint (Translator.load) for another engine", field="engine")
            self.engine = TorchEngine(model, options)
        self.tokenizer = tokenizer
        self._set_search(config or SearchConfig(), batch_size, max_tokens)

    def _set_search(self, config: SearchConfig, batch_size: int, max_tokens: int | None) -> None:
        # The tokenizer is the authority on special ids; the search must agree with it. The engine checks that it
        # can run the search (and decides "auto" precision once, so results record what really ran).
        self.config = self.engine.bind(dataclasses.replace(
            config, bos_id=self.tokenizer.bos_id, eos_id=self.tokenizer.eos_id, pad_id=self.tokenizer.pad_id))
        if batch_size < 1:
            raise VaswaniError(f"batch size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.max_tokens = max_tokens

    def with_search(self, config: SearchConfig, batch_size: int, max_tokens: int | None) -> "Translator":
        """This translator with other search and batching settings, sharing its engine (so a compiled decoding
        step is compiled once, not once per copy): what the server does per batch."""
        other = copy.copy(self)
        other._set_search(config, batch_size, max_tokens)
        return other

    @classmethod
    def load(
        cls,
        checkpoint: str | Path,
        config: SearchConfig | None = None,
        options: EngineOptions | None = None,
        prefixed: bool = False,
        constrained: bool = False,
        **batching: Any,
    ) -> "Translator":
        """From a checkpoint directory (or a run directory): model.safetensors + model.json + tokenizer.json.

        ``options`` (default: the torch engine on the best device): the engine, "torch", "ctranslate2" or "auto"
        (CTranslate2 when it can run this model and search, else torch, saying why in a warning), and what it runs
        on; ``prefixed``: the translations will start with given prefixes (auto then takes the engine that can
        force them in this search); ``constrained``: the translations will contain given phrases (constraints.py,
        the torch engine's); ``batching``: ``batch_size``, ``max_tokens``. A checkpoint that is an ensemble (its
        ``ensemble.json``, stored_ensemble.py) is searched as its members, as :meth:`load_ensemble` searches them.
        """
        directory = resolve_checkpoint(checkpoint)
        stored = read_stored_ensemble(directory)
        if stored is not None:
            return cls._ensemble(stored.members, config, options, stored.weights,
                                 f"{directory} is an ensemble of {len(stored.members)} ({ENSEMBLE_FILE})",
                                 f"or give one of its members ({stored.members[0]})", **batching)
        if not (directory / TOKENIZER_FILE).is_file():
            raise VaswaniError(f"{directory}: no {TOKENIZER_FILE} beside the weights; cannot turn text into ids")
        model_config = read_model_config(directory / CONFIG_FILE)
        tokenizer = Tokenizer.load(directory / TOKENIZER_FILE)
        if tokenizer.vocab_size > model_config.vocab_size:
            raise VaswaniError(
                f"{directory / TOKENIZER_FILE}: vocabulary of {tokenizer.vocab_size} does not fit the model's "
                f"{model_config.vocab_size} (model.json)"
            )
        config = config or SearchConfig()
        chosen = open_engine(directory, model_config, tokenizer, config, options or EngineOptions(), prefixed,
                             constrained)
        return cls(chosen, tokenizer, config, **batching)

    @classmethod
    def load_ensemble(
        cls,
        checkpoints: Sequence[str | Path],
        config: SearchConfig | None = None,
        options: EngineOptions | None = None,
        weights: Sequence[float] | None = None,
        **batching: Any,
    ) -> "Translator":
        """Several checkpoints searched as one (ensemble.py), on the torch engine: "auto" takes it saying why,
        "ctranslate2" is refused. Their tokenizer.json must be the same file and their recorded language
        pairs (where recorded) the same; ``weights``: one positive number per checkpoint (default equal)."""
        return cls._ensemble(checkpoints, config, options, weights, f"this ensemble has {len(checkpoints)}", "",
                             **batching)

    @classmethod
    def _ensemble(cls, checkpoints: Sequence[str | Path], config: SearchConfig | None,
                  options: EngineOptions | None, weights: Sequence[float] | None, what: str, instead: str,
                  **batching: Any) -> "Translator":
        """:meth:`load_ensemble`; ``what`` says what the ensemble is, ``instead`` what else the user may do, in
        the engine's refusal or warning."""
        from vaswani.decoding.ensemble import EnsembleEngine  # torch: not on CTranslate2
        from vaswani.devices import resolve_device  # torch: not on CTranslate2
        from vaswani.model.serialization import load_model  # torch: not on CTranslate2

        directories = [resolve_checkpoint(checkpoint) for checkpoint in checkpoints]
        check_ensemble_members(directories)
        first = directories[0]
        options = options or EngineOptions()
        if options.engine == "ctranslate2":
            raise ConfigError(f"`engine` ctranslate2 searches one model and {what}: run it on `engine` torch"
                              f"{' ' + instead if instead else ''}", field="engine")
        if options.engine != TORCH:
            warnings.warn(f"engine auto: torch, because CTranslate2 searches one model and {what}",
                          VaswaniWarning, stacklevel=3)
        device = resolve_device(options.device)
        models = [load_model(directory, device=device).eval() for directory in directories]
        tokenizer = Tokenizer.load(first / TOKENIZER_FILE)
        for directory, model in zip(directories, models):
            if tokenizer.vocab_size > model.config.vocab_size:
                raise VaswaniError(f"{directory / TOKENIZER_FILE}: vocabulary of {tokenizer.vocab_size} does "
                                   f"not fit the model's {model.config.vocab_size} (model.json)")
        engine_options = dataclasses.replace(options, engine=TORCH, quantization=None, device=str(device))
        return cls(EnsembleEngine(models, engine_options, weights), tokenizer, config, **batching)

    # ---- what the engine runs ----------------------------------------------------------------------------------
    @property
    def model(self) -> Transformer:
        """The torch model of the weights searched (the CTranslate2 engine loads it on first use)."""
        return self.engine.model

    @property
    def model_config(self) -> Any:
        return self.engine.model_config

    @property
    def device(self) -> Any:
        """Where the engine runs: a torch.device for the torch engine, "cpu" or "cuda:N" for CTranslate2."""
        return self.engine.device

    # ---- public API --------------------------------------------------------------------------------------------
    def translate(self, texts: Sequence[str], progress: bool = False) -> list[str]:
        """One translation (the best hypothesis) per input string, in input order."""
        return [nbest[0].text for nbest in self.translate_nbest(texts, progress)]

    def translate_nbest(self, texts: Sequence[str], progress: bool = False,
                        prefixes: Sequence[str] | None = None,
                        alignments: bool = False,
                        constraints: Sequence[Sequence[str]] | None = None) -> list[list[Translation]]:
        """``config.nbest`` scored translations per input string, best first, in input order; with
        ``prefixes`` (one per text, "" for none), each translation starts with its prefix; with
        ``alignments``, each carries its word alignment to the source (alignment.py); with ``constraints``
        (per text, the phrases its translation must contain), each contains them (constraints.py)."""
        sources = self.encode(texts)
        forced = self.encode_prefixes(prefixes, sources) if prefixes is not None else None
        phrases = self.encode_constraints(constraints, sources) if constraints is not None else None
        return self.translate_ids_nbest(sources, progress, forced, alignments, phrases)

    def translate_ids_nbest(self, sources: Sequence[list[int]], progress: bool = False,
                            prefixes: Sequence[list[int]] | None = None,
                            alignments: bool = False,
                            constraints: Sequence[list[list[int]]] | None = None) -> list[list[Translation]]:
        """Like :meth:`translate_nbest` for sources (``x1 … xn </s>``; [] = blank line), prefixes and
        constraints that are already ids. Padding ids inside a source are masked like trailing padding by the
        torch engine: the robustness experiment's "dropped" tokens."""
        results: list[list[Translation] | None] = [None] * len(sources)
        with progress_reporter(len(sources), "translating", "sentences", enabled=progress,
                               leave=False) as bar:
            for batch in self.batches(sources):
                forced = [prefixes[i] for i in batch] if prefixes is not None else None
                phrases = [constraints[i] for i in batch] if constraints is not None else None
                translated = self._translate_batch([sources[i] for i in batch], forced, alignments, phrases)
                for index, hypotheses in zip(batch, translated):
                    results[index] = hypotheses
                bar.update(len(batch))
        return results  # type: ignore[return-value]

    def score(self, sources: Sequence[str], targets: Sequence[str], progress: bool = False,
              names: tuple[str, str] = ("source", "target")) -> list[PairScore]:
        """Each (source, target) pair's log-probability under the model, length-normalised by ``config``
        as the search normalises (see scoring.py), in input order. A blank side, or one longer than
        :meth:`longest_source` tokens, is an UnscorableText naming it as ``names[side]:line``: a score of a
        cut sentence would be silently wrong."""
        if len(sources) != len(targets):
            raise VaswaniError(f"{names[0]} has {len(sources)} lines and {names[1]} {len(targets)}: scoring "
                               "needs one target per source")
        src_ids = self._encode_checked(sources, names[0], 0)
        tgt_ids = self._encode_checked(targets, names[1], 1)
        results: list[PairScore | None] = [None] * len(sources)
        with progress_reporter(len(sources), "scoring", "pairs", enabled=progress, leave=False) as bar:
            for batch in self.batches(src_ids):
                scored = self.engine.score([src_ids[i] for i in batch], [tgt_ids[i] for i in batch],
                                           self.config)
                for index, token_log_probs in zip(batch, scored):
                    results[index] = pair_score(token_log_probs, self.config)
                bar.update(len(batch))
        return results  # type: ignore[return-value]

    def _encode_checked(self, texts: Sequence[str], name: str, side: int) -> list[list[int]]:
        """The ids of each text (a source's with </s>); a blank or too long text is an UnscorableText
        naming its line."""
        limit = self.longest_source()
        ids = self.tokenizer.encode_batch([text.strip() for text in texts], max_ids=limit)
        for index, (text, seq) in enumerate(zip(texts, ids)):
            if not text.strip():
                raise UnscorableText(f"{name}:{index + 1}: blank line; every pair needs a source and a "
                                     "target (remove the pair)", side, index)
            if len(seq) + 1 > limit:  # </s> ends a source, and follows a target's last token
                raise UnscorableText(f"{name}:{index + 1}: longer than the model's {limit} tokens; split or "
                                     "remove the pair", side, index)
        return [seq + [self.config.eos_id] for seq in ids] if side == 0 else ids

    # ---- steps -------------------------------------------------------------------------------------------------
    def encode_prefixes(self, prefixes: Sequence[str], sources: Sequence[list[int]],
                        name: str = "prefix") -> list[list[int]]:
        """The ids of each source's prefix ("" = none). One the output limit of its source leaves no room for
        (with </s> after it) is an UnusablePrefix naming ``name:line``."""
        if len(prefixes) != len(sources):
            raise UnusablePrefix(f"{name} has {len(prefixes)} lines for {len(sources)} sources: give one per "
                                 "source (an empty line for none)", min(len(prefixes), len(sources)))
        limits = output_limits([len(source) for source in sources], self.config, self.model_config)
        ids = self.tokenizer.encode_batch([prefix.strip() for prefix in prefixes], max_ids=max(limits))
        for index, (prefix, limit) in enumerate(zip(ids, limits)):
            if sources[index] and len(prefix) + 1 > limit:
                raise UnusablePrefix(f"{name}:{index + 1}: {len(prefix)} tokens leave no room in this "
                                     f"sentence's output limit of {limit} (with </s>); shorten the prefix or "
                                     "raise --max-len-a/--max-len-b", index)
        return ids

    def encode_constraints(self, constraints: Sequence[Sequence[str]], sources: Sequence[list[int]],
                           name: str = "constraints") -> list[list[list[int]]]:
        """The ids of each source's phrases, each read as a word inside a sentence (after a space: the form the
        output holds it in). Phrases that leave no room in their sentence's output limit (with </s>), or an
        empty one, are an UnusableConstraint naming ``name:line``; so is a search that draws (it cannot place
        them)."""
        if len(constraints) != len(sources):
            raise UnusableConstraint(f"{name} has {len(constraints)} lines for {len(sources)} sources: give one "
                                     "per source (an empty line for none)", min(len(constraints), len(sources)))
        if self.config.sample and any(constraints):
            raise UnusableConstraint(f"{name}: constraints are placed by beam search; leave out `search.sample`", 0)
        limits = output_limits([len(source) for source in sources], self.config, self.model_config)
        encoded = []
        for index, (phrases, limit) in enumerate(zip(constraints, limits)):
            if any(not phrase.strip() for phrase in phrases):
                raise UnusableConstraint(f"{name}:{index + 1}: an empty constraint; give a word or more", index)
            ids = self.tokenizer.encode_batch([" " + phrase.strip() for phrase in phrases], max_ids=limit)
            if sources[index] and sum(map(len, ids)) + 1 > limit:
                raise UnusableConstraint(f"{name}:{index + 1}: {sum(map(len, ids))} tokens of constraints leave "
                                         f"no room in this sentence's output limit of {limit} (with </s>); "
                                         "shorten them or raise --max-len-a/--max-len-b", index)
            encoded.append(ids)
        return encoded

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """BPE ids + </s> per sentence (blank lines give []). A source longer than :meth:`longest_source` is cut
        there (with a warning naming the first one) rather than crashing the whole file; its text is cut by
        characters before it is encoded, so a line of any length costs a bounded amount of work."""
        limit = self.longest_source()
        ids = self.tokenizer.encode_batch([text.strip() for text in texts], max_ids=limit)
        sources, cut = [], []
        for number, (text, seq) in enumerate(zip(texts, ids), 1):
            if not text.strip():
                sources.append([])
                continue
            seq = seq + [self.config.eos_id]
            if len(seq) > limit:
                seq = seq[: limit - 1] + [self.config.eos_id]
                cut.append(number)
            sources.append(seq)
        if cut:
            print(f"warning: {len(cut)} source sentence(s) longer than {limit} tokens were cut there (the first: "
                  f"sentence {cut[0]}); split such lines to translate all of them", file=sys.stderr)
        return sources

    def longest_source(self) -> int:
        """The most source tokens (</s> included) one sentence may have: learned positions end at model.max_len;
        sinusoidal and rotary ones extrapolate, but attention's memory grows with the square of the length (a
        100,000-token line would ask for over 100 GB), so they stop at LONGEST_SOURCE."""
        if self.model_config.positions == "learned":
            return self.model_config.max_len
        return max(LONGEST_SOURCE, self.model_config.max_len)

    def batches(self, sources: Sequence[list[int]]) -> Iterator[list[int]]:
        """Indices of ``sources`` grouped longest-first into batches within the sentence and token budgets."""
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
        batch: list[int] = []
        for index in order:
            width = len(sources[batch[0]]) if batch else len(sources[index])  # longest first: the first is widest
            too_many_tokens = (
                self.max_tokens is not None and (len(batch) + 1) * width * self.config.beam_size > self.max_tokens
            )
            if batch and (len(batch) == self.batch_size or too_many_tokens):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch

    def _translate_batch(self, sources: list[list[int]], prefixes: list[list[int]] | None = None,
                         alignments: bool = False,
                         constraints: list[list[list[int]]] | None = None) -> list[list[Translation]]:
        """Search, detokenize. Blank sources are answered with an empty translation without decoding."""
        real = [i for i, seq in enumerate(sources) if seq]
        out: list[list[Translation]] = [[Translation("", 0.0, 0.0, 0)] for _ in sources]
        if not real:
            return out
        forced = [prefixes[i] for i in real] if prefixes is not None and any(prefixes[i] for i in real) else None
        if constraints is not None and any(constraints[i] for i in real):
            phrases = [constraints[i] for i in real]
            hypotheses = self.engine.search([sources[i] for i in real], self.config, forced, phrases,
                                            self.tokenizer.word_continuations)
        elif forced is not None:
            hypotheses = self.engine.search([sources[i] for i in real], self.config, forced)
        else:  # the plain search, with nothing forced
            hypotheses = self.engine.search([sources[i] for i in real], self.config)
        for i, nbest in zip(real, hypotheses):
            # One line per translation, always: byte-level BPE can emit "\n" (or \u2028, …), which would
            # misalign every line-based file written after it.
            texts = [" ".join(t.splitlines()) for t in self.tokenizer.decode_batch([h.tokens for h in nbest])]
            if constraints is not None:  # a phrase, read as a word after a space, may open the translation
                texts = [text.lstrip(" ") for text in texts]
            out[i] = [Translation(t, h.score, h.log_prob, len(h.tokens) + 1) for t, h in zip(texts, nbest)]
        if alignments:
            self._align([sources[i] for i in real], [out[i] for i in real], hypotheses)
        return out

    def _align(self, sources: list[list[int]], translations: list[list[Translation]],
               hypotheses: list[list[Any]]) -> None:
        """Fill each translation's ``alignment`` from the torch model's cross-attention over its tokens (the
        CTranslate2 engine loads the torch model of its weights for it)."""
        from vaswani.decoding.alignment import pharaoh, subword_attention, word_indices  # torch: only here

        pairs = [(source, hypothesis.tokens)
                 for source, nbest in zip(sources, hypotheses) for hypothesis in nbest]
        attention = subword_attention(self.model, [p[0] for p in pairs], [p[1] for p in pairs],
                                      self.config.bos_id, self.config.pad_id)
        flat = [translation for nbest in translations for translation in nbest]
        for translation, (source, target), weights in zip(flat, pairs, attention):
            source_words = word_indices([self.tokenizer.decode([i]) for i in source[:-1]])
            target_words = word_indices([self.tokenizer.decode([i]) for i in target])
            # Only the words the text shows: subwords of bytes that decode to nothing align to no word.
            words = len(translation.text.split())
            translation.alignment = pharaoh(weights, source_words, target_words, words)
