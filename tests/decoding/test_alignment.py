"""Word alignments: subwords map to words, each target subword aligns to the source subword the penultimate
decoder layer attends to most, and `translate --alignments` prints Pharaoh pairs on either engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vaswani.cli import main
from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.decoding.alignment import pharaoh, word_indices

SOURCE, PREFIX = "Zwei Hunde spielen", "play dogs two"  # known alignment: reversed word order


def test_subwords_starting_with_a_space_start_words() -> None:
    assert word_indices(["Zw", "ei", " Hund", "e", " spielen", " ", "x"]) == [0, 0, 1, 1, 2, 3, 3]
    assert word_indices([" leading", " space"]) == [0, 1]


def test_pharaoh_pairs_are_source_target_sorted_by_target_and_stop_at_the_texts_words() -> None:
    attention = torch.tensor([[0.1, 0.8, 0.1], [0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.0, 0.1, 0.9]])
    assert pharaoh(attention, [0, 1, 1], [0, 0, 1, 2]) == "0-0 1-0 0-1 1-2"
    assert pharaoh(attention, [0, 1, 1], [0, 0, 1, 2], target_count=2) == "0-0 1-0 0-1"
    assert pharaoh(torch.zeros(0, 3), [0, 1, 1], []) == ""


def _hand_set_attention(translator: Translator, layer_map, other_map):
    """A cross_attention_weights whose alignment layer sends target subword t to the first source subword of
    source word layer_map(word of t), and every other layer to other_map's: the attention set by hand."""
    tokenizer = translator.tokenizer
    real = translator.model.cross_attention_weights

    def weights(src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(real(src, tgt_in))  # (L, B, H, T, S)
        for row in range(src.size(0)):
            source = [i for i in src[row].tolist() if i != translator.config.pad_id][:-1]
            target = [i for i in tgt_in[row, 1:].tolist() if i != translator.config.pad_id]
            source_words = word_indices([tokenizer.decode([i]) for i in source])
            target_words = word_indices([tokenizer.decode([i]) for i in target])
            for layer in range(out.size(0)):
                mapping = layer_map if layer == out.size(0) - 2 else other_map  # the penultimate
                for t, word in enumerate(target_words):
                    out[layer, row, :, t, source_words.index(mapping(word, max(source_words)))] = 1.0
        return out

    return weights


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_the_alignment_is_read_from_the_penultimate_layer(checkpoint: Path, monkeypatch, engine: str) -> None:
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    probe = Translator.load(checkpoint, SearchConfig(beam_size=1),
                            EngineOptions(engine="torch", device="cpu"))
    length = len(probe.tokenizer.encode(PREFIX)) + 1  # the output is the prefix and </s>
    translator = Translator.load(checkpoint, SearchConfig(beam_size=1, max_len_a=0, max_len_b=length),
                                 EngineOptions(engine=engine, device="cpu"))
    reverse, identity = (lambda word, last: last - word), (lambda word, last: word)
    monkeypatch.setattr(translator.model, "cross_attention_weights",
                        _hand_set_attention(translator, reverse, identity))
    best = translator.translate_nbest([SOURCE], prefixes=[PREFIX], alignments=True)[0][0]
    assert best.text == PREFIX
    assert best.alignment == "2-0 1-1 0-2"
    assert translator.translate_nbest([SOURCE], prefixes=[PREFIX])[0][0].alignment is None  # not asked for


def test_translate_alignments_prints_pharaoh_pairs_after_the_translation(tiny_checkpoint: Path,
                                                                         source_file: Path, capsys) -> None:
    common = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source_file), "--engine",
              "torch", "--device", "cpu", "--max-len-a", "0", "--max-len-b", "8", "--alignments"]
    assert main([*common, "--beam", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        text, pairs = line.rsplit(" ||| ", 1)
        for pair in pairs.split():
            i, j = map(int, pair.split("-"))
            assert 0 <= j < len(text.split()) and i >= 0
    assert main([*common, "--beam", "2", "--nbest", "2"]) == 0
    assert all(line.count(" ||| ") == 3 for line in capsys.readouterr().out.splitlines())
