"""vaswani: a Transformer encoder-decoder written from scratch, for German-English translation."""

from vaswani.config import MODEL_PRESETS, ModelConfig
from vaswani.errors import ConfigError, DataError, VaswaniError

__version__ = "0.1.0"

__all__ = ["ModelConfig", "MODEL_PRESETS", "ConfigError", "DataError", "VaswaniError", "Transformer", "__version__"]


def __getattr__(name: str):
    # Importing torch takes a second; only pay for it when the model is asked for.
    if name == "Transformer":
        from vaswani.model import Transformer  # imports torch

        return Transformer
    raise AttributeError(f"module 'vaswani' has no attribute {name!r}")
