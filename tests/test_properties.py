"""Property tests (Hypothesis) of everything a user hands the tool: any ``--set`` value of any declared setting,
any text to translate, any damage to a checkpoint, a corpus or a preset. The outcome is always a result or a
clean VaswaniError, never another exception and never a hang. Examples are few and bounded: seconds in total."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vaswani.config import ModelConfig  # noqa: E402
from vaswani.decoding.config import EngineOptions, SearchConfig  # noqa: E402
from vaswani.errors import ConfigError, VaswaniError  # noqa: E402
from vaswani.training.config import DataConfig, RunConfig, TrainConfig  # noqa: E402
from vaswani.training.presets import apply_settings, load_preset  # noqa: E402

PER_FIELD = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
FEW = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

FIELDS = [(section, f.name) for section, cls in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig))
          for f in dataclasses.fields(cls)]

# What a user might type after `=`: numbers of every kind, words, empty, junk, and YAML-ish spellings.
values = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "none", "null", "true", "false", "nan", "inf", "-inf", "1e400", "0", "-1", "0.5", "1",
                     "(0.9,0.98)", "[1,2,3]", "sdpa", "rope", "cpu", "cuda:0", "auto", "bf16", "noam", "9" * 5000]),
    st.text(max_size=20),
)


@pytest.fixture(scope="module")
def smoke() -> RunConfig:
    return load_preset("smoke")


@pytest.mark.parametrize("section, name", FIELDS, ids=[f"{s}.{n}" for s, n in FIELDS])
@PER_FIELD
@given(value=values)
def test_any_set_value_of_any_setting_is_accepted_or_named(smoke: RunConfig, section: str, name: str,
                                                           value: str) -> None:
    try:
        config = apply_settings(smoke, [f"{section}.{name}={value}"])
    except ConfigError as error:
        assert error.field is not None and error.field.startswith(section), error
        return
    # an accepted value is a valid config: it survives the round trip through the run's config.yaml
    import yaml

    assert RunConfig.from_dict(yaml.safe_load(config.to_yaml())) == config
    setting = getattr(getattr(config, section), name)
    assert not (isinstance(setting, float) and not math.isfinite(setting))


@FAST
@given(beam=st.integers(-3, 6), nbest=st.integers(-3, 6), alpha=st.floats(allow_nan=True, allow_infinity=True),
       penalty=st.floats(allow_nan=True, allow_infinity=True), ngram=st.integers(-3, 5),
       max_len_a=st.floats(allow_nan=True, allow_infinity=True), max_len_b=st.integers(-3, 50))
def test_any_search_setting_is_accepted_or_named(beam, nbest, alpha, penalty, ngram, max_len_a, max_len_b) -> None:
    try:
        config = SearchConfig(beam_size=beam, nbest=nbest, alpha=alpha, repetition_penalty=penalty,
                              no_repeat_ngram=ngram, max_len_a=max_len_a, max_len_b=max_len_b)
    except ConfigError as error:
        assert error.field is not None and error.field.startswith("search."), error
        return
    assert 1 <= config.nbest <= config.beam_size
    assert all(math.isfinite(x) for x in (config.alpha, config.repetition_penalty, config.max_len_a))


def test_every_float_of_the_search_has_a_closed_range() -> None:
    for f in dataclasses.fields(SearchConfig):
        if f.type in ("float", float):
            limit = SearchConfig.LIMITS[f.name]
            assert (limit.ge, limit.gt) != (None, None) and (limit.le, limit.lt) != (None, None), f.name


# Values around and far beyond each range: what a user may type, what float32 cannot hold, and the bounds themselves.
extreme_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                           st.sampled_from([0.0, 1e-300, 1e-45, 1e-38, 0.01, 0.5, 1.0, 5.0, 16.0, 100.0, 1e300]))


def mostly(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """``common`` three times in four, else ``rare``: most examples reach the search, some test the refusal."""
    return st.one_of(common, common, common, rare)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(beam=mostly(st.integers(1, 4), st.integers(-1, 300)), nbest=mostly(st.integers(1, 2), st.integers(0, 9)),
       alpha=mostly(st.floats(0, 5), extreme_floats), penalty=mostly(st.floats(0.01, 100), extreme_floats),
       norm=st.sampled_from(["gnmt", "average", "none"]), ngram=mostly(st.integers(0, 3), st.integers(-2, 9)),
       max_len_a=mostly(st.floats(0, 3), extreme_floats), max_len_b=mostly(st.integers(0, 12), st.integers(-2, 9)))
def test_any_accepted_search_gives_finite_non_empty_output_or_one_line(tiny_checkpoint: Path, tmp_path_factory, capsys,
                                                                      beam, nbest, alpha, penalty, norm, ngram,
                                                                      max_len_a, max_len_b) -> None:
    """Through the command line, with a real model: exit 0 and, for each sentence, the n-best lines with words and a
    finite score; or exit 2 and one line naming the option. Never an empty translation scored -inf or nan."""
    from vaswani.cli import main

    source = tmp_path_factory.mktemp("search") / "in.de"
    source.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde.\n", encoding="utf-8")
    options = {"--beam": beam, "--nbest": nbest, "--alpha": alpha, "--repetition-penalty": penalty,
               "--length-norm": norm, "--no-repeat-ngram": ngram, "--max-len-a": max_len_a, "--max-len-b": max_len_b}
    capsys.readouterr()
    try:
        code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--device", "cpu",
                     *(f"{option}={value}" for option, value in options.items())])
    except SystemExit as exit:  # argparse's usage error: the usage, then one error line
        code = exit.code
    out, err = capsys.readouterr()
    if code != 0:
        errors = [line for line in err.splitlines() if "error:" in line]
        assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
        assert any(option in errors[0] for option in options), err  # names what to change
        return
    if nbest == 1:  # one translation per line; a search that failed would give an empty one (scored -inf)
        assert len(out.splitlines()) == 2 and all(line.strip() for line in out.splitlines()), out
        return
    rows = [line.split(" ||| ") for line in out.splitlines()]  # i ||| translation ||| score
    assert [int(row[0]) for row in rows] == [i for i in range(2) for _ in range(nbest)]
    for _, text, score in rows:
        assert text.strip() and math.isfinite(float(score)), (text, score)


# ---- translation input ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path):
    from vaswani.decoding.translator import Translator

    # greedy and short outputs: an untrained model would otherwise decode to the length limit every time
    return Translator.load(tiny_checkpoint, SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=4),
                           options=EngineOptions(device="cpu"))


texts = st.text(
    alphabet=st.characters(codec="utf-8"),  # every code point UTF-8 can carry: controls, RTL, CJK, emoji, NUL
    max_size=200,
)
lines = st.one_of(
    texts,
    st.sampled_from(["", " ", "\t", "\u00a0\u2003", "\x00", "\x1b[31m", "\ufeff", "<s></s><pad>", "\u202e",
                     "Ein Mann 中文 عربى 🙂", "ü" * 500]),
)


@FEW
@given(batch=st.lists(lines, min_size=1, max_size=6))
def test_any_text_translates_to_one_line_each(translator, batch: list[str]) -> None:
    out = translator.translate(batch)
    assert len(out) == len(batch)
    assert all(isinstance(text, str) for text in out)


def test_a_ten_thousand_token_line_translates(translator) -> None:
    out = translator.translate(["ein " * 10_000, "x"])
    assert len(out) == 2


@FEW
@given(data=st.binary(max_size=300))
def test_any_bytes_on_the_command_line_give_a_result_or_one_clean_line(tiny_checkpoint: Path, tmp_path_factory,
                                                                       capsys, data: bytes) -> None:
    from vaswani.cli import main

    path = tmp_path_factory.mktemp("bytes") / "in.txt"
    path.write_bytes(data)
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(path), "--device", "cpu",
                 "--beam", "1", "--max-len-a", "0", "--max-len-b", "3"])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 2:  # the file's line with the bad bytes (or a gzip header on a file that is not gzip)
        assert len(err.strip().splitlines()) == 1, err
        assert re.search(rf"{re.escape(str(path))}:\d+: invalid UTF-8", err) or "corrupt or truncated gzip" in err


# ---- damaged files --------------------------------------------------------------------------------------------------

def damage(data: bytes, draw_cut: int, flips: list[tuple[int, int]], insert: bytes) -> bytes:
    """Truncate at ``draw_cut`` (fraction of 1000), overwrite some bytes, insert some: the ways files get hurt."""
    out = bytearray(data[: max(0, len(data) * draw_cut // 1000)])
    for position, value in flips:
        if out:
            out[position % len(out)] = value
    middle = len(out) // 2
    return bytes(out[:middle]) + insert + bytes(out[middle:])


damages = dict(cut=st.integers(0, 1000), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                        max_size=4), insert=st.binary(max_size=16))


@FEW
@given(which=st.sampled_from(["model.safetensors", "model.json", "tokenizer.json"]), **damages)
def test_a_damaged_checkpoint_loads_or_is_refused(tiny_checkpoint: Path, tmp_path_factory, which, cut, flips,
                                                  insert) -> None:
    from vaswani.decoding.translator import Translator

    directory = Path(shutil.copytree(tiny_checkpoint, tmp_path_factory.mktemp("damaged") / "ckpt"))
    (directory / which).write_bytes(damage((directory / which).read_bytes(), cut, flips, insert))
    try:
        Translator.load(directory, SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=2),
                        options=EngineOptions(device="cpu"))
    except VaswaniError:
        pass


@pytest.fixture(scope="module")
def trainer_state(tmp_path_factory) -> Path:
    import torch

    from vaswani.evaluation.checkpoint_info import CheckpointMeta
    from vaswani.model import Transformer
    from vaswani.training.checkpoint import TrainerState, save_checkpoint

    root = tmp_path_factory.mktemp("state")
    (root / "tokenizer.json").write_text("{}")
    model = Transformer(ModelConfig.preset("tiny", vocab_size=300))
    # the shapes of a real state: tensors, nested dicts and lists, numbers, strings
    optimizer = {"state": {i: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 4)} for i in range(3)},
                 "param_groups": [{"lr": 1.0, "betas": (0.9, 0.98), "params": [0, 1, 2]}]}
    state = TrainerState(optimizer=optimizer, scheduler={"last_epoch": 3}, scaler={}, progress={"step": 3},
                         rng={"torch": torch.get_rng_state(), "python": [3, list(range(625)), None]},
                         config_yaml="model: {}\n")
    meta = CheckpointMeta(step=3, epoch=0, reason="periodic", best_metric=None)
    return save_checkpoint(root / "checkpoints", "step_0000001", model, root / "tokenizer.json", state, meta)


@FEW
@given(**damages)
def test_a_damaged_trainer_state_loads_or_is_refused(trainer_state: Path, tmp_path_factory, cut, flips,
                                                     insert) -> None:
    from vaswani.training.checkpoint import STATE_FILE, load_trainer_state

    directory = Path(shutil.copytree(trainer_state, tmp_path_factory.mktemp("damaged") / "step_0000001"))
    (directory / STATE_FILE).write_bytes(damage((directory / STATE_FILE).read_bytes(), cut, flips, insert))
    try:
        load_trainer_state(directory)
    except VaswaniError as error:
        assert "weights_only" not in str(error)


@FAST
@given(source=st.binary(max_size=200), target=st.binary(max_size=200), gz=st.booleans())
def test_a_damaged_corpus_loads_or_is_refused(tmp_path_factory, source: bytes, target: bytes, gz: bool) -> None:
    from vaswani.data.corpora import load_parallel_files

    directory = tmp_path_factory.mktemp("corpus")
    suffix = ".gz" if gz else ""
    (directory / f"x.de{suffix}").write_bytes(source)
    (directory / f"x.en{suffix}").write_bytes(target)
    try:
        corpus = load_parallel_files(directory / f"x.de{suffix}", directory / f"x.en{suffix}")
    except VaswaniError:
        return
    assert len(corpus.source) == len(corpus.target)


preset_text = st.one_of(
    st.binary(max_size=200),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["model", "data", "train", "preset", "d_model", "n_heads", "max_steps",
                                      "betas", "lr", "vocab_size", "x"]), inner, max_size=4),
                 max_leaves=12).map(lambda value: json.dumps(value).encode()),  # JSON is YAML
)


@FAST
@given(data=preset_text)
def test_a_damaged_preset_loads_or_is_refused(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("preset") / "preset.yaml"
    path.write_bytes(data)
    try:
        config = load_preset(str(path))
    except ConfigError as error:
        assert str(path) in str(error)
        return
    assert isinstance(config, RunConfig)
