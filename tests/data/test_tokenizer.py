"""The shared BPE: exact round trip on real text, fixed special ids, stable fingerprint, save/load."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
import torch

from vaswani.data.corpora import load_corpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, DataError


def round_trip_fraction(tokenizer: Tokenizer, lines: list[str]) -> tuple[float, list[str]]:
    decoded = tokenizer.decode_batch(tokenizer.encode_batch(lines))
    bad = [line for line, back in zip(lines, decoded) if back != unicodedata.normalize("NFKC", line)]
    return 1 - len(bad) / len(lines), bad[:3]


def test_round_trip_on_multi30k_train(tokenizer, multi30k_train):
    """20,000 Multi30k train lines the tokenizer was not trained on (pairs 10,000-19,999, both sides)."""
    unseen = slice(10_000, 20_000)
    lines = multi30k_train.source[unseen] + multi30k_train.target[unseen]
    fraction, bad = round_trip_fraction(tokenizer, lines)
    assert fraction >= 0.999, f"round trip on {len(lines)} Multi30k train lines: {fraction:.5f}; e.g. {bad}"


def test_round_trip_on_unseen_wmt_news(tokenizer, data_dir):
    """News text the tokenizer never saw (digits, currencies, quotes, rare names) still comes back exactly."""
    corpus = load_corpus("wmt17", "newstest2017", data_dir=data_dir, download=False)
    lines = corpus.source + corpus.target
    fraction, bad = round_trip_fraction(tokenizer, lines)
    assert fraction >= 0.999, f"round trip on {len(lines)} WMT newstest lines: {fraction:.5f}; e.g. {bad}"


def test_hard_strings_round_trip(tokenizer):
    hard = [
        "  zwei  Leerzeichen ",
        "Größe: 5 €, „Zitat“ — ok?!",
        "tab\there",
        "ﬁ ligature ½ (NFKC turns these into fi and 1⁄2)",
        "中文 😀 £2",
        "literal <s> and </s> and <pad> are text, not control tokens",
    ]
    ids = tokenizer.encode_batch(hard)
    assert tokenizer.decode_batch(ids) == [unicodedata.normalize("NFKC", text) for text in hard]
    assert all(tokenizer.unk_id not in seq and min(seq) > tokenizer.unk_id for seq in ids)


def test_special_ids_and_decode_skips_them(tokenizer):
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert [tokenizer.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    ids = tokenizer.encode("Ein Hund.")
    assert tokenizer.decode([1] + ids + [2, 0, 0]) == "Ein Hund."
    # Model outputs arrive as tensors or arrays.
    assert tokenizer.decode_batch([torch.tensor(ids), np.array(ids)]) == ["Ein Hund.", "Ein Hund."]


def test_encode_batch_equals_the_saved_tokenizer_json(tokenizer, data_dir):
    """encode_batch normalises in Python for speed; the tokenizer.json on its own must give the same ids."""
    corpus = load_corpus("wmt17", "newstest2014", data_dir=data_dir, download=False)
    lines = corpus.source[:1000] + corpus.target[:1000] + ["ﬁ ½ Ⅻ ｆｕｌｌｗｉｄｔｈ"]
    reference = [e.ids for e in tokenizer.backend.encode_batch(lines, add_special_tokens=False)]
    assert tokenizer.encode_batch(lines) == reference
    assert tokenizer.encode(lines[0]) == reference[0]


def test_save_load_keeps_fingerprint_and_ids(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "tokenizer.json")
    loaded = Tokenizer.load(path)
    assert loaded.fingerprint == tokenizer.fingerprint and len(tokenizer.fingerprint) == 64
    assert loaded.vocab_size == tokenizer.vocab_size == 4000
    text = "Zwei Männer spielen Fußball."
    assert loaded.encode(text) == tokenizer.encode(text)


def test_fingerprint_differs_for_another_vocabulary():
    texts = ["ein Hund", "eine Katze", "zwei Hunde"] * 5
    a = Tokenizer.train(texts, vocab_size=270)
    b = Tokenizer.train(texts, vocab_size=265)
    assert a.fingerprint != b.fingerprint
    assert Tokenizer.train(texts, vocab_size=270).fingerprint == a.fingerprint  # training is deterministic


def test_bad_settings_and_files(tmp_path):
    with pytest.raises(ConfigError, match="at least 260"):
        Tokenizer.train(["x"], vocab_size=100)
    with pytest.raises(DataError, match="tokenizer file not found"):
        Tokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="bad.json: not a valid tokenizer.json"):
        Tokenizer.load(tmp_path / "bad.json")


# ---- bounded work: a text is cut by characters before it is encoded ---------------------------------------------

@pytest.fixture(scope="module")
def long_texts(tokenizer, multi30k_train) -> tuple[list[str], list[list[int]]]:
    """Texts far past any bound, and the ids of each whole text: real sentences run together, one endless word,
    runs of spaces, and characters that NFKC composes (Hangul jamo, a letter with two accents) or expands (ﬁ)."""
    texts = [" ".join(multi30k_train.source[:2000]), "Straßenbahnhaltestelle" * 6000, " " * 30_000 + "Hund " * 4000,
             "\u1100\u1161\u11a8" * 35_000, "a\u0308\u0304" * 40_000, "\ufb01" * 100_000, "Ein Hund. " * 12_000]
    return texts, tokenizer.encode_batch(texts)


@pytest.mark.parametrize("max_ids", [1, 7, 64, 1024])
def test_ids_of_a_text_cut_by_characters_equal_those_of_the_whole_text(tokenizer, long_texts, max_ids: int) -> None:
    texts, whole = long_texts
    assert sum(len(text) > tokenizer.chars_for(max_ids) for text in texts) >= 5  # most of them are cut
    assert tokenizer.encode_batch(texts, max_ids=max_ids) == [ids[:max_ids] for ids in whole]


def test_the_encoder_never_sees_more_than_the_bound(tokenizer, monkeypatch) -> None:
    seen = []
    real = tokenizer._encoder.encode_batch
    expected = tokenizer.encode("kurz")

    def recording(texts, **kwargs):  # noqa: ANN001, ANN003 - tokenizers' signature
        seen.extend(len(text) for text in texts)
        return real(texts, **kwargs)

    monkeypatch.setattr(tokenizer, "_encoder", type("Recorder", (), {"encode_batch": staticmethod(recording)})())
    line = "Ein Mann fährt Fahrrad. " * 1_000_000  # 24 MB: encoded whole, this took a minute and gigabytes
    ids = tokenizer.encode_batch([line, "kurz"], max_ids=1024)
    assert len(ids[0]) == 1024 and ids[1] == expected
    assert max(seen) == tokenizer.chars_for(1024) < 200_000


def test_a_large_batch_is_encoded_without_the_second_nfkc_step_and_to_the_same_ids(multi30k_train) -> None:
    """Below STRIPPED_ENCODER_FROM texts the tokenizer encodes as loaded (its own NFKC step finds nothing left to
    do); from there a copy without that step is built once. Both give the same ids, on real text and on text that
    NFKC changes (ligatures, compatibility characters, decomposed accents)."""
    from vaswani.data import tokenizer as module

    texts = multi30k_train.source[:2000] + ["\ufb01nden Ａｂｃ ½ a\u0308\u0304 Straße", "①②③ ㎞ ﹏", "e\u0301té"]
    fresh = Tokenizer.train(multi30k_train.source[:500], vocab_size=400)
    assert fresh._encoder is fresh._tok  # nothing parsed twice at start-up
    as_loaded = fresh.encode_batch(texts)
    assert fresh.encode_batch(texts, max_ids=64) == [ids[:64] for ids in as_loaded]
    assert "longest_token_bytes" not in vars(fresh)  # no text long enough to be cut: the vocabulary was not read
    threshold = module.STRIPPED_ENCODER_FROM
    assert len(texts) < threshold
    module.STRIPPED_ENCODER_FROM = len(texts)
    try:
        stripped = fresh.encode_batch(texts)
    finally:
        module.STRIPPED_ENCODER_FROM = threshold
    assert fresh._encoder is not fresh._tok and fresh._encoder.normalizer is None
    assert stripped == as_loaded and fresh.encode(texts[-3]) == as_loaded[-3]


# Scripts without spaces (Chinese, Japanese, Thai), right to left (Arabic, Hebrew), combining marks (Hindi's vowel
# signs, Thai's tone marks, Vietnamese written decomposed), and others; none is seen when the tokenizer is trained.
SCRIPTS = {
    "zh": "我们今天去公园散步，天气很好。",
    "ja": "東京は日本の首都です。ｶﾀｶﾅも。",
    "th": "ฉันชอบกินข้าวผัดมาก",
    "ar": "ذهب الولد إلى المدرسة صباحاً.",
    "he": "הילד הלך לבית הספר.",
    "hi": "मैं आज बाज़ार जा रहा हूँ।",
    "ko": "나는 오늘 학교에 간다.",
    "ru": "Мальчик читает книгу.",
    "el": "Ο σκύλος τρέχει στο πάρκο.",
    "vi": unicodedata.normalize("NFD", "Tôi đang học tiếng Việt."),
    "mixed": "RTL \u200fעברית\u200f and LTR, a tab\there, two  spaces, ﬁ ligature",
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_round_trips_through_the_normalisation(tokenizer, script: str) -> None:
    """decode(encode(x)) == normalize(x) for scripts the (German/English) tokenizer never saw, and the corpus
    encoder gives the ids the tokenizer gives."""
    from vaswani.data.corpus_encoder import CorpusEncoder

    text = SCRIPTS[script]
    assert tokenizer.decode(tokenizer.encode(text)) == tokenizer.normalize(text)
    assert 3 not in tokenizer.encode(text)  # byte-level: no <unk>
    sentences = [text, f"{text} {text}", text.replace(" ", "  ")]
    ids, lengths = CorpusEncoder(tokenizer).encode(sentences)
    expected = tokenizer.encode_batch(sentences)
    assert lengths.tolist() == [len(row) for row in expected]
    assert ids.tolist() == [i for row in expected for i in row]


def test_a_tokenizer_trained_on_other_scripts_round_trips_them() -> None:
    texts = [text for text in SCRIPTS.values() for _ in range(20)]
    trained = Tokenizer.train(texts, vocab_size=400, min_frequency=2)
    for text in SCRIPTS.values():
        ids = trained.encode(text)
        assert trained.decode(ids) == trained.normalize(text) and len(ids) < len(text.encode())
