"""Encoding a whole corpus with the tokenizer's ids, several times faster than the tokenizer alone: each distinct
word is encoded once and its ids copied wherever it occurs again. Kept apart from tokenizer.py, which translation
loads, so that translating never imports numpy.
"""

from __future__ import annotations

import itertools
import unicodedata
from typing import Sequence

import numpy as np

from vaswani.data.tokenizer import Tokenizer


class CorpusEncoder:
    """Encodes a corpus with the ids :meth:`Tokenizer.encode_batch` gives, several times faster.

    Why the ids can be put together from words: the byte-level pre-tokenizer (GPT-2's pattern) never lets a piece
    run from a non-space character into the space after it, so in a text whose only whitespace is single spaces
    between words, the pieces (and so the BPE ids) are those of the first word followed by those of each later word
    with its leading space. Each distinct word is encoded once, by the tokenizer itself, and its ids are copied
    wherever it occurs again: Zipf's law makes most words of a corpus repeats, and the tokenizer's own cost is mostly
    per call and per piece, not per merge. A text with other whitespace (tabs, runs of spaces) is encoded whole.

    Remembers at most ``max_words`` words (their ids and the words themselves: about 150 bytes each); later new
    words are encoded for the batch they occur in only.
    """

    def __init__(self, tokenizer: Tokenizer, max_words: int = 1_000_000) -> None:
        self.tokenizer = tokenizer
        self.max_words = max_words
        self._first: dict[str, int] = {}  # a text's first word -> its row
        self._later: dict[str, int] = {}  # a later word (without its leading space) -> its row
        self._ids = np.zeros(1 << 16, dtype=np.int32)  # every row's ids back to back
        self._starts = np.zeros(1 << 12, dtype=np.int64)
        self._lengths = np.zeros(1 << 12, dtype=np.int64)
        self._rows = 0
        self._n_ids = 0

    def encode(self, texts: Sequence[str], max_ids: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids of all texts back to back as int32, ids per text), as ``encode_batch(texts, max_ids)`` gives them."""
        tokenizer = self.tokenizer
        if max_ids is not None:
            longest = tokenizer.chars_for(max_ids)
            texts = [text if len(text) <= longest else text[:longest] for text in texts]
        texts = [unicodedata.normalize("NFKC", text) for text in texts]
        # Only single spaces between words: every other whitespace character (tab, no-break space, U+001C, ...) is
        # unprintable to Python, as are a few characters that are no whitespace (controls, format characters such as
        # U+200F): those texts are simply encoded whole.
        whole = [i for i, text in enumerate(texts) if not text.isprintable() or "  " in text]
        words = [text.split(" ") for text in texts]
        for i in whole:
            words[i] = [texts[i]]  # one piece, never remembered: the whole text goes to the tokenizer
        counts = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        flat = list(itertools.chain.from_iterable(words))
        firsts = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=firsts[1:])
        rows = np.fromiter(map(self._later.get, flat, itertools.repeat(-1)), dtype=np.int64, count=len(flat))
        rows[firsts[:-1]] = np.fromiter(map(self._first.get, (w[0] for w in words), itertools.repeat(-1)),
                                        dtype=np.int64, count=len(words))
        rows[firsts[whole]] = -1
        missing = np.flatnonzero(rows < 0)
        remembered = self._add(missing, rows, flat, firsts, whole) if len(missing) else self._rows
        lengths = self._lengths[rows]
        total = int(lengths.sum())
        piece_starts = np.zeros(len(rows), dtype=np.int64)
        np.cumsum(lengths[:-1], out=piece_starts[1:])
        ids = self._ids[np.arange(total, dtype=np.int64) + np.repeat(self._starts[rows] - piece_starts, lengths)]
        per_text = np.add.reduceat(lengths, firsts[:-1]) if len(texts) else np.zeros(0, dtype=np.int64)
        self._n_ids = int(self._starts[remembered]) if remembered < self._rows else self._n_ids
        self._rows = remembered  # the rows of whole texts and of words past max_words served this batch only
        if max_ids is not None and len(per_text) and per_text.max() > max_ids:
            text_starts = np.repeat(np.cumsum(per_text) - per_text, per_text)
            ids = ids[np.arange(total) - text_starts < max_ids]
            per_text = np.minimum(per_text, max_ids)
        return ids, per_text

    def _add(self, missing: np.ndarray, rows: np.ndarray, flat: list[str], firsts: np.ndarray,
             whole: list[int]) -> int:
        """Encode the pieces at positions ``missing`` (each distinct one once), give them rows and fill ``rows``
        with them. Returns the number of rows to keep after this batch: words are remembered while there is room,
        and their rows come before those of the batch's whole texts and of the words there was no room for."""
        whole_set = set(whole)
        text_of = np.searchsorted(firsts, missing, side="right") - 1  # the text each missing piece belongs to
        is_first = firsts[text_of] == missing
        # (0, word): a text's first word; (1, word): a later word; (2, position): a whole text
        positions: dict[tuple[int, str | int], list[int]] = {}
        for position, text, first in zip(missing.tolist(), text_of.tolist(), is_first.tolist()):
            kind = 1 if not first else (2 if text in whole_set else 0)
            key = (kind, flat[position]) if kind != 2 else (2, position)
            positions.setdefault(key, []).append(position)
        room = max(self.max_words - self._rows, 0)
        words = [key for key in positions if key[0] != 2]
        order = words[:room] + [key for key in positions if key[0] == 2] + words[room:]
        pieces = [flat[key[1]] if key[0] == 2 else " " + key[1] if key[0] == 1 else key[1] for key in order]
        encoded = self.tokenizer.encode_text(pieces)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        n_ids = int(lengths.sum())
        self._reserve(self._rows + len(order) + 1, self._n_ids + n_ids)
        self._ids[self._n_ids : self._n_ids + n_ids] = np.fromiter(itertools.chain.from_iterable(encoded),
                                                                   dtype=np.int32, count=n_ids)
        new_rows = slice(self._rows, self._rows + len(order))
        self._lengths[new_rows] = lengths
        self._starts[new_rows] = self._n_ids + np.cumsum(lengths) - lengths
        for offset, key in enumerate(order):
            row = self._rows + offset
            rows[positions[key]] = row
            if offset < room and key[0] != 2:
                (self._first if key[0] == 0 else self._later)[key[1]] = row
        kept = self._rows + min(room, len(words))
        self._rows += len(order)
        self._n_ids += n_ids
        self._starts[self._rows] = self._n_ids  # where the next row starts, for rolling back to any row
        return kept

    def _reserve(self, rows: int, ids: int) -> None:
        if rows > len(self._starts):
            size = max(rows, 2 * len(self._starts))
            self._starts = np.resize(self._starts, size)
            self._lengths = np.resize(self._lengths, size)
        if ids > len(self._ids):
            self._ids = np.resize(self._ids, max(ids, 2 * len(self._ids)))


__all__ = ["CorpusEncoder"]
