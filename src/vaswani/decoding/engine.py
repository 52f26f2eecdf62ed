"""What every decoding engine offers the :class:`~vaswani.decoding.translator.Translator`, and the rules both
engines share.

Two engines run the same search on the same weights:

- ``torch`` (:mod:`vaswani.decoding.torch_engine`): our model searched by :mod:`vaswani.decoding.search`, the
  readable reference, and the engine for what CTranslate2 cannot express (a sliding attention window, GNMT's
  length penalty in a beam, autocast precisions, ``torch.compile``);
- ``ctranslate2`` (:mod:`vaswani.decoding.ct2_engine`): the checkpoint converted once to a CTranslate2 model
  (:mod:`vaswani.decoding.ct2_model`), searched by CTranslate2's fused C++ kernels, in float32 or quantized.

An engine takes sources as our token ids (``x1 … xn </s>``, never blank) and returns each one's n-best
:class:`Hypothesis` list; tokenizing, batching and detokenizing stay in the Translator, so both engines see the
same batches of the same ids and our tokenizer is the only one. This module imports neither torch nor
CTranslate2: a translation on CTranslate2 never pays for importing torch.
"""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from vaswani.config import ModelConfig
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.errors import ConfigError, VaswaniError, VaswaniWarning

TORCH, CTRANSLATE2, AUTO = "torch", "ctranslate2", "auto"


@dataclass
class Hypothesis:
    tokens: list[int]  # y1 .. yn: no <s>, no </s>
    score: float  # log_prob / lp(n + 1): what n-best lists are sorted by
    log_prob: float  # sum of the (penalised) log-probs of y1 .. yn and </s>


@dataclass(frozen=True)
class EngineDescription:
    """What runs a search, as results files and ``/v1/model`` name it; a field that does not apply to the engine
    is None."""

    engine: str
    device: str
    quantization: str | None = None  # CTranslate2's compute type; None: the torch engine runs the weights as loaded
    compiled: bool | None = None  # torch: the decoder runs through torch.compile
    threads: int | None = None  # CTranslate2: threads per translation
    model: str | None = None  # CTranslate2: the converted model's directory
    ensemble: int | None = None  # models searched as one
    weights: list[float] | None = None  # their weights in the ensemble's mean log-probability

    def summary(self) -> str:
        """One line for a log: ``ctranslate2 int8 on cpu, 2 threads``; ``torch on cuda:0, compiled, 4 models``."""
        parts = [" ".join(filter(None, [self.engine, self.quantization])) + f" on {self.device}"]
        parts += ["compiled"] if self.compiled else []
        parts += [f"{self.threads} threads"] if self.threads else []
        parts += [f"{self.ensemble} models"] if self.ensemble else []
        return ", ".join(parts)


class Engine(Protocol):
    """A search implementation behind the Translator."""

    name: str  # TORCH or CTRANSLATE2
    model_config: ModelConfig  # the architecture of the weights it runs (model.json)
    device: Any  # where it runs: a torch.device (torch), "cpu" or "cuda:N" (CTranslate2)

    @property
    def model(self) -> Any:
        """The torch model of the weights it runs (CTranslate2: loaded on first use, e.g. for every layer's
        attention)."""
        ...

    def bind(self, config: SearchConfig) -> SearchConfig:
        """``config`` as this engine will run it (auto precision resolved); a setting it cannot run is a
        ConfigError naming the setting."""
        ...

    def search(self, sources: Sequence[list[int]], config: SearchConfig,
               prefixes: Sequence[list[int]] | None = None,
               constraints: Sequence[list[list[int]]] | None = None,
               continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        """``config.nbest`` hypotheses per source, best first, for one batch of sources (ids ending in </s>);
        each output starts with its ``prefixes`` ids ([]: none), shorter than its length limit, and contains
        each of its ``constraints`` phrases (ids; the torch engine's) as whole words: not followed by one of
        the ``continuations`` (the tokenizer's word-continuing tokens)."""
        ...

    def score(self, sources: Sequence[list[int]], targets: Sequence[list[int]],
              config: SearchConfig) -> list[list[float]]:
        """For each source (ids ending in </s>) and target (y1 .. yn, no </s>): the log-probs of y1 .. yn
        and of the </s> after them, under the model (no penalty applies: nothing is searched)."""
        ...

    def describe(self) -> EngineDescription:
        """What runs the search, for results files and ``/v1/model``."""
        ...

    def parameters(self) -> int:
        """Parameters of the weights it runs."""
        ...

    def synchronize(self) -> None:
        """Return once the device's queued work is done (a GPU timer would otherwise stop before it)."""
        ...


def is_engine(candidate: Any) -> bool:
    """True for an engine (anything with the interface's methods), False for a model to wrap in the torch engine.
    (Not isinstance on the Protocol: that reads every member, and the CTranslate2 engine's ``model`` loads torch.)"""
    return all(callable(getattr(type(candidate), name, None)) for name in ("bind", "search", "describe"))


def length_penalty(length: Any, alpha: float, mode: str) -> Any:
    """The divisor of a hypothesis' summed log-prob; ``length`` counts its tokens with </s> (always >= 1).

    One formula for both engines: ``length`` is a number (the CTranslate2 engine's rescoring) or a float tensor
    (the torch search, every row at once). Summed log-probs favour short outputs (every token adds a negative
    term); dividing by a length that grows with |Y| removes that bias: GNMT's ((5 + |Y|) / 6)^α (Wu et al.
    2016), the power |Y|^α (OpenNMT's and CTranslate2's, which the CTranslate2 engine can rank a beam by), the
    average (the power with α = 1), or none. GNMT's and the power's α interpolate between none and the average.
    """
    if mode == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if mode == "power":
        return length**alpha
    if mode == "average":
        return length
    return length**0.0  # none: 1 for every length (a tensor of ones for a tensor)


def output_limits(source_lengths: Sequence[int], config: SearchConfig,
                  model_config: ModelConfig | None = None) -> list[int]:
    """The longest output of each sentence (tokens, </s> included): ``a · |source| + b`` truncated, at least 1.

    ``|source|`` counts the source's tokens with its </s>. The product is taken in float32, as the torch search
    computes it on its tensors, so both engines cut every sentence at the same length. Learned position tables
    end at ``max_len``, so with learned positions no output is longer; sinusoidal and rotary ones extrapolate.
    """
    a, b = _float32(config.max_len_a), _float32(config.max_len_b)
    learned = model_config is not None and model_config.positions == "learned"
    longest = model_config.max_len if learned else None
    limits = [max(int(_float32(_float32(a * _float32(length)) + b)), 1) for length in source_lengths]
    return limits if longest is None else [min(limit, longest) for limit in limits]


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as a tensor of float32 holds it. A product or a sum of two
    float32 values is exact in Python's float64 here (lengths and limits are small), so rounding it once gives
    the float32 arithmetic of the torch search without importing numpy or torch."""
    return struct.unpack("f", struct.pack("f", value))[0]


def open_engine(checkpoint: Path, model_config: ModelConfig, tokenizer: Any, config: SearchConfig,
                options: EngineOptions, prefixed: bool = False, constrained: bool = False) -> Engine:
    """The engine ``options`` choose ("torch", "ctranslate2" or "auto"; unchosen: auto) for the checkpoint in
    directory ``checkpoint``, able to run ``config``.

    "ctranslate2" refuses in one line what it cannot run; "auto" then takes the torch engine instead and says why
    in a :class:`~vaswani.errors.VaswaniWarning`; ``prefixed``: the search will force target prefixes;
    ``constrained``: it will place lexical constraints.
    ``quantization`` (default float32) is CTranslate2's, ``compile``
    (``torch.compile`` of the decoding step) the torch engine's.
    """
    name = options.engine or AUTO
    reason = None
    if name != TORCH:
        try:
            return _ctranslate2_engine(checkpoint, model_config, tokenizer, config, options, prefixed, constrained)
        except VaswaniError as error:
            if name == CTRANSLATE2:
                raise
            reason = str(error)
    from vaswani.decoding.torch_engine import TorchEngine  # torch: only for this engine

    engine = TorchEngine.load(checkpoint, options)
    if reason is not None:  # said once the torch engine has loaded: a checkpoint neither can load gets one error
        unused = f" (`quantization` {options.quantization} is not used)" if options.quantization else ""
        warnings.warn(f"engine auto: torch{unused}, because {reason}", VaswaniWarning, stacklevel=2)
    return engine


def _ctranslate2_engine(checkpoint: Path, model_config: ModelConfig, tokenizer: Any, config: SearchConfig,
                        options: EngineOptions, prefixed: bool, constrained: bool) -> Engine:
    from vaswani.decoding.ct2_engine import CTranslate2Engine, cannot_run  # only for this engine

    if options.compile:
        raise ConfigError("`compile` compiles the torch engine's decoding step; CTranslate2 runs compiled kernels "
                          "already (leave out `compile`, or use `engine` torch)", field="compile")
    reason = cannot_run(config, prefixed, constrained)  # before converting anything
    if reason is not None:
        raise ConfigError(f"CTranslate2 cannot run {reason}")
    engine = CTranslate2Engine.load(checkpoint, model_config, tokenizer, options)
    engine.bind(config)
    return engine
