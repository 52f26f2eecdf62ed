"""What a search does and which engine runs it, as two dataclasses (no torch import: the command line builds them
cheaply)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import atomic_write_json, read_json, read_manifest, verify_files
from vaswani.records import from_json, to_json
from vaswani.settings import MAX_LENGTH, Limit, Precision, validate_settings

LengthNorm = Literal["gnmt", "power", "average", "none"]
# Which implementation runs a search (decoding/engine.py) and, for CTranslate2, the type of its weights and
# arithmetic. Both belong to the machine that decodes, like precision, but a checkpoint may store a choice.
EngineName = Literal["auto", "torch", "ctranslate2"]
ENGINES: tuple[str, ...] = get_args(EngineName)
Quantization = Literal["float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16",
                       "int8_bfloat16"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


@dataclass
class SearchConfig:
    """How to search. ``beam_size=1`` is greedy search."""

    beam_size: int = 4
    nbest: int = 1  # hypotheses returned per sentence, best first (at most beam_size, or draws when sampling)
    length_norm: LengthNorm = "gnmt"  # rank finished hypotheses by log P / lp(|Y|)
    alpha: float = 0.6  # exponent of lp (gnmt, power); 0.6 is the paper's GNMT value (Vaswani et al. §6.1)
    max_len_a: float = 1.5  # output length limit = a * source length + b (tokens, </s> included) ...
    max_len_b: int = 10  # ... capped at model.max_len when positions are learned
    repetition_penalty: float = 1.0  # CTRL θ; 1.0 = off, >1 discourages repeating generated tokens
    no_repeat_ngram: int = 0  # forbid any n-gram from occurring twice; 0 = off
    allow_eos: bool = True  # False: always decode to the length limit (fixed-length speed measurements)
    # Self-attention caches sized for the longest output up front and written in place (True), or grown by one
    # copy per step (False). Growing is the default: on CPU, with Multi30k-length outputs, it measured as fast for
    # greedy and faster for beam search, whose reorders then copy only the filled positions
    # (`vaswani bench decode`, results/bench/decode-readme-model.md).
    preallocate_cache: bool = False
    precision: Precision = "auto"  # autocast around the model (search arithmetic stays float32); see precision.py
    # Sampling (sampling.py) instead of search: nbest draws per sentence, each token from the distribution
    # tempered by `temperature` and cut to its top_k tokens (0: all) and its top_p nucleus (1: all).
    sample: bool = False
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0  # the same seed, input and batching draw the same translations
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 0

    SECTION = "search"
    # Upper bounds keep a typo from asking for terabytes (a limit of a·|src| + b positions is allocated up front
    # for the output, and a beam of k multiplies the batch by k); each is far beyond any sensible search.
    # The float ranges keep every score of the search finite in float32: the GNMT divisor ((5 + |Y|) / 6)^alpha
    # stays below 1e35 for outputs up to 6e7 tokens with alpha <= 5, and a repetition penalty in [0.01, 100]
    # scales a logit by at most 100 (1/θ or θ), so no logit overflows and no log-probability becomes -inf or nan.
    LIMITS = {
        "beam_size": Limit(ge=1, le=256), "nbest": Limit(ge=1, le=256), "alpha": Limit(ge=0, le=5),
        "max_len_a": Limit(ge=0, le=16), "max_len_b": Limit(ge=0, le=4096),
        "repetition_penalty": Limit(ge=0.01, le=100), "no_repeat_ngram": Limit(ge=0, le=MAX_LENGTH),
        "bos_id": Limit(ge=0), "eos_id": Limit(ge=0), "pad_id": Limit(ge=0),
        "top_k": Limit(ge=0, le=1_000_000), "top_p": Limit(gt=0, le=1), "temperature": Limit(ge=0.01, le=100),
        "seed": Limit(ge=0, lt=2**63),
    }

    def __post_init__(self) -> None:
        validate_settings(self)  # types, length_norm choices, finite numbers, LIMITS
        if self.sample:
            if self.beam_size != 1:
                raise ConfigError(f"`search.sample` draws each token: it runs with `search.beam_size` 1, not "
                                  f"{self.beam_size} (`search.nbest` sets the number of draws)",
                                  field="search.beam_size")
        elif (self.top_k, self.top_p, self.temperature) != (0, 1.0, 1.0):
            raise ConfigError("`search.top_k`, `search.top_p` and `search.temperature` shape sampling: set "
                              "`search.sample` too", field="search.sample")
        if self.nbest > self.beam_size and not self.sample:
            raise ConfigError(f"search.nbest={self.nbest} must be at most search.beam_size={self.beam_size}",
                              field="search.nbest")
        # The shortest source is one token and </s>: its limit a·2 + b must leave room for a token before </s>,
        # or every output of such a sentence is empty.
        if 2 * self.max_len_a + self.max_len_b < 2:
            a, b = f"search.max_len_a={self.max_len_a:g}", f"search.max_len_b={self.max_len_b}"
            # The setting to change comes first: b when a is 0 (a limit of b alone), else a.
            first, second, field = (b, a, "search.max_len_b") if self.max_len_a == 0 else (a, b, "search.max_len_a")
            raise ConfigError(f"{first} and {second} leave no room for a word in the translation of a one-word "
                              "sentence (2 · a + b must be at least 2)", field=field)

    def summary(self) -> str:
        """The search in a few words, as tables name it: "beam 5, gnmt α=0.6, no-repeat-3-gram"."""
        if self.sample:
            parts = [f"sampling (top-k {self.top_k}, top-p {self.top_p:g}, temperature {self.temperature:g})"]
        else:
            parts = ["greedy" if self.beam_size == 1 else f"beam {self.beam_size}"]
        if self.beam_size > 1 and self.length_norm != "none":
            parts.append(self.length_norm if self.length_norm == "average" else f"{self.length_norm} α={self.alpha:g}")
        if self.repetition_penalty != 1.0:
            parts.append(f"repetition penalty {self.repetition_penalty:g}")
        if self.no_repeat_ngram:
            parts.append(f"no-repeat-{self.no_repeat_ngram}-gram")
        return ", ".join(parts)


@dataclass(frozen=True)
class EngineOptions:
    """Which engine runs a search, and on what: the choices of the machine that decodes, beside the SearchConfig
    that says what is searched. One value goes from the command line, the server's settings or a caller to the
    engine.

    ``engine`` None means not chosen: :meth:`with_stored` takes the checkpoint's choice (its search.json), else
    auto; an engine opened with it unresolved runs auto.
    """

    engine: EngineName | None = "torch"  # torch (our search), ctranslate2 (the converted model), auto (either)
    quantization: Quantization | None = None  # CTranslate2's weights and arithmetic; None: float32
    device: str | None = None  # auto, cpu, cuda or cuda:N; None: auto (a model given as weights: where they are)
    threads: int = 0  # CPU threads of the engine; 0: its own default (torch: every core)
    compile: bool = False  # torch.compile the torch engine's decoding step (decoding/compiled.py)

    SECTION = ""  # errors name the bare field ("engine"), as the command line's flags do
    LIMITS = {"threads": Limit(ge=0)}

    def __post_init__(self) -> None:
        validate_settings(self)

    def with_stored(self, stored: StoredSearch) -> "EngineOptions":
        """These options with a checkpoint's stored engine and quantization filling the ones not chosen (None),
        and auto for an engine neither chose. A quantization chosen for the torch engine is an error naming it."""
        engine = self.engine or stored.engine or "auto"
        if engine == "torch" and self.quantization is not None:
            raise ConfigError(f"`quantization` {self.quantization} applies to the ctranslate2 engine; the torch "
                              "engine computes in `search.precision` (use `engine` ctranslate2 or auto)",
                              field="quantization")
        return dataclasses.replace(self, engine=engine, quantization=self.quantization or stored.quantization)


SEARCH_FILE = "search.json"


@dataclass(frozen=True)
class StoredSearch:
    """A checkpoint's search.json: the search chosen for it on validation data (the end of a training run writes
    it), what ``translate``, ``evaluate`` and ``serve`` use unless told otherwise, and the engine and CTranslate2
    quantization when one was chosen (the end of a run stores the quantization it measured as good enough). Only
    what describes the search is stored: batching, device and precision belong to the machine that decodes. A
    field left None is not stored."""

    beam_size: int | None = None
    length_norm: str | None = None
    alpha: float | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    engine: str | None = None
    quantization: str | None = None

    @classmethod
    def of(cls, search: SearchConfig, engine: str | None = None, quantization: str | None = None) -> StoredSearch:
        """What a checkpoint stores of ``search``, with the engine and quantization chosen for it."""
        return cls(search.beam_size, search.length_norm, search.alpha, search.max_len_a, search.max_len_b, engine,
                   quantization)

    @property
    def settings(self) -> dict[str, int | float | str]:
        """The stored search settings as :class:`SearchConfig` keyword arguments (those not stored left out)."""
        return {name: value for name in _SEARCH_FIELDS if (value := getattr(self, name)) is not None}

    def search(self, **changes: int | float | str) -> SearchConfig:
        """The stored search, with the defaults where nothing is stored and ``changes`` over both."""
        return SearchConfig(**{**self.settings, **changes})

    def write(self, directory: str | Path) -> None:
        """Store this with the checkpoint in ``directory``, whole or not at all."""
        atomic_write_json(Path(directory) / SEARCH_FILE, {name: value for name, value in to_json(self).items()
                                                          if value is not None})

    @classmethod
    def read(cls, directory: str | Path) -> StoredSearch:
        """The search stored with the checkpoint in ``directory`` (nothing stored when it has no search.json),
        checked as a SearchConfig checks it; a damaged file is a ConfigError naming it."""
        file = Path(directory) / SEARCH_FILE
        if not file.is_file():
            return cls()
        manifest = read_manifest(directory)
        if manifest is not None:  # checked before it is parsed, on every engine
            verify_files(directory, manifest, [SEARCH_FILE])
        known = [field.name for field in dataclasses.fields(cls)]
        try:
            values = read_json(file, "stored search")
            if not isinstance(values, dict) or not set(values) <= set(known):
                raise VaswaniError(f"{file}: expected an object with keys among {known}")
            stored = from_json(cls, values, str(file))
        except VaswaniError as error:
            raise ConfigError(f"{error}; delete it to use the default search") from None
        for name, choices in (("engine", ENGINES), ("quantization", QUANTIZATIONS)):
            if getattr(stored, name) not in (None, *choices):
                raise ConfigError(f"{file}: {name} {getattr(stored, name)!r} is not one of {list(choices)}",
                                  field=f"search.{name}")
        try:
            stored.search()
        except ConfigError as error:
            raise ConfigError(f"{file}: {error}", field=error.field) from None
        return stored


_SEARCH_FIELDS = ("beam_size", "length_norm", "alpha", "max_len_a", "max_len_b")
