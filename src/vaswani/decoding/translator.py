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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.engine import TORCH, Engine, is_engine, open_engine
from vaswani.errors import ConfigError, VaswaniError
from vaswani.model.serialization import CONFIG_FILE, read_model_config, resolve_checkpoint
from vaswani.progress import progress_reporter

if TYPE_CHECKING:
    from vaswani.model.transformer import Transformer

TOKENIZER_FILE = "tokenizer.json"

# Sources longer than this (in BPE tokens) are cut unless the model was built for longer ones: far past any
# training sentence, and small enough that standard attention over one such sentence takes megabytes, not gigabytes.
LONGEST_SOURCE = 1024


@dataclass
class Translation:
    text: str  # detokenized hypothesis
    score: float  # length-normalised log-prob (what n-best lists are sorted by)
    log_prob: float  # summed log-prob, </s> included
    length: int  # target tokens generated, </s> included


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
            from vaswani.decoding.torch_engine import TorchEngine

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
        **batching: Any,
    ) -> "Translator":
        """From a checkpoint directory (or a run directory): model.safetensors + model.json + tokenizer.json.

        ``options`` (default: the torch engine on the best device): the engine, "torch", "ctranslate2" or "auto"
        (CTranslate2 when it can run this model and search, else torch, saying why in a warning), and what it runs
        on; ``batching``: ``batch_size``, ``max_tokens``.
        """
        directory = resolve_checkpoint(checkpoint)
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
        chosen = open_engine(directory, model_config, tokenizer, config, options or EngineOptions())
        return cls(chosen, tokenizer, config, **batching)

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

    def translate_nbest(self, texts: Sequence[str], progress: bool = False) -> list[list[Translation]]:
        """``config.nbest`` scored translations per input string, best first, in input order."""
        return self.translate_ids_nbest(self.encode(texts), progress)

    def translate_ids_nbest(self, sources: Sequence[list[int]], progress: bool = False) -> list[list[Translation]]:
        """Like :meth:`translate_nbest` for sources that are already ids (``x1 … xn </s>``; [] = blank line).
        Padding ids inside a source are masked like trailing padding by the torch engine: the robustness
        experiment's "dropped" tokens."""
        results: list[list[Translation] | None] = [None] * len(sources)
        with progress_reporter(len(sources), "translating", "sentences", enabled=progress,
                               leave=False) as bar:
            for batch in self.batches(sources):
                for index, hypotheses in zip(batch, self._translate_batch([sources[i] for i in batch])):
                    results[index] = hypotheses
                bar.update(len(batch))
        return results  # type: ignore[return-value]

    # ---- steps -------------------------------------------------------------------------------------------------
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

    def _translate_batch(self, sources: list[list[int]]) -> list[list[Translation]]:
        """Search, detokenize. Blank sources are answered with an empty translation without decoding."""
        real = [i for i, seq in enumerate(sources) if seq]
        out: list[list[Translation]] = [[Translation("", 0.0, 0.0, 0)] for _ in sources]
        if not real:
            return out
        hypotheses = self.engine.search([sources[i] for i in real], self.config)
        for i, nbest in zip(real, hypotheses):
            # One line per translation, always: byte-level BPE can emit "\n" (or \u2028, …), which would
            # misalign every line-based file written after it.
            texts = [" ".join(t.splitlines()) for t in self.tokenizer.decode_batch([h.tokens for h in nbest])]
            out[i] = [Translation(t, h.score, h.log_prob, len(h.tokens) + 1) for t, h in zip(texts, nbest)]
        return out
