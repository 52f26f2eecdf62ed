"""The API's routes for what decoding offers beside plain translation: ``POST /v1/score`` (given translations'
log-probabilities), and ``/v1/translate``'s target prefixes and constraints. They check their requests
with the app's checks and run on the app's model slots."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Awaitable

from fastapi import APIRouter, Request, Response

from vaswani.decoding import SearchConfig, Translator, UnscorableText, UnusableConstraint, UnusablePrefix
from vaswani.decoding.engine import CTRANSLATE2
from vaswani.errors import ConfigError
from vaswani.serve.app import CLIENT_GONE, answer_unless_gone
from vaswani.serve.checks import ApiError, check_text, check_work
from vaswani.serve.schemas import ScoreRequest, TranslateRequest
from vaswani.serve.settings import ServeSettings

routes = APIRouter()


@routes.post("/v1/score")
async def score(body: ScoreRequest, request: Request) -> Any:
    """Each pair's log-probability under the model (as `vaswani score`): score, log_prob, per_token,
    tokens."""
    started = time.perf_counter()
    settings: ServeSettings = request.app.state.settings
    if len(body.targets) != len(body.sources):
        raise ApiError(422, "targets", f"{len(body.targets)} targets for {len(body.sources)} sources: give "
                       "one target per source")
    if not body.sources:
        raise ApiError(422, "sources", "empty list: give at least one pair")
    if len(body.sources) > settings.max_texts:
        raise ApiError(422, "sources", f"{len(body.sources)} pairs; at most {settings.max_texts} per request")
    for name, texts in (("sources", body.sources), ("targets", body.targets)):
        for i, text in enumerate(texts):
            check_text(text, f"{name}[{i}]", settings)
    translator: Translator = request.app.state.served.translator
    alpha = {"alpha": body.alpha} if body.alpha is not None else {}
    try:
        config = dataclasses.replace(translator.config, beam_size=1, nbest=1, **alpha)
    except ConfigError as error:
        raise ApiError(422, "alpha", str(error)) from None
    check_work(translator.encode(body.sources), config, "sources", settings)

    def run(slot: Translator) -> list[dict[str, float | int]]:
        scorer = slot.with_search(config, slot.batch_size, slot.max_tokens)
        return [pair.as_dict() for pair in scorer.score(body.sources, body.targets)]

    try:
        result = await answer_unless_gone(request, request.app.state.batcher.run_exclusive(run))
    except UnscorableText as error:
        field = f"{('sources', 'targets')[error.side]}[{error.index}]"
        raise ApiError(422, field, str(error).split(": ", 1)[-1]) from None
    if result is None:
        return Response(status_code=CLIENT_GONE)
    return {"scores": result, "model": request.app.state.served.info.id,
            "time_ms": round(1000 * (time.perf_counter() - started), 2)}


def translation_work(request: Request, body: TranslateRequest, sources: list[list[int]],
                     config: SearchConfig) -> Awaitable[Any]:
    """The translation of ``sources``: batched with other requests' sentences, or, with target prefixes,
    constraints or alignments, on a model slot of its own (the batcher's batches carry none of them). A prefix
    or constraint that does not fit is a 422 naming it."""
    batcher = request.app.state.batcher
    if body.target_prefix is None and body.constraints is None and not body.alignments:
        return batcher.translate(sources, config)
    forced = None if body.target_prefix is None else _prefixes(request, body, sources, config)
    phrases = None if body.constraints is None else _constraints(request, body, sources, config)

    def run(slot: Translator) -> Any:
        translator = slot.with_search(config, slot.batch_size, slot.max_tokens)
        return translator.translate_ids_nbest(sources, False, forced, body.alignments, phrases)

    return batcher.run_exclusive(run)


def _constraints(request: Request, body: TranslateRequest, sources: list[list[int]],
                 config: SearchConfig) -> list[list[list[int]]]:
    """The request's constraints as ids, each checked (a 422 naming the text's list or phrase at fault)."""
    assert body.constraints is not None
    settings: ServeSettings = request.app.state.settings
    if len(body.constraints) != len(sources):
        raise ApiError(422, "constraints", f"{len(body.constraints)} lists for {len(sources)} texts: give one list "
                       "of phrases per text ([] for none)")
    for i, phrases in enumerate(body.constraints):
        for j, phrase in enumerate(phrases):
            if not phrase.strip():
                raise ApiError(422, f"constraints[{i}][{j}]", "empty phrase: give a word or more")
            if len(phrase) > settings.max_chars:
                raise ApiError(422, f"constraints[{i}][{j}]",
                               f"{len(phrase)} characters; at most {settings.max_chars} per text")
    translator: Translator = request.app.state.served.translator
    if translator.engine.name == CTRANSLATE2 and any(body.constraints):
        raise ApiError(422, "constraints", "this server runs the ctranslate2 engine, which cannot place "
                       "constraints; serve the model with `engine` torch")
    try:
        return translator.with_search(config, translator.batch_size,
                                      translator.max_tokens).encode_constraints(body.constraints, sources)
    except UnusableConstraint as error:
        raise ApiError(422, f"constraints[{error.index}]", str(error).split(": ", 1)[-1]) from None


def _prefixes(request: Request, body: TranslateRequest, sources: list[list[int]],
              config: SearchConfig) -> list[list[int]]:
    """The request's target prefixes as ids, each checked (a 422 naming the one that does not fit)."""
    assert body.target_prefix is not None
    settings: ServeSettings = request.app.state.settings
    one = isinstance(body.target_prefix, str)
    if one != (body.text is not None):
        raise ApiError(422, "target_prefix", "give a string with 'text', a list (one per text) with 'texts'")
    prefixes = [body.target_prefix] if isinstance(body.target_prefix, str) else body.target_prefix
    if len(prefixes) != len(sources):
        raise ApiError(422, "target_prefix", f"{len(prefixes)} prefixes for {len(sources)} texts: give one "
                       'per text ("" for none)')
    for i, prefix in enumerate(prefixes):
        if len(prefix) > settings.max_chars:
            name = "target_prefix" if one else f"target_prefix[{i}]"
            raise ApiError(422, name, f"{len(prefix)} characters; at most {settings.max_chars} per text")
    translator: Translator = request.app.state.served.translator
    if translator.engine.name == CTRANSLATE2 and config.beam_size > 1 and any(p.strip() for p in prefixes):
        raise ApiError(422, "target_prefix", "this server's ctranslate2 engine forces a prefix in greedy "
                       "search only (in a beam it forces it on every beam, which then hold copies of one "
                       "hypothesis): ask for beam 1")
    try:
        return translator.with_search(config, translator.batch_size,
                                      translator.max_tokens).encode_prefixes(prefixes, sources)
    except UnusablePrefix as error:
        name = "target_prefix" if one else f"target_prefix[{error.index}]"
        raise ApiError(422, name, str(error).split(": ", 1)[-1]) from None
