"""A shared source+target byte-level BPE, trained and run by Hugging Face ``tokenizers``.

Why byte-level: every string can be encoded (no ``<unk>`` for unseen characters such as € or 中) and
``decode(encode(x)) == NFKC(x)`` exactly, including umlauts, punctuation and runs of spaces. A Metaspace
(SentencePiece-style) pre-tokenizer was measured as well: it maps unseen characters to ``<unk>`` and drops a
leading space, so it round-trips fewer WMT lines. The pre-tokenizer is GPT-2's regex split (words with their
leading space, numbers, punctuation runs) without an added prefix space, so nothing has to be stripped again.

Special tokens have fixed ids: ``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3. Encoding never adds them; the
batching code adds ``<s>``/``</s>`` where the model needs them.
"""

from __future__ import annotations

import itertools
import unicodedata
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from vaswani.errors import ConfigError, DataError
from vaswani.io import atomic_write_text, bytes_sha256

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3 in this order
N_BYTES = 256
MIN_VOCAB_SIZE = N_BYTES + len(SPECIAL_TOKENS)  # every byte plus the special tokens, before any merge
MAX_VOCAB_SIZE = 1_000_000  # far past any translation vocabulary; the BPE trainer's own limit is a 32-bit count


# Texts from which one encode_batch call builds the encoder without the NFKC step (see Tokenizer.__init__).
STRIPPED_ENCODER_FROM = 4096


def _tokenizers():
    import tokenizers  # imported lazily: `vaswani --help` should not pay for it

    return tokenizers


class Tokenizer:
    """Wrapper around a ``tokenizers.Tokenizer`` with the project's conventions (ids, no specials, NFKC)."""

    def __init__(self, hf_tokenizer) -> None:
        self._tok = hf_tokenizer
        # Text that happens to contain "<s>" or "</s>" must be encoded as ordinary characters, never as the
        # control tokens (this flag is not saved in tokenizer.json, so it is set on every construction).
        self._tok.encode_special_tokens = True
        # What encode_batch calls. Python's unicodedata normalises (NFKC) every text first, so the tokenizer's own
        # NFKC step finds nothing left to do; it still costs ~7 µs a sentence (the Rust normalizer tracks character
        # alignments we never use), about 12% of all encoding time. A copy without that step pays for itself past
        # STRIPPED_ENCODER_FROM texts: building it parses the vocabulary and merges again, tens of milliseconds that
        # every start-up of `vaswani translate` would otherwise pay. Either encoder gives the same ids.
        self._encoder = self._tok
        for expected_id, token in enumerate(SPECIAL_TOKENS):
            if self._tok.token_to_id(token) != expected_id:
                raise DataError(
                    f"tokenizer has {token!r} at id {self._tok.token_to_id(token)}, expected {expected_id}; "
                    "it was not trained by vaswani (special tokens must be <pad>=0 <s>=1 </s>=2 <unk>=3)"
                )

    # ------------------------------------------------------------------------------------------ creation

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 50_000, min_frequency: int = 2,
              show_progress: bool = False) -> "Tokenizer":
        """Learn a byte-level BPE of ``vocab_size`` tokens (specials included) from ``texts``; ``show_progress``
        shows the trainer's own bars (counting words, computing the merges)."""
        tk = _tokenizers()
        if vocab_size < MIN_VOCAB_SIZE:
            raise ConfigError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE}")
        if vocab_size > MAX_VOCAB_SIZE:
            raise ConfigError(f"vocab_size={vocab_size} is too large: at most {MAX_VOCAB_SIZE:,}")
        hf = tk.Tokenizer(tk.models.BPE(unk_token=UNK))
        hf.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: nothing is ever <unk>
            show_progress=show_progress,
        )
        # The trainer counts words of text normalised here (Python's NFKC is ~30x cheaper than the Rust normalizer,
        # which tracks alignments that training never uses); the saved tokenizer normalises its input itself.
        hf.train_from_iterator((unicodedata.normalize("NFKC", text) for text in texts), trainer)
        hf.normalizer = tk.normalizers.NFKC()
        return cls(hf)

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: tokenizer file not found")
        try:
            hf = _tokenizers().Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception for malformed JSON
            raise DataError(f"{path}: not a valid tokenizer.json ({error})") from None
        return cls(hf)

    @classmethod
    def from_str(cls, json_text: str) -> "Tokenizer":
        return cls(_tokenizers().Tokenizer.from_str(json_text))

    def save(self, path: str | Path) -> Path:
        """Write tokenizer.json atomically (a crash never leaves half a file that a later run would load)."""
        atomic_write_text(path, self.to_str())
        return Path(path)

    def to_str(self) -> str:
        return self._tok.to_str()

    # ---------------------------------------------------------------------------------------- properties

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    @property
    def unk_id(self) -> int:
        return 3

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the serialized tokenizer: identical for the same vocabulary, merges and settings."""
        return bytes_sha256(self.to_str().encode("utf-8"))

    @property
    def backend(self):
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    # ---------------------------------------------------------------------------------- encode / decode

    def encode_batch(self, texts: Sequence[str], max_ids: int | None = None) -> list[list[int]]:
        """Token ids of each text, without special tokens (the Rust encoder runs on all cores). With ``max_ids``, at
        most the first ``max_ids`` ids of each text, and a text longer than :meth:`chars_for` that many ids is cut
        by characters *before* it is normalised and encoded: the work per text is bounded whatever its length (a
        20 MB line costs what a 100 KB one does), and the ids kept are the ones the whole text would give."""
        # Only a text longer than chars_for's bound with one-byte tokens can be cut: below it, the vocabulary (whose
        # longest token takes a pass over all of it to find) is never read.
        if max_ids is not None and max(map(len, texts), default=0) > self.chars_for(max_ids, token_bytes=1):
            longest = self.chars_for(max_ids)
            texts = [text if len(text) <= longest else text[:longest] for text in texts]
        ids = self.encode_text([self.normalize(text) for text in texts])
        return ids if max_ids is None else [row[:max_ids] for row in ids]

    def _stripped_encoder(self):  # noqa: ANN202 - a tokenizers.Tokenizer
        encoder = _tokenizers().Tokenizer.from_str(self._tok.to_str())
        encoder.normalizer = None
        encoder.encode_special_tokens = True
        return encoder

    def encode(self, text: str) -> list[int]:
        return self._encoder.encode(self.normalize(text), add_special_tokens=False).ids

    @staticmethod
    def normalize(text: str) -> str:
        """What the tokenizer makes of ``text`` before splitting it (NFKC), so ``decode(encode(x)) == normalize(x)``
        for text in any script."""
        return unicodedata.normalize("NFKC", text)

    def encode_text(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of already normalised texts, computed by the Rust encoder (on every core)."""
        if len(texts) >= STRIPPED_ENCODER_FROM and self._encoder is self._tok:
            self._encoder = self._stripped_encoder()
        return [encoding.ids for encoding in self._encoder.encode_batch(list(texts), add_special_tokens=False)]

    @cached_property
    def longest_token_bytes(self) -> int:
        """The most bytes of text one token covers (byte-level BPE writes each byte as one character)."""
        specials = set(SPECIAL_TOKENS)
        return max((len(token) for token in self._tok.get_vocab(with_added_tokens=False) if token not in specials),
                   default=1)

    def chars_for(self, max_ids: int, token_bytes: int | None = None) -> int:
        """A prefix length, in characters, past which the first ``max_ids`` ids of any text cannot depend on the
        rest: ``max_ids`` tokens cover at most ``max_ids × longest_token_bytes`` bytes of normalised text, each of
        those bytes comes from at most 3 characters of the original (NFKC composes at most 3 characters into one),
        and a cut changes only the tokens of the word it falls in. Twice that keeps the cut far from the kept ids.
        ``token_bytes``: the bound for tokens of at most that many bytes (default: this vocabulary's longest)."""
        return 6 * max_ids * (token_bytes or self.longest_token_bytes) + 64

    def decode_batch(self, sequences: Sequence[Sequence[int]]) -> list[str]:
        """Text of each id sequence; special tokens (padding, <s>, </s>) are skipped, not treated as ends."""
        return self._tok.decode_batch([_as_int_list(ids) for ids in sequences], skip_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(_as_int_list(ids), skip_special_tokens=True)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"


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


def _as_int_list(ids) -> list[int]:
    # Accept lists, numpy arrays and torch tensors (model outputs) alike.
    return ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]
