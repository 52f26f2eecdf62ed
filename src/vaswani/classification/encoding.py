"""Texts -> model input: the tokenizer (BPE or words), ``<s> tokens </s>`` truncated to ``max_len``, padded batches.

Both tokenizer kinds share the special ids (pad 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3) and the methods used here,
so everything after :func:`train_tokenizer` / :func:`load_tokenizer` is the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, Sequence

import torch

from vaswani.classification.word_tokenizer import WordTokenizer

TokenizerKind = Literal["bpe", "word"]
TOKENIZER_KINDS: tuple[str, ...] = ("bpe", "word")
TOKENIZER_FILES = {"bpe": "tokenizer.json", "word": "word_tokenizer.json"}


class TextTokenizer(Protocol):
    pad_id: int
    bos_id: int
    eos_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode_batch(self, texts: list[str], max_ids: int | None = None) -> list[list[int]]: ...

    def save(self, path: str | Path) -> None: ...


def _tokenizer_class(kind: str) -> type:
    if kind == "word":
        return WordTokenizer
    if kind == "bpe":
        from vaswani.data.tokenizer import Tokenizer  # the project's BPE (HF tokenizers)

        return Tokenizer
    raise ValueError(f"unknown tokenizer kind {kind!r}; choose from {list(TOKENIZER_KINDS)}")


def train_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, min_frequency: int) -> TextTokenizer:
    return _tokenizer_class(kind).train(list(texts), vocab_size, min_frequency=min_frequency)


def load_tokenizer(kind: str, path: str | Path) -> TextTokenizer:
    return _tokenizer_class(kind).load(path)


def normalize(texts: Sequence[str], lowercase: bool) -> list[str]:
    """Lowercasing before the tokenizer: the byte-level BPE keeps case, so "Fire", "FIRE" and "fire" would be three
    unrelated tokens, each with a third of the training examples. On 6k tweets that costs more than case tells."""
    return [text.lower() for text in texts] if lowercase else list(texts)


def encode_texts(tokenizer: TextTokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """``<s> tokens </s>``, keeping the first ``max_len - 2`` tokens of longer texts (``</s>`` is kept, so the
    model always sees where the text ends). Only those tokens are computed: a text of any length costs bounded
    work."""
    if max_len < 3:
        raise ValueError(f"max_len must leave room for <s>, one token and </s>, got {max_len}")
    return [
        [tokenizer.bos_id, *ids, tokenizer.eos_id]
        for ids in tokenizer.encode_batch(list(texts), max_ids=max_len - 2)
    ]


@dataclass
class TextEncoder:
    """Texts -> id sequences, the same way at training and at prediction time."""

    tokenizer: TextTokenizer
    max_len: int
    lowercase: bool

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        return encode_texts(self.tokenizer, normalize(texts, self.lowercase), self.max_len)


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """(B, L) long tensor, L the longest sequence of this batch (not max_len: short batches stay cheap)."""
    length = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    for row, ids in enumerate(sequences):
        batch[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return batch


__all__ = [
    "TokenizerKind", "TOKENIZER_KINDS", "TOKENIZER_FILES", "TextTokenizer", "train_tokenizer", "load_tokenizer",
    "normalize", "encode_texts", "TextEncoder", "pad_batch",
]
