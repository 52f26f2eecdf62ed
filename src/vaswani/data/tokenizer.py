"""A shared source+target byte-level BPE, trained and run by Hugging Face ``tokenizers``.

Why byte-level: every string can be encoded (no ``<unk>`` for unseen characters such as € or 中) and
``decode(encode(x)) == NFKC(x)`` exactly, including umlauts, punctuation and runs of spaces. A Metaspace
(SentencePiece-style) pre-tokenizer was measured as well: it maps unseen characters to ``<unk>`` and drops a
leading space, so it round-trips fewer WMT lines. The pre-tokenizer is GPT-2's regex split (words with their
leading space, numbers, punctuation runs) without an added prefix space, so nothing has to be stripped again.

Special tokens have fixed ids: ``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3. Encoding never adds them; the
batching code adds ``<s>``/``</s>`` where the model needs them. Tags (``data.train_tags``, such as ``<BT>`` in front
of back-translated sources) are special tokens after those four: one id each, never split, and never what the same
characters in a text encode to.
"""

from __future__ import annotations

import unicodedata
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

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
              show_progress: bool = False, tags: Sequence[str] = ()) -> "Tokenizer":
        """Learn a byte-level BPE of ``vocab_size`` tokens (specials included) from ``texts``; ``show_progress``
        shows the trainer's own bars (counting words, computing the merges). ``tags`` become special tokens after
        the four fixed ones (check_tag's rules)."""
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
            special_tokens=SPECIAL_TOKENS + [tag for tag in dict.fromkeys(tags) if tag],
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

    def tag_id(self, tag: str) -> int:
        """The id of the tag token ``tag``: a special token of this tokenizer that no text encodes to (a tag the BPE
        also learned as an ordinary token would mark every sentence holding that word as tagged)."""
        token_id = self._tok.token_to_id(tag)
        added = self._tok.get_added_tokens_decoder()
        if token_id is None or token_id not in added or not added[token_id].special:
            raise ConfigError(f"tag {tag!r} is not a special token of this tokenizer ({self!r}): a tag must be in "
                              "the tokenizer the data is prepared with (a fine-tuned run takes its parent's); train "
                              "without it, or train the parent with it", field="data.train_tags")
        if self._encoder.encode(self.normalize(tag), add_special_tokens=False).ids == [token_id]:
            raise ConfigError(f"tag {tag!r} is also an ordinary token of the corpus: text holding it would read as "
                              "tagged; choose a tag that cannot occur in text, such as <BT>", field="data.train_tags")
        return token_id

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

    @cached_property
    def word_continuations(self) -> frozenset[int]:
        """The ids of the tokens that continue the word before them: those whose text starts with a word character
        (a letter, digit or ``_``, as regex ``\\w``), a combining mark, or a byte inside a character. A token that
        starts with the byte-level space marker (``Ġ``), a punctuation mark or another space starts a new word, and
        the special tokens (``</s>``) continue nothing."""
        texts = self._tok.decode_batch([[token_id] for token_id in range(self.vocab_size)], skip_special_tokens=True)
        return frozenset(token_id for token_id, text in enumerate(texts) if text and _continues_word(text[0]))

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


def check_tag(tag: str, field: str = "data.train_tags") -> None:
    """Refuse a tag that cannot be a token of its own: empty, holding a space, or one of the fixed special tokens."""
    if not tag or any(char.isspace() for char in tag) or tag != unicodedata.normalize("NFKC", tag):
        raise ConfigError(f"{field}: {tag!r} is not a tag: one token without spaces, in NFKC form, such as <BT>",
                          field=field)
    if tag in SPECIAL_TOKENS:
        specials = ", ".join(SPECIAL_TOKENS)
        raise ConfigError(f"{field}: {tag!r} is one of the tokenizer's own special tokens ({specials}); choose "
                          "another tag, such as <BT>", field=field)


def _continues_word(first: str) -> bool:
    """Whether a token whose text starts with ``first`` is part of the word before it. Byte-level BPE decodes a
    byte inside a multi-byte character to U+FFFD: inside a character is inside a word."""
    return first == "\ufffd" or first == "_" or first.isalnum() or unicodedata.category(first).startswith("M")


def _as_int_list(ids) -> list[int]:
    # Accept lists, numpy arrays and torch tensors (model outputs) alike.
    return ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]
