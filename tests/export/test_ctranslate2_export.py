"""The CTranslate2 export is the same model: float32 greedy outputs equal ours on real sentences, its teacher-forced
log-probs equal ours for every variant CTranslate2 can express, and int8 stays close to float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2", reason="the export tests need ctranslate2: pip install 'vaswani[export]'")

from vaswani.cli import main  # noqa: E402
from vaswani.data.tokenizer import Tokenizer  # noqa: E402
from vaswani.decoding.config import EngineOptions, SearchConfig  # noqa: E402
from vaswani.decoding.ct2_model import token_string  # noqa: E402
from vaswani.decoding.search import generate  # noqa: E402
from vaswani.decoding.translator import Translator  # noqa: E402
from vaswani.errors import VaswaniError  # noqa: E402
from vaswani.export.ctranslate2 import Ct2Translator, export_ctranslate2  # noqa: E402
from vaswani.model.serialization import load_model  # noqa: E402

MAX_OUTPUT = 40  # tokens incl. </s>; CTranslate2's max_decoding_length counts them without </s>
# Our greedy search as the float32 export runs it: fp32 on any CPU ("auto" is bf16 on CPUs with bf16 units).
GREEDY_FP32 = SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=MAX_OUTPUT, precision="fp32")


@pytest.fixture(scope="module")
def exports(trained_checkpoint: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ct2")
    out = {}
    for quantization in ("float32", "int8"):
        out[quantization] = root / quantization
        assert main(["export", "--checkpoint", str(trained_checkpoint), "--format", "ctranslate2",
                     "--quantization", quantization, "--out", str(out[quantization])]) == 0
    return out


def _padded(sources: list[list[int]]) -> torch.Tensor:
    src = torch.zeros(len(sources), max(map(len, sources)) + 1, dtype=torch.long)
    for row, ids in enumerate(sources):
        src[row, : len(ids) + 1] = torch.tensor(ids + [2])
    return src


def _log_prob(model, source: list[int], output: list[int]) -> float:
    """Our model's log P(output </s> | source)."""
    tgt = torch.tensor([[1] + output + [2]])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(_padded([source]), tgt[:, :-1]), dim=-1)
    return log_probs.gather(2, tgt[:, 1:, None]).sum().item()


def test_readme_snippet_translates_like_our_greedy_search(exports: dict[str, Path], trained_checkpoint: Path,
                                                         sentences: list[str]) -> None:
    # The snippet of docs/export.md, with a length limit to match ours:
    translator = Ct2Translator(exports["float32"])
    theirs = translator.translate(sentences + ["  "], beam_size=1, max_decoding_length=MAX_OUTPUT - 1)
    ours = Translator.load(trained_checkpoint, GREEDY_FP32,
                           options=EngineOptions(device="cpu")).translate(sentences + ["  "])
    assert theirs[-1] == ""
    assert theirs == ours


def test_float32_greedy_ids_equal_ours_up_to_exact_ties(exports: dict[str, Path], trained_checkpoint: Path,
                                                        sentences: list[str]) -> None:
    model = load_model(trained_checkpoint).eval()
    translator = Ct2Translator(exports["float32"], intra_threads=1)
    sources = translator.tokenizer.encode_batch(sentences)
    theirs = translator.translate_ids(sources, beam_size=1, max_decoding_length=MAX_OUTPUT - 1)
    ours = [h[0].tokens for h in generate(model, _padded(sources), GREEDY_FP32)]
    differ = [i for i in range(len(ours)) if ours[i] != theirs[i]]
    # A different greedy path is tolerated only where two continuations were tied to within float noise.
    for i in differ:
        assert abs(_log_prob(model, sources[i], ours[i]) - _log_prob(model, sources[i], theirs[i])) < 1e-5
    assert len(differ) <= 1


def test_int8_stays_close_to_float32(exports: dict[str, Path], sentences: list[str]) -> None:
    """The target is BLEU within 0.5 of float32 on test2016 (measured in results/export); here cheaper proxies
    on the float32 model's own greedy outputs: per-token teacher-forced log-prob gaps.

    Two error sources, checked apart: the int8 *weights* (read back with float32 arithmetic) must be nearly
    exact; int8 *arithmetic* also quantizes every activation row on the fly, which on this 64-wide toy model
    costs more (measured ~0.3 nats/token here), so it gets a looser bound.
    """
    float32 = Ct2Translator(exports["float32"], intra_threads=1)
    tokens = float32.tokenizer
    sources = [[token_string(tokens, i) for i in ids] for ids in tokens.encode_batch(sentences)]
    outputs = [r.hypotheses[0] for r in float32.translator.translate_batch(sources, beam_size=1,
                                                                           max_decoding_length=MAX_OUTPUT - 1)]
    exact = float32.translator.score_batch(sources, outputs)

    def mean_gap(compute_type: str) -> float:
        int8 = Ct2Translator(exports["int8"], intra_threads=1, compute_type=compute_type)
        scored = int8.translator.score_batch(sources, outputs)
        gaps = [abs(a - b) for e, q in zip(exact, scored) for a, b in zip(e.log_probs, q.log_probs)]
        return sum(gaps) / len(gaps)

    assert 0 < mean_gap("float32") < 0.05  # the weights really are int8, and close
    assert mean_gap("int8") < 0.6
    # int8 matrices; the float32 position tables (2,048 rows) and norms stay
    assert (exports["int8"] / "model.bin").stat().st_size < 0.6 * (exports["float32"] / "model.bin").stat().st_size


VARIANTS = [dict(), dict(norm="pre"), dict(activation="gelu"), dict(positions="learned"), dict(positions="rope"),
            dict(positions="none"), dict(tie_embeddings="none"), dict(tie_embeddings="decoder-output"),
            dict(scale_embeddings=False), dict(norm="pre", positions="rope", activation="gelu")]


@pytest.mark.parametrize("settings", VARIANTS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "paper")
def test_every_variant_scores_and_decodes_like_ours(tmp_path: Path, random_checkpoint, settings: dict) -> None:
    checkpoint = random_checkpoint(tmp_path / "ckpt", **settings)
    model = load_model(checkpoint).eval()
    translator = Ct2Translator(export_ctranslate2(checkpoint, tmp_path / "ct2"), intra_threads=1)
    generator = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, model.config.vocab_size, (n,), generator=generator).tolist() for n in (5, 11, 3)]
    length = 12  # a random model rarely says </s>: decode exactly `length` tokens on both sides
    theirs = translator.translate_ids(sources, beam_size=1, max_decoding_length=length, min_decoding_length=length)
    config = SearchConfig(beam_size=1, allow_eos=False, max_len_a=0.0, max_len_b=length + 1, precision="fp32")
    ours = [h[0].tokens for h in generate(model, _padded(sources), config)]
    assert theirs == ours
    tokens = Tokenizer.load(checkpoint / "tokenizer.json")
    scored = translator.translator.score_batch([[token_string(tokens, i) for i in s] for s in sources],
                                               [[token_string(tokens, i) for i in o] for o in ours])
    with torch.no_grad():
        tgt = torch.tensor([[1] + o for o in ours])
        log_probs = torch.log_softmax(model(_padded(sources), tgt), dim=-1)[:, :-1]
        reference = log_probs.gather(2, torch.tensor(ours)[..., None])[..., 0]
    assert torch.allclose(torch.tensor([s.log_probs[:-1] for s in scored]), reference, atol=1e-4)


def test_sliding_window_is_refused(tmp_path: Path, random_checkpoint) -> None:
    checkpoint = random_checkpoint(tmp_path / "ckpt", sliding_window=4)
    with pytest.raises(VaswaniError, match="model.sliding_window=4"):
        export_ctranslate2(checkpoint, tmp_path / "ct2")


def test_an_ensemble_exports_its_own_single_model_and_says_so(tiny_checkpoint: Path, tmp_path: Path,
                                                              capsys) -> None:
    import shutil

    from vaswani.decoding.stored_ensemble import member_name, write_stored_ensemble

    stored = Path(shutil.copytree(tiny_checkpoint, tmp_path / "final"))
    for index in range(2):
        shutil.copytree(tiny_checkpoint, stored / member_name(index))
    write_stored_ensemble(stored, [1.0, 1.0])
    assert main(["export", "--checkpoint", str(stored), "--format", "ctranslate2", "--out",
                 str(tmp_path / "ct2")]) == 0
    err = capsys.readouterr().err
    assert f"{stored} is an ensemble of 2, and an export holds one model" in err
    assert f"export a member, such as {stored / 'ensemble' / '0'}" in err
