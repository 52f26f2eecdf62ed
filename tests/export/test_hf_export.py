"""The Hugging Face export is the same model: MarianMT's logits equal ours, and `generate` finds the same outputs.

Decoding semantics compared (read from decoding/search.py and transformers' beam search):
- greedy: identical rules; both force </s> as the last token allowed by the length limit.
- the length limit: `generate` scores its forced </s> as log-prob 0, we keep </s>'s real log-prob, so beam
  hypotheses cut at the limit rank differently; beam outputs are compared where neither side was cut.
- beam: both keep 2k candidates per step and let a </s> among the top k end a hypothesis, and both score a
  finished hypothesis by log P / |Y|^p with |Y| counting </s>: our length_norm=average is length_penalty=1.0,
  length_norm=none is length_penalty=0.0. Our default GNMT penalty ((5+|Y|)/6)^α has no `generate` counterpart.
  We stop a sentence once k hypotheses finished (early_stopping=True) or when no live beam can still win; the
  second rule never changes the best hypothesis, so the 1-best outputs must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the export tests need transformers: pip install 'vaswani[export]'")

import transformers  # noqa: E402
from transformers import AutoTokenizer, MarianMTModel, pipeline  # noqa: E402

from vaswani.cli import main  # noqa: E402
from vaswani.data.tokenizer import Tokenizer  # noqa: E402
from vaswani.decoding.config import EngineOptions, SearchConfig  # noqa: E402
from vaswani.decoding.search import generate  # noqa: E402
from vaswani.decoding.translator import Translator  # noqa: E402
from vaswani.errors import VaswaniError  # noqa: E402
from vaswani.export.hf import export_hf  # noqa: E402
from vaswani.model.serialization import load_model  # noqa: E402

MAX_OUTPUT = 40  # tokens incl. </s>, the same limit for every sentence on both sides


@pytest.fixture(scope="module")
def exported(trained_checkpoint: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "model"
    assert main(["export", "--checkpoint", str(trained_checkpoint), "--format", "hf", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def loaded(exported: Path):
    return MarianMTModel.from_pretrained(exported).eval(), AutoTokenizer.from_pretrained(exported)


def _sources(tokenizer: Tokenizer, sentences: list[str]) -> torch.Tensor:
    ids = [seq + [tokenizer.eos_id] for seq in tokenizer.encode_batch(sentences)]
    src = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for row, seq in enumerate(ids):
        src[row, : len(seq)] = torch.tensor(seq)
    return src


def test_tokenizer_gives_our_ids_and_text(trained_checkpoint: Path, loaded, sentences: list[str]) -> None:
    _, hf_tokenizer = loaded
    ours = Tokenizer.load(trained_checkpoint / "tokenizer.json")
    batch = hf_tokenizer(sentences + ["Ｆｕｌｌwidth <s> text"], padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], _sources(ours, sentences + ["Ｆｕｌｌwidth <s> text"]))  # NFKC, no specials
    ids = ours.encode_batch(sentences)
    assert hf_tokenizer.batch_decode(ids, skip_special_tokens=True) == ours.decode_batch(ids)
    assert (hf_tokenizer.pad_token_id, hf_tokenizer.eos_token_id, hf_tokenizer.unk_token_id) == (0, 2, 3)


def test_logits_equal_ours_on_real_sentences(trained_checkpoint: Path, loaded, sentences: list[str]) -> None:
    hf_model, _ = loaded
    model = load_model(trained_checkpoint).eval()
    tokenizer = Tokenizer.load(trained_checkpoint / "tokenizer.json")
    src = _sources(tokenizer, sentences)  # padded: the source mask matters
    hypotheses = generate(model, src, SearchConfig(beam_size=1, precision="fp32"))
    width = max(len(h[0].tokens) for h in hypotheses) + 1
    tgt = torch.zeros(len(sentences), width, dtype=torch.long)
    for row, nbest in enumerate(hypotheses):
        tgt[row, : len(nbest[0].tokens) + 1] = torch.tensor([1] + nbest[0].tokens)
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = hf_model(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    real = tgt != 0
    real[:, 0] = True
    assert (ours - theirs)[real].abs().max().item() < 1e-4


def _hf_generate(hf_model, src: torch.Tensor, **settings) -> list[list[int]]:
    with torch.no_grad():
        out = hf_model.generate(input_ids=src, attention_mask=src != 0, max_length=MAX_OUTPUT + 1, do_sample=False,
                                **settings)
    rows = [row[1:].tolist() for row in out]  # drop the decoder start token
    return [row[: row.index(2)] if 2 in row else row for row in rows]  # up to </s> (then padding)


@pytest.mark.parametrize("beam, length_norm, length_penalty", [(1, "none", 1.0), (4, "average", 1.0),
                                                              (4, "none", 0.0)])
def test_generate_matches_our_search(trained_checkpoint: Path, loaded, sentences: list[str], beam: int,
                                     length_norm: str, length_penalty: float) -> None:
    hf_model, _ = loaded
    model = load_model(trained_checkpoint).eval()
    src = _sources(Tokenizer.load(trained_checkpoint / "tokenizer.json"), sentences)
    config = SearchConfig(beam_size=beam, length_norm=length_norm, max_len_a=0.0, max_len_b=MAX_OUTPUT,
                          precision="fp32")
    ours = [nbest[0].tokens for nbest in generate(model, src, config)]
    theirs = _hf_generate(hf_model, src, num_beams=beam, length_penalty=length_penalty, early_stopping=True)
    # At the length limit both force </s>, but `generate` gives the forced token log-prob 0 where we keep its
    # real log-prob, so hypotheses cut there are scored differently; compare outputs that ended on their own.
    natural = [i for i, (a, b) in enumerate(zip(ours, theirs)) if max(len(a), len(b)) + 1 < MAX_OUTPUT]
    assert len(natural) >= 0.75 * len(ours)
    assert [theirs[i] for i in natural] == [ours[i] for i in natural]
    if beam == 1:  # greedy never compares scores: every output agrees, cut or not
        assert theirs == ours


@pytest.mark.skipif(int(transformers.__version__.split(".")[0]) >= 5,
                    reason="transformers 5 removed the translation pipeline (generate is tested above)")
def test_translation_pipeline_uses_the_export(exported: Path, trained_checkpoint: Path, sentences: list[str]) -> None:
    translate = pipeline("translation", model=str(exported), device="cpu")
    theirs = [out["translation_text"] for out in translate(sentences[:6], max_length=MAX_OUTPUT + 1)]
    # The export's generation_config: beam 4, length_penalty 1.0 (= our length_norm=average).
    config = SearchConfig(beam_size=4, length_norm="average", max_len_a=0.0, max_len_b=MAX_OUTPUT, precision="fp32")
    assert theirs == Translator.load(trained_checkpoint, config,
                                     options=EngineOptions(device="cpu")).translate(sentences[:6])


@pytest.mark.parametrize("settings", [dict(tie_embeddings="none"), dict(tie_embeddings="decoder-output"),
                                      dict(activation="gelu", scale_embeddings=False)])
def test_every_marian_variant_round_trips(tmp_path: Path, random_checkpoint, sentences: list[str],
                                          settings: dict) -> None:
    checkpoint = random_checkpoint(tmp_path / "ckpt", **settings)
    hf_model = MarianMTModel.from_pretrained(export_hf(checkpoint, tmp_path / "hf")).eval()
    model = load_model(checkpoint).eval()
    src = _sources(Tokenizer.load(checkpoint / "tokenizer.json"), sentences[:6])
    tgt = torch.randint(4, model.config.vocab_size, (6, 9))
    tgt[:, 0] = 1
    with torch.no_grad():
        difference = model(src, tgt) - hf_model(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    assert difference.abs().max().item() < 1e-4


@pytest.mark.parametrize("settings, named", [(dict(norm="pre"), "model.norm=pre"),
                                             (dict(positions="rope"), "model.positions=rope"),
                                             (dict(positions="learned"), "model.positions=learned"),
                                             (dict(sliding_window=4), "model.sliding_window=4")])
def test_unexpressible_variants_are_refused(tmp_path: Path, random_checkpoint, settings: dict, named: str) -> None:
    checkpoint = random_checkpoint(tmp_path / "ckpt", **settings)
    with pytest.raises(VaswaniError, match=rf"{named}.*--format ctranslate2"):
        export_hf(checkpoint, tmp_path / "hf")


def test_cli_replaces_only_an_earlier_export_and_only_with_force(tmp_path: Path, trained_checkpoint: Path,
                                                                 capsys) -> None:
    export = ["export", "--checkpoint", str(trained_checkpoint), "--format", "hf", "--out"]
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):  # a folder of the user's is never replaced
        capsys.readouterr()
        assert main([*export, str(taken), *force]) == 2
        assert "not empty and was not written by `vaswani export`" in capsys.readouterr().err
        assert (taken / "notes.txt").read_text() == "mine"
    out = tmp_path / "exported"
    assert main([*export, str(out)]) == 0
    (out / "notes.txt").write_text("beside the export")
    capsys.readouterr()
    assert main([*export, str(out)]) == 2
    assert "holds an earlier export of `vaswani export`; pass --force" in capsys.readouterr().err
    assert main([*export, str(out), "--force"]) == 0
    assert (out / "config.json").is_file() and not (out / "notes.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "taken"]  # no staging directory left
