"""Request bodies of the API. Strict: unknown fields and wrong JSON types are errors that name the field."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from vaswani.data.textfiles import unicode_problem


def _unicode_text(text: str) -> str:
    problem = unicode_problem(text)
    if problem is not None:
        # A 422 naming the field (texts[1], ...), where the tokenizer would raise a TypeError (a 500).
        raise PydanticCustomError("unicode_text", problem)
    return text


# A JSON string may hold a lone surrogate ("\ud800"): valid JSON, but no text; refused with the request.
UnicodeText = Annotated[str, AfterValidator(_unicode_text)]
# The request fields that shape sampling, named as SearchConfig names them.
SAMPLING_FIELDS = ("sample", "top_k", "top_p", "temperature", "seed")
# Phrases one text's translation may be asked to contain: each widens every step of its search.
MAX_CONSTRAINTS = 8


def _prefix(value: Any) -> str | list[str]:
    """A string, or a list of strings, each text (one error naming the field, not one per union member)."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise PydanticCustomError("target_prefix",
                                  "give a string (with 'text') or a list of strings (with 'texts')")
    for item in items:
        _unicode_text(item)
    return value


TargetPrefix = Annotated[Any, AfterValidator(_prefix), WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})]


class SearchSettings(BaseModel):
    """Optional search settings of a request; an omitted one is the model's stored search (``search.json``, chosen
    on validation data at the end of its training run), else ``vaswani translate``'s default."""

    model_config = ConfigDict(extra="forbid", strict=True)

    beam: int | None = Field(None, ge=1, description="beam size; 1 = greedy (at most the server's max_beam)")
    alpha: float | None = Field(None, ge=0.0, le=5.0, description="GNMT length-penalty exponent")
    max_len_a: float | None = Field(None, ge=0.0, le=4.0,
                                    description="output length limit = a · source tokens + b")
    max_len_b: int | None = Field(None, ge=0, le=256, description="see max_len_a")
    sample: bool = Field(False, description="draw each token instead of searching (beam 1; nbest draws, at "
                         "most the server's max_beam)")
    top_k: int | None = Field(None, ge=0, le=100_000,
                              description="draw from the k most probable tokens; 0 = all")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="draw from the nucleus of probability p")
    temperature: float | None = Field(None, ge=0.01, le=100.0, description="divides the log-probabilities")
    seed: int | None = Field(None, ge=0, lt=2**63, description="the draws' seed (default 0)")

    def sampling(self) -> dict[str, bool | int | float]:
        """The SearchConfig fields of the sampling settings given (``sample``: at beam 1 unless ``beam`` is
        given, which the search then refuses)."""
        given = {"top_k": self.top_k, "top_p": self.top_p, "temperature": self.temperature, "seed": self.seed}
        chosen = {name: value for name, value in given.items() if value is not None}
        return {"sample": True, "beam_size": self.beam or 1, **chosen} if self.sample else chosen


class TranslateRequest(SearchSettings):
    """``{"text": "..."}`` or ``{"texts": ["...", ...]}``, plus optional search settings. The checks that depend
    on the server's limits (and on two fields at once) are made by the endpoint, so that every error names its field."""

    text: UnicodeText | None = Field(None, description="one German sentence")
    texts: list[UnicodeText] | None = Field(None, description="several sentences, translated together")
    nbest: int = Field(1, ge=1, description="hypotheses per text, best first (at most beam)")
    alignments: bool = Field(False, description="give each hypothesis its word alignment to the source: "
                             "Pharaoh 'i-j' pairs (source word i, target word j, from 0)")
    target_prefix: TargetPrefix | None = Field(
        None, description="the start of each translation, which the search completes: a string for 'text', a "
        "list (one per text, \"\" for none) for 'texts' (a ctranslate2 server: beam 1 only)")
    constraints: list[Annotated[list[UnicodeText], Field(max_length=MAX_CONSTRAINTS)]] | None = Field(
        None, description="phrases each translation must contain: one list per text (with 'text': a list of one "
        f"list), [] for none, at most {MAX_CONSTRAINTS} phrases each (a torch server's constrained beam search)")


class AttentionRequest(SearchSettings):
    """One sentence: its translation and the cross-attention weights behind it."""

    text: UnicodeText = Field(description="one German sentence")
    attention_from: Literal["engine", "torch"] = Field(
        "engine", description="engine: what the serving engine gives (CTranslate2: the last layer, its heads "
        "averaged; torch: every layer and head); torch: the torch model's, every layer and head")


class ScoreRequest(BaseModel):
    """Given translations to score: ``sources[i]`` translated as ``targets[i]``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sources: list[UnicodeText] = Field(description="sentences in the model's source language")
    targets: list[UnicodeText] = Field(description="their translations, one per source")
    alpha: float | None = Field(None, ge=0.0, le=5.0, description="length-penalty exponent of the score "
                                "(default: the model's stored search)")
