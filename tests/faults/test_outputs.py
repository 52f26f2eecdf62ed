"""No output reaches an input, whatever the flags: every writing command with its output at its own input, inside
it, at a run, at the run's ``checkpoints/``, at a link, at a checkpoint and at an evaluation, with and without
``--force``. Each case asserts exit 2, one error line naming the destination, and the whole tree unchanged (the
bytes of every file, every link and folder, hidden ones such as a run's ``.lock`` included).

The destinations are refused before any work, so no case trains, converts or translates: the suite shares one
workspace and stays fast."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from vaswani.io import write_manifest

SEARCH = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "4", "--device", "cpu"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_checkpoint: Path) -> Path:
    """A run (manifest, config, metrics, checkpoints/step_0000002 with best and last pointing to it), an
    evaluation, a classifier, a corpus file pair and a CSV: what the writers read, all in one folder."""
    from vaswani.classification.checkpoint import CLASSIFIER_KIND, ClassifierInfo, save_classifier
    from vaswani.classification.model import TransformerClassifier
    from vaswani.classification.word_tokenizer import WordTokenizer
    from vaswani.config import ModelConfig
    from vaswani.training.presets import load_preset

    root = tmp_path_factory.mktemp("outputs")
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    write_manifest(run, "run", files=[])
    (run / "config.yaml").write_text(load_preset("smoke").to_yaml())
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "tokens_per_s": 100.0}\n')
    shutil.copytree(tiny_checkpoint, run / "checkpoints" / "step_0000002")
    for link in ("best", "last"):
        os.symlink("step_0000002", run / "checkpoints" / link)

    evaluation = root / "evaluation"
    evaluation.mkdir()
    (evaluation / "results.json").write_text('{"bleu": 1.0}\n')
    write_manifest(evaluation, "evaluation", writer="evaluate")

    tokenizer = WordTokenizer.train(["fire in the forest", "a sunny day at the beach"] * 3, vocab_size=40,
                                    min_frequency=1)
    config = ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_len=32, dropout=0.0)
    classifier = root / "classifier"
    save_classifier(classifier, TransformerClassifier(config, 2, "mean"), tokenizer,
                    ClassifierInfo(config, ["0", "1"], "mean", "word", 32))
    write_manifest(classifier, CLASSIFIER_KIND, writer="classify train")

    (root / "in.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n", encoding="utf-8")
    (root / "ref.en").write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    (root / "texts.csv").write_text("text\nfire in the forest\n", encoding="utf-8")
    return root


# Each writer: how its command line reads with the output at DEST, the input its "at the input" and "inside the
# input" cases aim at, and whether it has a --force.
Writer = tuple[Callable[[Path, Path], list[str]], str, bool]
WRITERS: dict[str, Writer] = {
    "evaluate": (lambda w, out: ["evaluate", "--checkpoint", w / "run", "--src", w / "in.de", "--ref", w / "ref.en",
                                 "--out", out, *SEARCH], "run", True),
    "export": (lambda w, out: ["export", "--checkpoint", w / "run", "--format", "hf", "--out", out], "run", True),
    "average": (lambda w, out: ["average", "--run", w / "run", "--last", "1", "--out", out], "run", True),
    "compare": (lambda w, out: ["compare", w / "evaluation", "--out", out], "evaluation", True),
    "translate": (lambda w, out: ["translate", "--checkpoint", w / "run", "--input", w / "in.de", "--output", out,
                                  *SEARCH], "in.de", False),
    "classify predict": (lambda w, out: ["classify", "predict", "--model", w / "classifier", "--csv",
                                         w / "texts.csv", "--output", out], "classifier", False),
    "classify train": (lambda w, out: ["classify", "train", "--csv", w / "texts.csv", "--out", out], "texts.csv",
                       True),
    "bench runs": (lambda w, out: ["bench", "runs", w / "run", "--out", out], "run", False),
    "prepare": (lambda w, out: ["prepare", "--src", w / "in.de", "--tgt", w / "ref.en", "--out", out,
                                "--vocab-size", "300"], "in.de", False),
    "train": (lambda w, out: ["train", "--preset", "smoke", "--run-dir", out], "run", False),
    "experiment memory": (lambda w, out: ["experiment", "memory", "--smoke", "--out", out], "run", False),
}
DESTINATIONS = {
    "input": lambda w, writer: w / WRITERS[writer][1],
    "inside the input": lambda w, writer: w / WRITERS[writer][1] / "out",
    "the run": lambda w, writer: w / "run",
    "checkpoints/": lambda w, writer: w / "run" / "checkpoints",
    "a link": lambda w, writer: w / "run" / "checkpoints" / "best",
    "a checkpoint": lambda w, writer: w / "run" / "checkpoints" / "step_0000002",
    "inside a checkpoint": lambda w, writer: w / "run" / "checkpoints" / "step_0000002" / "out",
    "an evaluation": lambda w, writer: w / "evaluation",
    "a classifier": lambda w, writer: w / "classifier",
}
# What a writer may do there: evaluate replaces an earlier evaluation (that is its own output), and train refuses a
# run with the run's own message, which this matrix checks elsewhere.
ALLOWED = {("evaluate", "an evaluation")}
CASES = [pytest.param(writer, destination, force, id=f"{writer}-{destination}{'-force' if force else ''}")
         for writer in WRITERS for destination in DESTINATIONS for force in (False, True)
         if (writer, destination) not in ALLOWED and (WRITERS[writer][2] or not force)]


@pytest.mark.parametrize("writer, destination, force", CASES)
def test_no_output_reaches_an_input(run, assert_one_line, state, workspace: Path, writer: str, destination: str,
                                    force: bool, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    out = DESTINATIONS[destination](workspace, writer)
    argv = WRITERS[writer][0](workspace, out) + (["--force"] if force else [])
    before = state(workspace)
    code, _, err = run(*argv)
    assert_one_line(code, err, 2)
    assert str(out) in err or str(out.parent) in err, err  # the destination (or the folder it lies in) is named
    assert state(workspace) == before  # not a byte, not a lock file, not an empty folder


def this_repository_results() -> Path:
    """The results/ of the checkout these tests belong to, which the vaswani they import must find: the suite runs
    against its own checkout (an editable install, or PYTHONPATH=src)."""
    import vaswani

    root = Path(__file__).resolve().parents[2]
    if not Path(vaswani.__file__).resolve().is_relative_to(root / "src"):
        pytest.skip(f"vaswani is imported from {vaswani.__file__}, not from this checkout")
    return root / "results"


def test_a_default_destination_inside_the_repository_results_is_refused(state) -> None:
    from vaswani.errors import VaswaniError
    from vaswani.io import check_output, repository_results

    results = repository_results()
    assert results == this_repository_results()
    before = state(results)
    with pytest.raises(VaswaniError, match="published results"):
        check_output(results / "memory", command="experiment memory", writes="files", explicit=False)
    check_output(results / "memory", command="experiment memory", writes="files", explicit=True)  # --out names it
    assert state(results) == before


def test_a_smoke_experiment_without_out_never_writes_into_results(run, tmp_path, monkeypatch) -> None:
    """`experiment memory --smoke` from the repository's root: its default destination is runs/experiments/."""
    from vaswani.experiments.commands import DEFAULT_OUT
    from vaswani.io import repository_results

    assert repository_results() == this_repository_results()
    monkeypatch.chdir(tmp_path)
    code, _, err = run("experiment", "memory", "--smoke", "--device", "cpu")
    assert code == 0, err
    assert (tmp_path / DEFAULT_OUT / "memory" / "results.json").is_file()


@pytest.mark.parametrize("replaced", [False, True], ids=["kept", "force"])
def test_force_replaces_only_what_the_same_command_wrote(run, assert_one_line, state, workspace: Path, tmp_path,
                                                         replaced: bool) -> None:
    """An earlier average is replaced with --force; a training checkpoint, the same kind written by another
    command, never is."""
    out = tmp_path / "average"
    assert run("average", "--run", workspace / "run", "--last", "1", "--out", out)[0] == 0
    (out / "notes.txt").write_text("beside the average")
    code, _, err = run("average", "--run", workspace / "run", "--last", "1", "--out", out,
                       *(["--force"] * replaced))
    if replaced:
        assert code == 0, err
        assert not (out / "notes.txt").exists()
    else:
        assert_one_line(code, err, 2, "pass --force")
        assert (out / "notes.txt").is_file()
    trained = Path(shutil.copytree(workspace / "run" / "checkpoints" / "step_0000002", tmp_path / "trained"))
    before = state(trained)
    code, _, err = run("average", "--run", workspace / "run", "--last", "1", "--out", trained, "--force")
    assert_one_line(code, err, 2, "written by another command")
    assert state(trained) == before


def test_a_refused_train_leaves_no_lock_and_no_folder(run, assert_one_line, state, tmp_path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own file")
    before = state(tmp_path)
    code, _, err = run("train", "--preset", "smoke", "--run-dir", folder)
    assert_one_line(code, err, 2, "holds no run")
    code, _, err = run("train", "--preset", "smoke", "--run-dir", tmp_path / "new" / "run", "--resume")
    assert_one_line(code, err, 2, "nothing to resume")
    assert state(tmp_path) == before  # no .lock in either, and no new/run/ made for nothing


@pytest.mark.parametrize("checkpoint", ["run", "run/checkpoints/step_0000002"])
def test_an_evaluation_goes_where_it_belongs_by_default(run, workspace: Path, tmp_path, checkpoint: str) -> None:
    """evaluate's default --out is the checkpoint's (or the run's) eval/ folder: inside an input, and inside the run
    that holds the checkpoint, where an evaluation belongs."""
    copy = Path(shutil.copytree(workspace / "run", tmp_path / "run", symlinks=True))
    given = tmp_path / checkpoint
    folder = given.resolve() / "eval"
    earlier = set(folder.iterdir()) if folder.is_dir() else set()  # other tests may have evaluated the shared run
    code, _, err = run("evaluate", "--checkpoint", given, "--src", workspace / "in.de", "--ref", workspace / "ref.en",
                       *SEARCH)
    assert code == 0, err
    [evaluation] = set(folder.iterdir()) - earlier
    assert (evaluation / "results.json").is_file() and copy.is_dir()


def test_an_evaluation_never_goes_into_another_checkpoints_eval(run, assert_one_line, state, workspace: Path,
                                                                tmp_path) -> None:
    """eval/ of the checkpoint evaluated is where its evaluation belongs; eval/ of any other is that checkpoint's
    own, and a folder vaswani wrote."""
    other = tmp_path / "other"
    (other / "eval").mkdir(parents=True)
    write_manifest(other, "checkpoint", files=[])
    before = state(tmp_path)
    out = other / "eval" / "mine"
    code, _, err = run("evaluate", "--checkpoint", workspace / "run", "--src", workspace / "in.de", "--ref",
                       workspace / "ref.en", "--out", out, *SEARCH)
    assert_one_line(code, err, 2, str(out), f"lies inside {other}")
    assert state(tmp_path) == before


@pytest.mark.parametrize("where", ["beside", "below"])
def test_prepare_never_turns_the_folder_of_its_corpus_into_prepared_data(run, assert_one_line, state, tmp_path,
                                                                         where: str) -> None:
    """The prepared folder gets a manifest, which claims what the folder holds: the user's corpus files are not
    vaswani's to claim."""
    corpus = tmp_path / "corpus" / ("." if where == "beside" else "files")
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "in.de").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n", encoding="utf-8")
    (corpus / "ref.en").write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    before = state(tmp_path)
    code, _, err = run("prepare", "--src", corpus / "in.de", "--tgt", corpus / "ref.en", "--out", tmp_path / "corpus",
                       "--vocab-size", "300")
    assert_one_line(code, err, 2, str(tmp_path / "corpus"), "holds", "pick another directory")
    assert state(tmp_path) == before


def test_translate_never_writes_over_a_corpus_file_prepared_data_was_made_from(run, assert_one_line, state, workspace,
                                                                               local_corpus, tmp_path,
                                                                               monkeypatch) -> None:
    """Another run's training files are no input of this translate, yet its prepared data (and the runs trained on
    it) were made from them: they are refused as a destination while that data is on disk, and free once it is
    gone."""
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    (tmp_path / "corpus").mkdir()
    src, tgt = (Path(shutil.copy(path, tmp_path / "corpus")) for path in local_corpus)
    prepared = tmp_path / "prepared"
    code, _, err = run("prepare", "--src", src, "--tgt", tgt, "--out", prepared, "--vocab-size", "300")
    assert code == 0, err
    before = state(tgt.parent)
    argv = ["translate", "--checkpoint", workspace / "run", "--input", workspace / "in.de", *SEARCH]
    code, _, err = run(*argv, "--output", tgt)
    assert_one_line(code, err, 2, str(tgt), str(prepared), "pick a new file")
    assert state(tgt.parent) == before
    shutil.rmtree(prepared)
    code, _, err = run(*argv, "--output", tgt)
    assert code == 0, err  # once no prepared data on disk was made from it, the file is the user's to overwrite


# ---- every destination goes through check_output ------------------------------------------------------------------
# The options whose value is where a command writes, found by walking the parsers (as the whole-number bound test
# walks them for counts): a new one must be added to DESTINATION_ARGV, and its test proves that the destination
# reaches check_output before anything is written.
DESTINATION_DESTS = {"out", "output", "run_dir", "runs_dir", "work"}
DESTINATION_ARGV: dict[str, Callable[[Path, Path], list]] = {
    "prepare --out": lambda w, d: ["prepare", "--src", w / "in.de", "--tgt", w / "ref.en", "--out", d],
    "clean --out": lambda w, d: ["clean", "--src", w / "in.de", "--tgt", w / "ref.en", "--out", d],
    "train --run-dir": lambda w, d: ["train", "--preset", "smoke", "--run-dir", d],
    "translate --output": lambda w, d: ["translate", "--checkpoint", w / "run", "--input", w / "in.de",
                                        "--output", d, *SEARCH],
    "score --output": lambda w, d: ["score", "--checkpoint", w / "run", "--src", w / "in.de", "--tgt",
                                    w / "ref.en", "--output", d],
    "evaluate --out": lambda w, d: ["evaluate", "--checkpoint", w / "run", "--src", w / "in.de", "--ref",
                                    w / "ref.en", "--out", d, *SEARCH],
    "compare --out": lambda w, d: ["compare", w / "evaluation", "--out", d],
    "average --out": lambda w, d: ["average", "--run", w / "run", "--last", "1", "--out", d],
    "bench train --out": lambda w, d: ["bench", "train", "--out", d],
    "bench decode --out": lambda w, d: ["bench", "decode", "--checkpoint", w / "run", "--out", d],
    "bench runs --out": lambda w, d: ["bench", "runs", w / "run", "--out", d],
    "bench engines --out": lambda w, d: ["bench", "engines", "--checkpoint", w / "run", "--out", d],
    "bench data --work": lambda w, d: ["bench", "data", "--pairs", "10", "--work", d],
    "bench data --out": lambda w, d: ["bench", "data", "--pairs", "10", "--work", w / "bench-work", "--out", d],
    "classify train --out": lambda w, d: ["classify", "train", "--csv", w / "texts.csv", "--out", d],
    "classify predict --output": lambda w, d: ["classify", "predict", "--model", w / "classifier", "--csv",
                                               w / "texts.csv", "--output", d],
    "classify experiment --out": lambda w, d: ["classify", "experiment", "--csv", w / "texts.csv", "--out", d],
    "classify experiment --runs-dir": lambda w, d: ["classify", "experiment", "--csv", w / "texts.csv", "--out",
                                                    w / "classify-out", "--runs-dir", d],
    "classify summary --out": lambda w, d: ["classify", "summary", w / "classifier", "--out", d],
    "export --out": lambda w, d: ["export", "--checkpoint", w / "run", "--format", "hf", "--out", d],
    "serve-bench --out": lambda w, d: ["serve-bench", "--checkpoint", w / "run", "--out", d],
    "backtranslate --out": lambda w, d: ["backtranslate", "--checkpoint", w / "run", "--input", w / "in.de",
                                         "--out", d],
    "distill --out": lambda w, d: ["distill", "--teacher", w / "run", "--input", w / "in.de", "--out", d],
}


def _experiments() -> dict[str, Callable[[Path, Path], list]]:
    """Every experiment writes through one handler (experiments/commands.py): each one's --out (and --runs-dir), run
    with --smoke and its required options given the workspace's run, found from the parser so that a new experiment
    is walked without being listed."""
    import argparse

    from vaswani.cli import build_parser

    [experiment] = [action.choices["experiment"] for action in build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction)]
    [subparsers] = [action for action in experiment._actions if isinstance(action, argparse._SubParsersAction)]
    found: dict[str, Callable[[Path, Path], list]] = {}
    for name, parser in subparsers.choices.items():
        required = [action.option_strings[0] for action in parser._actions if action.required and action.option_strings]
        flags = {action.option_strings[0] for action in parser._actions if action.option_strings}

        def argv(w: Path, out: Path, d: Path | None = None, name: str = name, required: list = required) -> list:
            given = [part for flag in required for part in (flag, w / "run")]
            return ["experiment", name, "--smoke", *given, "--out", out, *(["--runs-dir", d] if d else [])]

        found[f"experiment {name} --out"] = lambda w, d, argv=argv: argv(w, d)
        if "--runs-dir" in flags:
            found[f"experiment {name} --runs-dir"] = lambda w, d, argv=argv: argv(w, w / "experiment-out", d)
    return found


DESTINATION_ARGV.update(_experiments())


def _destination_options() -> list[str]:
    from vaswani.cli import build_parser

    found = []
    for command, action in _walk(build_parser()):
        if action.dest in DESTINATION_DESTS and action.option_strings:
            found.append(f"{command} {action.option_strings[0]}")
    return found


def _walk(parser, prefix: str = ""):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{prefix} {name}".strip())
        else:
            yield prefix, action


# Options that name an input the command writes into, where check_output's "not inside an input" cannot apply.
WRITES_INTO_ITS_INPUT = {
    "finalize --run-dir": "the run it finalizes, locked while it adds checkpoints/final and its evaluations",
}


def test_every_destination_option_is_walked() -> None:
    listed = set(DESTINATION_ARGV) | set(WRITES_INTO_ITS_INPUT)
    assert sorted(set(_destination_options()) - listed) == []
    assert sorted(listed - set(_destination_options())) == []  # the tables name real options


@pytest.mark.parametrize("option", DESTINATION_ARGV)
def test_every_destination_reaches_check_output_before_it_is_written(run, workspace: Path, tmp_path, monkeypatch,
                                                                     option: str) -> None:
    """check_output resolves every destination it checks first: the destination (or a folder below it, such as a
    variant's run in --runs-dir) reaching it ends the command there, with a marker error; one that bypasses the
    rule reaches no marker, and the command fails or writes on its own."""
    import vaswani.io.outputs as outputs
    from vaswani.errors import VaswaniError

    destination = tmp_path / "destination"
    resolve = outputs._resolved

    def marker(given: Path, where: str) -> Path:
        if Path(given).absolute() == destination or destination in Path(given).absolute().parents:
            raise VaswaniError(f"reached check_output: {given}")
        return resolve(given, where)

    monkeypatch.setattr(outputs, "_resolved", marker)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*DESTINATION_ARGV[option](workspace, destination))
    assert code == 2 and "reached check_output" in err, err
    assert not destination.exists()
