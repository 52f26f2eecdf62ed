"""Which language a sentence is in, by py3langid (an optional extra: ``pip install 'vaswani[langid]'``): a naive
Bayes model over byte n-grams of over a hundred languages, shipped inside the package as arrays (nothing
downloaded, nothing unpickled), pure Python and numpy.

A guess on a few words is often wrong ("Two men" reads as Indonesian), so :class:`LanguageCheck` calls a sentence
foreign only when the model's most likely language is another one *and* the model gives it at least
``min_confidence`` of its probability: a sentence it cannot place is kept.
"""

from __future__ import annotations

from functools import lru_cache

from vaswani.errors import ConfigError

PACKAGE = "py3langid"
INSTALL = "pip install 'vaswani[langid]'"


@lru_cache(maxsize=1)
def _identifier():  # noqa: ANN202 - a py3langid LanguageIdentifier
    """The model, loaded once a process (a few seconds: its arrays are decompressed)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise ConfigError(f"the language rule needs the {PACKAGE} package, which is not installed: {INSTALL}, or "
                          "leave out --language-id", field="language_id") from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def model_language(code: str) -> str:
    """The model's label for a vaswani language code (``pt_BR`` is ``pt``): the code's language part."""
    return code.split("_")[0].lower()


class LanguageCheck:
    """Whether sentences are in one expected language, by the model's confident guesses."""

    def __init__(self, code: str, min_confidence: float, setting: str) -> None:
        self.identifier = _identifier()
        self.expected = model_language(code)
        if self.expected not in self.identifier.labels:
            raise ConfigError(f"{setting}: {PACKAGE} does not know language {code!r}; leave out the language rule "
                              "(--language-id)", field=setting)
        self.min_confidence = min_confidence

    def guess(self, text: str) -> tuple[str, float]:
        """The model's most likely language for ``text`` and its probability."""
        language, probability = self.identifier.classify(text)
        return language, float(probability)

    def is_foreign(self, text: str) -> bool:
        """True when the model is sure enough that ``text`` is in another language than the expected one."""
        language, probability = self.guess(text)
        return language != self.expected and probability >= self.min_confidence


__all__ = ["INSTALL", "LanguageCheck", "model_language"]
