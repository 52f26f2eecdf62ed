"""What the API's handlers check before any work: a request's search settings against the server's limits and
the engine, its texts, and the work it asks for. Anything refused is an :class:`ApiError` naming the request's
field (a 4xx), which the app answers as JSON."""

from __future__ import annotations

import dataclasses

from fastapi.responses import JSONResponse

from vaswani.decoding import SearchConfig, Translator
from vaswani.decoding.engine import CTRANSLATE2
from vaswani.errors import ConfigError
from vaswani.serve.attention import attention_size_problem
from vaswani.serve.schemas import SAMPLING_FIELDS, SearchSettings
from vaswani.serve.settings import ServeSettings


class ApiError(Exception):
    """A client error that names the offending field."""

    def __init__(self, status: int, field: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers


def error_response(status: int, field: str | None, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "field": field, "message": message}}, status, headers=headers)


# The request field that sets each SearchConfig field, so a value the search refuses is a 422 naming it.
REQUEST_FIELDS = {"beam_size": "beam", "alpha": "alpha", "max_len_a": "max_len_a", "max_len_b": "max_len_b",
                  "nbest": "nbest", **{name: name for name in SAMPLING_FIELDS}}


def search_config(translator: Translator, body: SearchSettings, settings: ServeSettings,
                  nbest: int = 1) -> SearchConfig:
    """The model's search with the request's settings on top, checked against the server's limits and by the
    engine; anything refused is a 422 naming the request's field."""
    if body.beam is not None and body.beam > settings.max_beam:
        raise ApiError(422, "beam", f"must be <= {settings.max_beam} (the server's max_beam)")
    given = {"beam_size": body.beam, "alpha": body.alpha, "max_len_a": body.max_len_a,
             "max_len_b": body.max_len_b, **body.sampling()}
    try:
        config = dataclasses.replace(translator.config, nbest=1, **{k: v for k, v in given.items() if v is not None})
        if config.beam_size > settings.max_beam:  # the model's stored beam is wider than this server allows
            raise ApiError(422, "beam", f"the model's beam {config.beam_size} is over the server's max_beam "
                           f"{settings.max_beam}; give a beam <= {settings.max_beam}")
        if nbest > (settings.max_beam if config.sample else config.beam_size):  # draws: at most max_beam
            raise ApiError(422, "nbest",
                           f"{nbest} hypotheses need a beam at least as wide (beam is {config.beam_size})")
        return translator.engine.bind(servable(dataclasses.replace(config, nbest=nbest), translator.engine.name))
    except ConfigError as error:
        name = (error.field or "").removeprefix("search.")
        raise ApiError(422, REQUEST_FIELDS.get(name, "body"), str(error)) from None


def servable(config: SearchConfig, engine: str) -> SearchConfig:
    """``config`` as ``engine`` can run it for any beam a request may ask for. A request sets the beam but not the
    length penalty, which comes from the model's stored search: a GNMT penalty (a greedy final model stores the
    default one) has no counterpart in CTranslate2's beam, so there a beam ranks by the power penalty with the same
    alpha, the one CTranslate2 computes (as `vaswani bench engines` runs a stored GNMT search)."""
    if engine == CTRANSLATE2 and config.length_norm == "gnmt" and config.beam_size > 1 and config.alpha > 0:
        return dataclasses.replace(config, length_norm="power")
    return config


def check_text(text: str, field: str, settings: ServeSettings) -> None:
    if not text.strip():
        raise ApiError(422, field, "empty text: type a sentence in the model's source language")
    if len(text) > settings.max_chars:
        raise ApiError(422, field, f"{len(text)} characters; at most {settings.max_chars} per text")


def check_work(sources: list[list[int]], config: SearchConfig, field: str, settings: ServeSettings) -> None:
    """Refuse a request whose decode work (source tokens × beam over its texts) is over max_request_tokens."""
    work = sum(len(source) for source in sources) * config.beam_size
    if work > settings.max_request_tokens:
        raise ApiError(422, field, f"{sum(map(len, sources)):,} source tokens x beam {config.beam_size} = "
                       f"{work:,}; at most {settings.max_request_tokens:,} per request (the server's "
                       "max_request_tokens): send fewer or shorter texts, or ask for a narrower beam")


def check_attention_bytes(translator: Translator, source_tokens: int, config: SearchConfig, source: str,
                          settings: ServeSettings) -> None:
    """Refuse, before the search, an attention answer that could be larger than max_attention_bytes."""
    problem = attention_size_problem(translator, source_tokens, config, source, settings.max_attention_bytes)
    if problem is not None:
        raise ApiError(422, "text", problem)
