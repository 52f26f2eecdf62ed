"""The ASGI app: the JSON API, the web page, limits and errors.

Endpoints: ``POST /v1/translate``, ``POST /v1/attention``, ``GET /v1/model``, ``GET /health``, ``GET /`` (the
page), ``/docs`` (OpenAPI), and ``POST /v1/score`` (decoding_routes.py). Each is a named handler, reading
what it needs from ``app.state`` (the settings, the served model, the batcher). Every error is JSON,
``{"error": {"status", "field", "message"}}``, and no response ever carries a traceback. What a request is
checked against before any work is checks.py; the request bodies are schemas.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any, Awaitable

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from vaswani.decoding import Translator
from vaswani.decoding.config import StoredSearch
from vaswani.decoding.engine import CTRANSLATE2, TORCH
from vaswani.errors import ConfigError, VaswaniError
from vaswani.evaluation.checkpoint_info import CheckpointInfo, checkpoint_info
from vaswani.model.serialization import resolve_checkpoint
from vaswani.provenance import usable_cores
from vaswani.serve.attention import attention_of
from vaswani.serve.batcher import Batcher, QueueFull
from vaswani.serve.checks import ApiError, check_attention_bytes, check_text, check_work, error_response, search_config
from vaswani.serve.schemas import AttentionRequest, TranslateRequest
from vaswani.serve.settings import ServeSettings, ThreadLayout, thread_layout

log = logging.getLogger("vaswani.serve")
STATIC = files("vaswani.serve") / "static"
RETRY_AFTER_SECONDS = 1
WARM_UP_TEXTS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee neben einem roten Auto."]


# ---- the model -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class ServedModel:
    """A loaded translator and what /v1/model reports of it; ``replicas``: further translators of the same model,
    one per further batch searched at once (``parallel_batches``)."""

    translator: Translator
    info: CheckpointInfo
    replicas: list[Translator] = dataclasses.field(default_factory=list)
    layout: ThreadLayout | None = None  # how this worker's threads are spent (None: a translator given in-process)

    @property
    def translators(self) -> list[Translator]:
        return [self.translator, *self.replicas]


def load_served_model(checkpoint: str | Path | Translator, settings: ServeSettings) -> ServedModel:
    """The model to serve: a checkpoint loaded on the engine the settings (else its search.json) choose, with its
    stored search, once per batch searched at once, on the threads of one worker (:func:`thread_layout`); or an
    already loaded :class:`Translator`. A checkpoint that cannot be served raises the VaswaniError `translate`
    would give for it, so `vaswani serve` calls this before it starts listening."""
    if isinstance(checkpoint, Translator):
        return ServedModel(checkpoint, CheckpointInfo("in-process"))
    directory = resolve_checkpoint(checkpoint)
    stored = StoredSearch.read(directory)
    options = settings.engine_options.with_stored(stored)
    layout = thread_layout(settings, usable_cores(), batches_at_once=options.engine != TORCH)

    def load(threads: int, engine: str = options.engine) -> Translator:
        chosen = dataclasses.replace(options, engine=engine, threads=threads,
                                     quantization=options.quantization if engine != TORCH else None)
        return Translator.load(directory, stored.search(), chosen)

    translator = load(layout.threads_per_batch)
    if translator.engine.name != CTRANSLATE2 and layout.parallel_batches > 1:
        if settings.parallel_batches is not None:
            raise ConfigError(f"`serve.parallel_batches` {layout.parallel_batches}: the {translator.engine.name} "
                              "engine searches one batch at a time (its threads are the process's); use "
                              "`serve.parallel_batches` 1, `serve.workers`, or `engine` ctranslate2",
                              field="serve.parallel_batches")
        # auto chose torch: one batch at a time, on all of this worker's threads
        layout = thread_layout(settings, usable_cores(), batches_at_once=False)
        translator = load(layout.threads_per_batch, TORCH)
    replicas = [load(layout.threads_per_batch) for _ in range(layout.parallel_batches - 1)]
    if options.compile:
        # Compile before the first request, not during it: two sentences, so the step that compiles
        # (batches of two or more, from the third position on) is reached.
        log.info("compiling the decoding step")
        translator.translate(WARM_UP_TEXTS)
    try:
        info = checkpoint_info(directory)
    except VaswaniError as error:  # what the checkpoint says of itself is optional: serve it all the same
        log.warning("%s; /v1/model reports nothing of the model's training", error)
        info = CheckpointInfo(directory.name)
    return ServedModel(translator, info, replicas, layout)


@dataclasses.dataclass
class WorkerIdentity:
    """Which process answered: /health and /v1/model say it, so a client behind one port can tell the workers
    apart."""

    worker: int  # 1 .. workers
    workers: int
    pid: int


# ---- the app: its state, routes and error handlers ---------------------------------------------------------------
def create_app(model: str | Path | Translator | ServedModel, settings: ServeSettings | None = None,
               worker: int = 1) -> FastAPI:
    """The app for a checkpoint (loaded at start-up), an already loaded :class:`Translator`, or a
    :class:`ServedModel` from :func:`load_served_model` (how `vaswani serve` loads it before listening);
    ``worker``: which of the server's ``settings.workers`` processes serves it (1 = the first).

    Everything a handler needs is on ``app.state``: ``settings``, ``worker`` (its number and process id), and once
    started ``served`` (the translator and its info) and ``batcher``."""
    app = FastAPI(
        title="vaswani translation server",
        description="Translation with a from-scratch Transformer (GET /v1/model names its language pair); the page "
        "at / shows attention.",
        lifespan=lifespan,
    )
    app.state.settings = settings or ServeSettings()
    app.state.model = model
    app.state.worker = WorkerIdentity(worker, app.state.settings.workers, os.getpid())
    app.add_middleware(BodyLimit, max_bytes=app.state.settings.max_body_bytes)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.include_router(routes)
    from vaswani.serve.decoding_routes import routes as decoding_routes  # uses this module's checks

    app.include_router(decoding_routes)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app


@asynccontextmanager
async def lifespan(app: FastAPI):  # noqa: ANN201 - FastAPI's lifespan protocol
    state = app.state
    served = state.model if isinstance(state.model, ServedModel) else load_served_model(state.model, state.settings)
    state.served, state.batcher = served, Batcher(served.translators, state.settings)
    state.batcher.start()
    log.info("model %s ready (%s)", served.info.id, served.translator.engine.describe().summary())
    yield
    await state.batcher.stop()  # uvicorn has already finished the requests in flight
    del state.served, state.batcher


routes = APIRouter()


@routes.get("/health")
async def health(request: Request) -> JSONResponse:
    state = request.app.state
    if not hasattr(state, "batcher"):
        return JSONResponse({"status": "loading"}, 503)
    batcher: Batcher = state.batcher
    return JSONResponse({"status": "ready", "model": state.served.info.id, **dataclasses.asdict(state.worker),
                         **dataclasses.asdict(batcher.counters())})


@routes.get("/v1/model")
async def model_info(request: Request) -> dict[str, Any]:
    state = request.app.state
    translator: Translator = state.served.translator
    return {
        **dataclasses.asdict(state.served.info),
        **dataclasses.asdict(translator.engine.describe()),
        **dataclasses.asdict(state.worker),
        "parallel_batches": len(state.served.translators),
        "threads": state.served.layout.threads_per_batch if state.served.layout else None,  # per batch
        "vocab_size": translator.tokenizer.vocab_size,
        "parameters": translator.engine.parameters(),
        "config": translator.model_config.to_dict(),
        "limits": dataclasses.asdict(state.settings),
        "search": StoredSearch.of(translator.config).settings,  # what a request that gives no search settings gets
    }


@routes.post("/v1/translate")
async def translate(body: TranslateRequest, request: Request) -> Any:
    started = time.perf_counter()
    settings: ServeSettings = request.app.state.settings
    if (body.text is None) == (body.texts is None):
        raise ApiError(422, "text", "give exactly one of 'text' and 'texts'")
    if body.text is not None:
        texts, field = [body.text], "text"
        check_text(body.text, "text", settings)
    else:
        texts, field = body.texts or [], "texts"
        if not texts:
            raise ApiError(422, "texts", "empty list: give at least one text")
        if len(texts) > settings.max_texts:
            raise ApiError(422, "texts", f"{len(texts)} texts; at most {settings.max_texts} per request")
        for i, text in enumerate(texts):
            check_text(text, f"texts[{i}]", settings)
    translator: Translator = request.app.state.served.translator
    config = search_config(translator, body, settings, body.nbest)
    sources = translator.encode(texts)
    check_work(sources, config, field, settings)
    from vaswani.serve.decoding_routes import translation_work  # its own module: it uses this one's checks

    results = await answer_unless_gone(request, translation_work(request, body, sources, config))
    if results is None:
        return Response(status_code=CLIENT_GONE)
    translations = [
        {"text": nbest[0].text, "score": nbest[0].score,
         "nbest": [{"text": h.text, "score": h.score, "log_prob": h.log_prob, "length": h.length,
                    **({"alignment": h.alignment} if h.alignment is not None else {})} for h in nbest]}
        for nbest in results
    ]
    answer: dict[str, Any] = {"translations": translations}
    if body.text is not None:
        answer["translation"] = translations[0]["text"]
    answer.update(model=request.app.state.served.info.id, time_ms=round(1000 * (time.perf_counter() - started), 2))
    return JSONResponse(answer)  # plain JSON already: no encoder pass over it


@routes.post("/v1/attention")
async def attention(body: AttentionRequest, request: Request) -> Any:
    started = time.perf_counter()
    settings: ServeSettings = request.app.state.settings
    check_text(body.text, "text", settings)
    translator: Translator = request.app.state.served.translator
    config = search_config(translator, body, settings)
    ids = translator.encode([body.text])
    check_work(ids, config, "text", settings)
    check_attention_bytes(translator, len(ids[0]), config, body.attention_from, settings)
    work = request.app.state.batcher.run_exclusive(
        lambda slot: attention_of(slot, body.text, config, body.attention_from))
    result = await answer_unless_gone(request, work)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    return {**result, "layers": len(result["layer_numbers"]), "model": request.app.state.served.info.id,
            "time_ms": round(1000 * (time.perf_counter() - started), 2)}


@routes.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(str(STATIC / "index.html"))


# A response nobody reads: its client closed the connection before the answer (nginx's code for it).
CLIENT_GONE = 499


async def answer_unless_gone(request: Request, work: Awaitable[Any]) -> Any:
    """``work``'s result, or None once the client has closed the connection: the work is then cancelled, so what
    it had not started is never done (the batcher drops its sentences)."""
    answer = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer.done():
        try:
            return answer.result()
        except QueueFull:
            raise ApiError(503, None, "server busy: too many sentences waiting; retry shortly",
                           {"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
    answer.cancel()
    log.info("%s: the client went away; its work not yet started is dropped", request.url.path)
    return None


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body has been read: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ---- errors: always JSON, always naming the field, never a traceback ----------------------------------------------
async def api_error(request: Request, error: ApiError) -> JSONResponse:
    return error_response(error.status, error.field, error.message, error.headers)


async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    first = error.errors()[0]
    if first.get("type") == "json_invalid":
        return error_response(400, "body", f"malformed JSON: {first.get('msg')}")
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else ("." if i else "") + p for i, p in enumerate(location))
    message = first.get("msg", "invalid value")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return error_response(422, field or "body", message)


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    return error_response(error.status_code, None, str(error.detail), getattr(error, "headers", None))


async def unexpected_error(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error on %s", request.url.path)
    return error_response(500, None, f"internal error ({type(error).__name__}); see the server log")


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 before FastAPI parses (or buffers) it."""

    def __init__(self, app, max_bytes: int):  # noqa: ANN001 - any ASGI app
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - the ASGI signature
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        chunks, size = [], 0
        while True:  # read the body ourselves (bounded), then replay it to the app
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._too_large(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send) -> None:  # noqa: ANN001
        response = error_response(413, "body", f"request body over {self.max_bytes} bytes")
        await response(scope, receive, send)
