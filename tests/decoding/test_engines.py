"""The two engines: CTranslate2 gives the torch engine's translations on a trained model, refuses in one line what
it cannot run, converts a checkpoint once (keyed by its files and the quantization, whole even when two processes
start at once), and runs `vaswani translate` without importing torch."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2", reason="the CTranslate2 engine needs ctranslate2: pip install 'vaswani[export]'")

from vaswani.cli import main  # noqa: E402
from vaswani.config import ModelConfig  # noqa: E402
from vaswani.decoding import EngineOptions, SearchConfig, Translator  # noqa: E402
from vaswani.decoding.config import StoredSearch  # noqa: E402
from vaswani.decoding.ct2_model import CONVERSION_KIND, CONVERTED_DIRECTORY, converted_model, weight_parameters  # noqa: E402
from vaswani.decoding.engine import EngineDescription, output_limits  # noqa: E402
from vaswani.errors import ConfigError, VaswaniError, VaswaniWarning
from vaswani.io import MANIFEST_FILE, write_manifest
from vaswani.model.serialization import CHECKPOINT_KIND, load_model, save_model

SRC = Path(__file__).resolve().parents[2] / "src"
TEST2016 = 64  # sentences of test2016 each search translates on both engines


def fp32(search: SearchConfig) -> SearchConfig:
    """The torch engine's search in fp32, for comparisons with CTranslate2's float32 model on the CPU (precision auto
    would compute in bf16 on a CPU with bf16 units)."""
    return dataclasses.replace(search, precision="fp32")

SEARCHES = {
    "greedy": SearchConfig(beam_size=1),
    "beam 4, power 1": SearchConfig(beam_size=4, length_norm="power", alpha=1.0),
    "beam 5, average, 3-best": SearchConfig(beam_size=5, nbest=3, length_norm="average"),
    "beam 4, none, 2-best": SearchConfig(beam_size=4, nbest=2, length_norm="none"),
    "beam 3, power 0.6, penalties": SearchConfig(beam_size=3, length_norm="power", alpha=0.6, repetition_penalty=1.3,
                                                 no_repeat_ngram=2),
}


@pytest.fixture(scope="module")
def test2016(data_dir: Path) -> list[str]:
    from vaswani.data.corpora import load_corpus

    return load_corpus("multi30k", "test2016", data_dir=data_dir).source[:TEST2016]


@pytest.fixture
def checkpoint(trained_checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of the trained checkpoint, for tests that convert it (or change it) on their own."""
    return Path(shutil.copytree(trained_checkpoint, tmp_path / "checkpoint",
                                ignore=shutil.ignore_patterns(CONVERTED_DIRECTORY)))


@pytest.mark.parametrize("name", list(SEARCHES))
def test_ctranslate2_float32_translates_like_the_torch_engine(trained_checkpoint: Path, test2016: list[str],
                                                              name: str) -> None:
    search = SEARCHES[name]
    torch_engine = Translator.load(trained_checkpoint, fp32(search),
                                   options=EngineOptions(device="cpu", engine="torch"))
    ctranslate2 = Translator.load(trained_checkpoint, search,
                                  options=EngineOptions(device="cpu", engine="ctranslate2", threads=1))
    assert ctranslate2.engine.describe().quantization == "float32"
    ours, theirs = torch_engine.translate_nbest(test2016), ctranslate2.translate_nbest(test2016)
    limits = output_limits([len(s) for s in torch_engine.encode(test2016)], torch_engine.config)
    assert [nbest[0].text for nbest in theirs] == [nbest[0].text for nbest in ours]
    for expected, got, limit in zip(ours, theirs, limits):
        assert len(got) == len(expected)
        # Below the best, a hypothesis cut at the length limit is an unfinished beam: which of those fills the
        # n-best list depends on float32 rounding in a long run of near-equal scores, and the engines may differ
        # there (seen only after other tests ran in the same process). Every other hypothesis is the same.
        pairs = [(a, b) for rank, (a, b) in enumerate(zip(expected, got))
                 if rank == 0 or min(a.length, b.length) < limit]
        assert [b.text for _, b in pairs] == [a.text for a, _ in pairs]
        assert [b.score for _, b in pairs] == pytest.approx([a.score for a, _ in pairs], abs=1e-3)
        assert [b.log_prob for _, b in pairs] == pytest.approx([a.log_prob for a, _ in pairs], abs=1e-3)
        assert [b.length for _, b in pairs] == [a.length for a, _ in pairs]
    reached = sum(nbest[0].length >= limit for nbest, limit in zip(ours, limits))
    # The beams end in </s> before their limit, where the engines could part; greedy outputs may reach it (and
    # are the same there too: cut at the limit and scored with </s>).
    assert reached == 0 or search.beam_size == 1


def test_an_output_cut_at_its_limit_is_the_torch_engines(trained_checkpoint: Path, test2016: list[str]) -> None:
    """Each sentence its own limit, in one CTranslate2 call per batch: a greedy output is cut at its own."""
    search = SearchConfig(beam_size=1, max_len_a=0.5, max_len_b=2)
    torch_engine = Translator.load(trained_checkpoint, fp32(search),
                                   options=EngineOptions(device="cpu", engine="torch"))
    ctranslate2 = Translator.load(trained_checkpoint, search,
                                  options=EngineOptions(device="cpu", engine="ctranslate2", threads=1))
    ours, theirs = torch_engine.translate_nbest(test2016), ctranslate2.translate_nbest(test2016)
    assert [n[0].text for n in theirs] == [n[0].text for n in ours]
    assert [n[0].length for n in theirs] == [n[0].length for n in ours]
    assert [n[0].log_prob for n in theirs] == pytest.approx([n[0].log_prob for n in ours], abs=1e-3)
    limits = output_limits([len(s) for s in torch_engine.encode(test2016)], search)
    assert len(set(limits)) > 3 and sum(n[0].length == limit for n, limit in zip(ours, limits)) > len(ours) // 2


def test_output_limits_are_the_torch_searchs_float32_arithmetic() -> None:
    from vaswani.decoding.search import max_output_lengths

    lengths = torch.arange(1, 300)
    for a, b in [(1.5, 10), (0.7, 1), (0.1, 3), (1.1, 7), (2.3, 1), (0.0, 2), (16.0, 4096), (1.3, 0),
                 (0.9, 5), (3.7, 4095), (12.345, 17), (1 / 3, 2)]:
        config = SearchConfig(max_len_a=a, max_len_b=b)
        reference = (a * lengths.float() + b).long().clamp(min=1)  # the tensors' own arithmetic
        assert output_limits(lengths.tolist(), config) == reference.tolist()
        src = torch.ones(len(lengths), 300, dtype=torch.long)
        src[torch.arange(300)[None, :] >= lengths[:, None]] = 0
        assert max_output_lengths(src, None, config).tolist() == reference.tolist()
    learned = ModelConfig.preset("tiny", positions="learned", max_len=20)
    assert max(output_limits([30], SearchConfig(), learned)) == 20


REFUSED = [
    (SearchConfig(beam_size=4, length_norm="gnmt", alpha=0.6), "`search.length_norm` gnmt (alpha 0.6)"),
    (SearchConfig(beam_size=1, precision="bf16"), "`search.precision` bf16"),
    (SearchConfig(beam_size=1, allow_eos=False), "search.allow_eos=False"),
]


@pytest.mark.parametrize("search, named", REFUSED, ids=[named for _, named in REFUSED])
def test_what_ctranslate2_cannot_run_is_refused_in_one_line_naming_it(trained_checkpoint: Path, search: SearchConfig,
                                                                      named: str) -> None:
    with pytest.raises(ConfigError) as error:
        Translator.load(trained_checkpoint, search, options=EngineOptions(device="cpu", engine="ctranslate2"))
    assert named in str(error.value) and "\n" not in str(error.value)


def test_gnmt_is_run_where_it_ranks_nothing_and_a_model_ctranslate2_cannot_express_is_refused(
        trained_checkpoint: Path, random_checkpoint, tmp_path: Path) -> None:
    # greedy search never ranks: GNMT only scores
    greedy = Translator.load(trained_checkpoint, SearchConfig(beam_size=1, length_norm="gnmt", alpha=0.6),
                             options=EngineOptions(device="cpu", engine="ctranslate2"))
    assert greedy.engine.name == "ctranslate2"
    window = random_checkpoint(tmp_path / "window", sliding_window=4)
    with pytest.raises(ConfigError, match="model.sliding_window=4"):
        Translator.load(window, SearchConfig(beam_size=1), options=EngineOptions(device="cpu", engine="ctranslate2"))
    with pytest.raises(ConfigError, match="`compile` compiles the torch engine's decoding step"):
        Translator.load(trained_checkpoint, SearchConfig(beam_size=1),
                        options=EngineOptions(device="cpu", engine="ctranslate2", compile=True))


def test_a_quantization_this_cpu_cannot_compute_is_refused_naming_it(trained_checkpoint: Path) -> None:
    with pytest.raises(ConfigError) as error:
        Translator.load(trained_checkpoint, SearchConfig(beam_size=1),
                        options=EngineOptions(device="cpu", engine="ctranslate2", quantization="bfloat16"))
    assert str(error.value).startswith("`quantization` bfloat16: CTranslate2 cannot compute it on this cpu (it needs "
                                       "a GPU); here it can: ") and error.value.field == "quantization"


def test_auto_takes_ctranslate2_when_it_can_and_else_says_in_one_line_why_not(trained_checkpoint: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all
        power = Translator.load(trained_checkpoint, SearchConfig(beam_size=2, length_norm="power"),
                                options=EngineOptions(device="cpu", engine="auto"))
    assert power.engine.name == "ctranslate2"
    with pytest.warns(VaswaniWarning) as said:
        gnmt = Translator.load(trained_checkpoint, SearchConfig(beam_size=2),
                               options=EngineOptions(device="cpu", engine="auto", quantization="int8"))
    assert gnmt.engine.name == "torch"
    assert [str(warning.message) for warning in said] == [
        "engine auto: torch (`quantization` int8 is not used), because CTranslate2 cannot run `search.length_norm` "
        "gnmt (alpha 0.6): CTranslate2 ranks a beam by log P / |Y|^alpha and has no GNMT penalty; use "
        "`search.length_norm` power (or average, none), or `engine` torch"]


def test_int8_is_a_conversion_of_its_own_computed_in_int8(trained_checkpoint: Path, sentences: list[str]) -> None:
    """(How close int8 comes to float32 is measured where it is chosen: the end of a run, on validation data.)"""
    search = SearchConfig(beam_size=1)
    float32 = Translator.load(trained_checkpoint, search,
                              options=EngineOptions(device="cpu", engine="ctranslate2", threads=1))
    int8 = Translator.load(trained_checkpoint, search,
                           options=EngineOptions(device="cpu", engine="ctranslate2", quantization="int8", threads=1))
    assert int8.engine.describe().quantization == "int8" and int8.engine.translator.compute_type.startswith("int8")
    assert int8.engine.directory.name.startswith("int8-") and float32.engine.directory.name.startswith("float32-")
    # int8 matrices; the position tables and norms stay float32
    assert (int8.engine.directory / "model.bin").stat().st_size < 0.6 * (
        float32.engine.directory / "model.bin").stat().st_size
    assert all(text for text in int8.translate(sentences))


def test_the_conversion_is_made_once_per_weights_and_quantization_and_replaced_when_stale(checkpoint: Path) -> None:
    first = converted_model(checkpoint, "float32")
    assert first.parent == checkpoint / CONVERTED_DIRECTORY and first.name.startswith("float32-")
    made = (first / "model.bin").stat().st_mtime_ns
    assert converted_model(checkpoint, "float32") == first and (first / "model.bin").stat().st_mtime_ns == made
    record = json.loads((first / MANIFEST_FILE).read_text())
    assert record["kind"] == CONVERSION_KIND and {"model.bin", "config.json"} <= set(record["files"])
    details = record["details"]
    assert details["quantization"] == "float32" and first.name.endswith(details["checkpoint_sha256"][:16])
    int8 = converted_model(checkpoint, "int8")
    assert int8 != first and first.is_dir()  # another quantization is another conversion, beside the first

    model = load_model(checkpoint)
    with torch.no_grad():
        model.output.weight.mul_(0.5)  # new weights: the float32 conversion is stale
    save_model(model, checkpoint)
    write_manifest(checkpoint, CHECKPOINT_KIND)  # as a save of the weights writes it
    fresh = converted_model(checkpoint, "float32")
    assert fresh != first and not first.exists() and int8.exists()
    scored = Translator.load(checkpoint, SearchConfig(beam_size=1),
                             options=EngineOptions(device="cpu", engine="ctranslate2"))
    assert scored.engine.directory == fresh
    assert not list((checkpoint / CONVERTED_DIRECTORY).glob(".*"))  # nothing half-built left behind


CONVERT_AND_TRANSLATE = """
import sys
from vaswani.decoding import EngineOptions, SearchConfig, Translator
translator = Translator.load(sys.argv[1], SearchConfig(beam_size=2, length_norm="power"),
                             EngineOptions(engine="ctranslate2", device="cpu", threads=1))
print(translator.engine.directory, translator.translate(["Ein Mann fährt Fahrrad."])[0])
"""


def test_two_processes_converting_at_once_both_get_a_whole_model(checkpoint: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", CONVERT_AND_TRANSLATE, str(checkpoint)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    answers = {stdout.strip() for stdout, _ in outputs}
    assert len(answers) == 1  # the same directory, the same translation
    conversions = [p for p in (checkpoint / CONVERTED_DIRECTORY).iterdir()]
    assert len(conversions) == 1 and (conversions[0] / MANIFEST_FILE).is_file()


def test_translate_on_ctranslate2_never_imports_torch_numpy_or_yaml(checkpoint: Path, tmp_path: Path) -> None:
    """None is needed to translate with a conversion; torch and numpy are each a tenth of a second or more of a
    start-up, yaml (its resolver's regular expressions) a few hundredths."""
    converted_model(checkpoint, "int8")  # converting needs torch; translating with the conversion must not
    StoredSearch.of(SearchConfig(beam_size=2, length_norm="power", alpha=1.0), quantization="int8").write(checkpoint)
    (tmp_path / "in.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.de"), "--output",
            str(tmp_path / "out.en"), "--threads", "1"]
    script = (f"import sys\nfrom vaswani.cli import main\ncode = main({argv!r})\n"
              "print(code, 'torch' in sys.modules, 'numpy' in sys.modules, 'yaml' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["0", "False", "False", "False"], done.stderr
    assert "engine auto" not in done.stderr and "error" not in done.stderr  # (a progress bar only)
    expected = Translator.load(checkpoint, SearchConfig(beam_size=2, length_norm="power"),
                               options=EngineOptions(device="cpu", engine="ctranslate2", quantization="int8"))
    assert (tmp_path / "out.en").read_text(encoding="utf-8").splitlines() == expected.translate(
        ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."])


def test_the_engine_and_quantization_are_chosen_by_search_json_and_the_options(checkpoint: Path, tmp_path: Path,
                                                                               capsys) -> None:
    from vaswani.cli import build_parser
    from vaswani.decoding.commands import translator_from_args

    def engine(*options: str) -> tuple[str, str | None]:
        args = build_parser().parse_args(["translate", "--checkpoint", str(checkpoint), "--device", "cpu", *options])
        description = translator_from_args(args).engine.describe()
        return description.engine, description.quantization

    StoredSearch.of(SearchConfig(beam_size=2, length_norm="power"), quantization="int8").write(checkpoint)
    assert engine() == ("ctranslate2", "int8")
    assert engine("--quantization", "float32") == ("ctranslate2", "float32")
    assert engine("--engine", "torch")[0] == "torch"
    StoredSearch.of(SearchConfig(beam_size=2, length_norm="power"), engine="torch").write(checkpoint)
    assert engine()[0] == "torch" and engine("--engine", "auto")[0] == "ctranslate2"
    (tmp_path / "in.de").write_text("Ein Mann.\n", encoding="utf-8")
    capsys.readouterr()
    code = main(["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.de"), "--quantization",
                 "int8"])
    assert (code, capsys.readouterr().err) == (
        2, "vaswani translate: error: --quantization int8 applies to the ctranslate2 engine; the torch engine computes "
           "in --precision (use --engine ctranslate2 or auto)\n")
    # what `auto` says on the command line, in the flags typed
    code = main(["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.de"), "--engine", "auto",
                 "--quantization", "int8", "--length-norm", "gnmt", "--output", str(tmp_path / "out.en")])
    assert (code, capsys.readouterr().err) == (0, (
        "engine auto: torch (--quantization int8 is not used), because CTranslate2 cannot run --length-norm gnmt "
        "(alpha 0.6): CTranslate2 ranks a beam by log P / |Y|^alpha and has no GNMT penalty; use --length-norm power "
        "(or average, none), or --engine torch\n"))


def test_the_export_is_the_engines_conversion(checkpoint: Path, tmp_path: Path) -> None:
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "ctranslate2", "--quantization", "int8",
                 "--out", str(tmp_path / "exported")]) == 0
    assert not (checkpoint / CONVERTED_DIRECTORY).exists()  # the export writes nothing into its input
    converted = converted_model(checkpoint, "int8")
    for name in ("model.bin", "config.json"):
        assert (tmp_path / "exported" / name).read_bytes() == (converted / name).read_bytes()


def test_parameters_are_counted_from_the_weights_file_alone(trained_checkpoint: Path, random_checkpoint,
                                                            tmp_path: Path) -> None:
    assert weight_parameters(trained_checkpoint) == load_model(trained_checkpoint).num_parameters()
    untied = random_checkpoint(tmp_path / "untied", tie_embeddings="none")
    assert weight_parameters(untied) == load_model(untied).num_parameters()


def test_sources_with_padding_inside_are_left_to_the_torch_engine(trained_checkpoint: Path) -> None:
    translator = Translator.load(trained_checkpoint, SearchConfig(beam_size=1),
                                 options=EngineOptions(device="cpu", engine="ctranslate2"))
    with pytest.raises(VaswaniError, match="cannot mask tokens inside a source"):
        translator.translate_ids_nbest([[5, 0, 6, 2]])


def test_a_bound_search_keeps_the_engine(trained_checkpoint: Path) -> None:
    translator = Translator.load(trained_checkpoint, SearchConfig(beam_size=2, length_norm="power"),
                                 options=EngineOptions(device="cpu", engine="ctranslate2"))
    wider = translator.with_search(dataclasses.replace(translator.config, beam_size=4), batch_size=8, max_tokens=None)
    assert wider.engine is translator.engine and wider.config.beam_size == 4
    with pytest.raises(ConfigError, match="`search.length_norm` gnmt"):
        translator.with_search(dataclasses.replace(translator.config, length_norm="gnmt"), 8, None)


def test_a_random_model_of_every_variant_decodes_alike(random_checkpoint, tmp_path: Path) -> None:
    """Each variant the conversion expresses, searched for a fixed length on both engines."""
    for number, settings in enumerate([dict(norm="pre", positions="rope", activation="gelu"),
                                       dict(positions="learned"), dict(tie_embeddings="none")]):
        checkpoint = random_checkpoint(tmp_path / f"variant{number}", **settings)
        search = SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=9)
        sources = [[5, 17, 40, 2], [9, 2], [33, 8, 8, 8, 8, 8, 2]]
        ours = Translator.load(checkpoint, fp32(search),
                               options=EngineOptions(device="cpu", engine="torch")).translate_ids_nbest(sources)
        theirs = Translator.load(checkpoint, search,
                                 options=EngineOptions(device="cpu", engine="ctranslate2")).translate_ids_nbest(sources)
        assert [n[0].text for n in theirs] == [n[0].text for n in ours], settings


def test_the_device_and_quantization_rules_of_ctranslate2_on_a_gpu(monkeypatch) -> None:
    """What a GPU changes, checked without one: auto picks CUDA when CTranslate2 sees a device, the GPU
    quantizations are accepted there, and a device index past the count is refused."""
    import ctranslate2

    from vaswani.decoding.ct2_engine import check_quantization, resolve_device
    from vaswani.errors import EnvironmentFault

    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    monkeypatch.setattr(ctranslate2, "get_supported_compute_types",
                        lambda device, index=0: {"float32", "float16", "bfloat16", "int8_float16", "int8"}
                        if device == "cuda" else {"float32", "int8"})
    assert resolve_device("auto") == ("cuda", 0) and resolve_device("cpu") == ("cpu", 0)
    assert resolve_device("cuda:0") == ("cuda", 0)
    for quantization in ("float16", "bfloat16", "int8_float16"):
        check_quantization(quantization, "cuda")
    with pytest.raises(EnvironmentFault, match="sees only 1 CUDA device"):
        resolve_device("cuda:1")
    with pytest.raises(ConfigError, match="it needs a GPU"):
        check_quantization("float16", "cpu")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert resolve_device("auto") == ("cpu", 0)
    with pytest.raises(EnvironmentFault, match="CTranslate2 sees no CUDA device"):
        resolve_device("cuda")


@pytest.mark.parametrize("search", [SearchConfig(beam_size=3, length_norm="power"),
                                    SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=4)],
                         ids=["ended by </s>", "cut at its limit"])
def test_ctranslate2s_attention_is_the_torch_models_last_layer_averaged_over_heads(trained_checkpoint: Path,
                                                                                  sentences: list[str],
                                                                                  search: SearchConfig) -> None:
    translator = Translator.load(trained_checkpoint, search,
                                 options=EngineOptions(device="cpu", engine="ctranslate2", threads=1))
    source = translator.encode([sentences[3]])[0]
    best, rows = translator.engine.attention(source, translator.config)
    with torch.no_grad():
        weights = translator.model.cross_attention_weights(torch.tensor([source]),
                                                           torch.tensor([[1, *best.tokens]]))[:, 0]
    assert len(rows) == len(best.tokens) + 1 and len(rows[0]) == len(source)
    torch.testing.assert_close(torch.tensor(rows), weights[-1].mean(dim=0), rtol=0, atol=1e-5)


def test_evaluate_on_each_engine_scores_the_same_and_records_which_ran(trained_checkpoint: Path, sentences: list[str],
                                                                       data_dir: Path, tmp_path: Path) -> None:
    from vaswani.data.corpora import load_corpus

    references = load_corpus("multi30k", "train", data_dir=data_dir).target  # only the first lines are used
    (tmp_path / "src.de").write_text("".join(f"{s}\n" for s in sentences[:16]), encoding="utf-8")
    (tmp_path / "ref.en").write_text("".join(f"{r}\n" for r in references[:16]), encoding="utf-8")
    results = {}
    for engine in ("torch", "ctranslate2"):
        out = tmp_path / engine
        assert main(["evaluate", "--checkpoint", str(trained_checkpoint), "--src", str(tmp_path / "src.de"), "--ref",
                     str(tmp_path / "ref.en"), "--beam", "3", "--length-norm", "power", "--engine", engine,
                     *(["--precision", "fp32"] if engine == "torch" else []),  # CTranslate2's model is float32
                     "--device", "cpu", "--out", str(out), "--json"]) == 0
        results[engine] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["torch"]["engine"]["engine"] == "torch"
    assert (results["ctranslate2"]["engine"]["engine"], results["ctranslate2"]["engine"]["quantization"]) == (
        "ctranslate2", "float32")
    assert results["ctranslate2"]["bleu"] == results["torch"]["bleu"]
    hypotheses = {engine: (tmp_path / engine / "hypotheses.txt").read_text(encoding="utf-8") for engine in results}
    assert hypotheses["ctranslate2"] == hypotheses["torch"]


def test_the_vocabulary_is_read_from_the_conversion_and_is_the_tokenizers(checkpoint: Path, tmp_path: Path) -> None:
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.decoding.ct2_engine import SHARED_VOCABULARY_FILE, stored_vocabulary
    from vaswani.decoding.ct2_model import vocabulary

    search = SearchConfig(beam_size=1)
    engine = Translator.load(checkpoint, search, EngineOptions(engine="ctranslate2", device="cpu")).engine
    expected = vocabulary(Tokenizer.load(checkpoint / "tokenizer.json"), engine.model_config.vocab_size)
    assert engine.vocabulary == expected
    stored = engine.directory / SHARED_VOCABULARY_FILE
    assert json.loads(stored.read_text(encoding="utf-8")) == expected  # what the engine read instead of rebuilding
    assert stored_vocabulary(engine.directory, len(expected)) == expected
    elsewhere = tmp_path / "conversion"
    elsewhere.mkdir()
    (elsewhere / SHARED_VOCABULARY_FILE).write_text(json.dumps(expected[:-1]), encoding="utf-8")
    assert stored_vocabulary(elsewhere, len(expected)) is None  # a list of another length is not trusted
    (elsewhere / SHARED_VOCABULARY_FILE).write_text("[1, 2", encoding="utf-8")
    assert stored_vocabulary(elsewhere, len(expected)) is None and stored_vocabulary(tmp_path, 3) is None


@pytest.mark.parametrize(("description", "line"), [
    (EngineDescription("ctranslate2", "cpu", quantization="int8", threads=2, model="/m"),
     "ctranslate2 int8 on cpu, 2 threads"),
    (EngineDescription("torch", "cuda:0", compiled=True, ensemble=4), "torch on cuda:0, compiled, 4 models"),
    (EngineDescription("torch", "cpu", compiled=False), "torch on cpu"),
])
def test_an_engine_is_summarised_in_one_line_for_a_log(description: EngineDescription, line: str) -> None:
    assert description.summary() == line
