"""``vaswani serve``: a trained checkpoint behind an HTTP API with request batching, and a web page that shows
the cross-attention of a sentence you type.

    from vaswani.serve import ServeSettings, create_app
    app = create_app("runs/multi30k-cpu", ServeSettings())     # an ASGI app; run it with uvicorn

Needs the ``serve`` extra (``pip install -e '.[serve]'``: FastAPI + uvicorn). Everything here is built on the
core's public API: :class:`vaswani.decoding.Translator`, :func:`vaswani.decoding.search.generate` and
:meth:`vaswani.model.Transformer.cross_attention_weights`.
"""

from vaswani.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]


def create_app(model, settings: ServeSettings | None = None):  # noqa: ANN001, ANN201 - lazy FastAPI import
    """The FastAPI app serving ``model``: a checkpoint, a Translator or a ServedModel (imported lazily so
    ``vaswani --help`` never needs FastAPI)."""
    from vaswani.serve.app import create_app as create  # FastAPI: not for `--help`

    return create(model, settings)
