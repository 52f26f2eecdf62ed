"""The simple word tokenizer: lowercase, split into words and punctuation marks with a regex, map words seen at
least ``min_frequency`` times in the training texts to ids and everything else to ``<unk>``.

It is the baseline for the BPE tokenizer and has the same interface (``train``, ``save``, ``load``,
``encode_batch``, ``pad_id`` …) and the same special ids, so the classifier never needs to know which one it got.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Iterable

from vaswani.errors import DataError
from vaswani.io import atomic_write_bytes, read_json

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, as in the project's BPE tokenizer
# A word (letters, digits, underscore; "don't" stays one word) or a single punctuation mark such as ! ? # @.
WORD_PATTERN = r"\w+(?:'\w+)*|[^\w\s]"
_WORDS = re.compile(WORD_PATTERN)


def split_words(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


class WordTokenizer:
    kind = "word"

    def __init__(self, vocab: list[str]):
        if vocab[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"the vocabulary must start with {SPECIALS}")
        self.vocab = vocab
        self.ids = {word: i for i, word in enumerate(vocab)}

    # ---- the shared tokenizer interface ------------------------------------------------------------------
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> "WordTokenizer":
        """Keep the ``vocab_size - 4`` most frequent words seen at least ``min_frequency`` times."""
        counts = Counter(word for text in texts for word in split_words(text))
        frequent = [w for w, n in counts.items() if n >= min_frequency and w not in SPECIALS]
        frequent.sort(key=lambda w: (-counts[w], w))  # ties broken alphabetically: same texts, same ids
        return cls(SPECIALS + frequent[: max(vocab_size - len(SPECIALS), 0)])

    def encode_batch(self, texts: list[str], max_ids: int | None = None) -> list[list[int]]:
        """The ids of each text's words: at most the first ``max_ids``, found one at a time, so no list of every word
        of an enormous text is ever made."""
        return [[self.ids.get(match.group(), self.unk_id)
                 for match in itertools.islice(_WORDS.finditer(text.lower()), max_ids)] for text in texts]

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return [" ".join(self.vocab[i] for i in ids if i >= len(SPECIALS) or i == self.unk_id) for ids in batch]

    def save(self, path: str | Path) -> None:
        payload = {"kind": self.kind, "lowercase": True, "pattern": WORD_PATTERN, "vocab": self.vocab}
        atomic_write_bytes(Path(path), json.dumps(payload, ensure_ascii=False, indent=0).encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> "WordTokenizer":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: word tokenizer file not found")
        payload = read_json(path, "word tokenizer")
        vocab = payload.get("vocab") if isinstance(payload, dict) else None
        if not isinstance(vocab, list) or not all(isinstance(word, str) for word in vocab) \
                or vocab[: len(SPECIALS)] != SPECIALS or len(set(vocab)) != len(vocab):
            raise DataError(f"{path}: not a word tokenizer file (\"vocab\" must list the special tokens "
                            f"{SPECIALS} and then distinct words)")
        if payload.get("pattern") != WORD_PATTERN:
            raise DataError(f"{path}: written with a different word pattern; retrain the classifier")
        return cls(vocab)


__all__ = ["WordTokenizer", "SPECIALS", "WORD_PATTERN", "split_words"]
