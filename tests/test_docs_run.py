"""Every ``vaswani`` command the pages show runs as written, so that a documented form cannot crash unnoticed.

Each command runs in-process in a folder of its own, where the names the pages use (``runs/multi30k-cpu``,
``train.fr``, ``sentences.de``, …) are tiny stand-ins (``STAND_INS``): a run trained for a few steps on a few
hundred synthetic pairs, and files of a few dozen lines. Settings the command line already has make the long ones
short (``SHRINK``): a training run stops after two updates, a search stops after a few tokens. A command exits 0, or
with the error the page prints under it, and leaves its output. A command that cannot run in seconds (hours of
training, a GPU, a server, a study or a benchmark over whole corpora) is listed in ``NOT_RUN`` with the reason; a
command that is neither run nor listed fails ``test_every_documented_command_is_run_or_listed``."""

from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from documented_commands import COMMANDS, DocumentedCommand

from vaswani.cli import main

TINY_VOCAB = 400  # the BPE the shared Multi30k stand-in is prepared with (prepared_multi30k)

# ---- what is not run, and why ---------------------------------------------------------------------------------------
NOT_RUN: dict[str, str] = {
    "vaswani serve --checkpoint runs/multi30k-cpu": "a server that runs until stopped (tests/serve starts it)",
    "vaswani serve --checkpoint runs/multi30k-cpu --engine ctranslate2": "a server that runs until stopped",
    "vaswani train --preset multi30k-gpu": "the GPU preset: a d512 6+6 model on a CUDA device",
    "vaswani train --preset multi30k-gpu --run-dir runs/multi30k-gpu --set train.progress=false":
        "the GPU preset: a d512 6+6 model on a CUDA device",
    "vaswani train --preset wmt17-base": "the WMT17 training corpora, which the test data does not hold",
    "vaswani train --preset smoke --run-dir runs/two-cpu-ranks --set train.device=cpu --set train.max_steps=4 "
    "--set train.final_model=false": "two processes under torch.distributed.run (tests/training runs two ranks)",
    "vaswani bench train --preset small --peer torch --precision fp32": "a benchmark: timed repeats of a d512 model",
    "vaswani bench train --preset small --set model.d_model=256 --peer marian marian-eager --batches fixed "
    "--precision fp32": "a benchmark: timed repeats of a d256 model against MarianMT",
    "vaswani bench train --preset base --set model.vocab_size=8000 --peer torch marian --batches multi30k "
    "--length-buckets 5 --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3 --repeats 5 "
    "--out results/bench/train-base-gpu-32k.json": "a GPU benchmark (CUDA graphs)",
    "vaswani bench train --preset base --set model.vocab_size=8000 --peer torch marian --batches multi30k "
    "--length-buckets 3 --compile --cuda-graphs --precision bf16 --max-tokens 32768 --steps 10 --warmup 3 "
    "--repeats 5 --out results/bench/train-base-gpu-32k-compiled.json": "a GPU benchmark (CUDA graphs, compiled)",
    "vaswani bench decode --preset small --threads 1": "a benchmark: timed greedy and beam search of a d512 model",
    "vaswani bench decode --checkpoint runs/multi30k-cpu --peer marian ctranslate2 --out /tmp/peers":
        "a benchmark: test2016 timed on three engines",
    "vaswani bench data --pairs 500000 1000000 --work /tmp/scale --out results/data-scale":
        "a benchmark: corpora of a million pairs",
    "vaswani bench data --pairs 4500000 --work /tmp/scale --corpus-only": "a benchmark: a corpus of 4.5 million pairs",
    "vaswani experiment ablation --jobs 2 --out results/ablation": "a study: hours of training runs",
    "vaswani experiment fine-tuning --parent runs/multi30k-cpu --out results/fine-tuning": "a study: training runs",
    "vaswani experiment fine-tuning --parent runs/multi30k-cpu --conditions fine-tuned fine-tuned-decoder scratch "
    "mixed --set train.max_steps=5000 --jobs 2 --out results/fine-tuning-readme-model": "a study: training runs",
    "vaswani experiment constraints --checkpoint runs/multi30k-cpu --sentences 150 --out /tmp/constraints":
        "a study: 150 sentences searched with and without constraints",
    "vaswani classify experiment --csv ../shared/data/disaster_tweets/train.csv --seeds 0 1 2 --out /tmp/classifier":
        "a study: three classifiers trained on 7,613 tweets",
    "vaswani experiment regularization --cells d128 d128-drop0.3 --seeds 0 1 --jobs 2 --runs-dir runs/regularization":
        "a study: hours of training runs",
    "vaswani experiment backtranslation --seeds 0 1 --jobs 2 --runs-dir runs/backtranslation --out runs/bt-study":
        "a study: hours of training runs",
    "vaswani experiment distillation --seeds 0 1 --jobs 2 --runs-dir runs/distillation --out runs/distillation-study":
        "a study: hours of training runs",
    "vaswani experiment distillation --teacher runs/d256 --seeds 0 1 --jobs 2 --runs-dir runs/distillation "
    "--out runs/distillation-study": "a study: four training runs of a quarter of an hour or more",
    "vaswani experiment cleaning --seeds 0 1 --jobs 2 --runs-dir runs/cleaning --out runs/cleaning-study":
        "a study: hours of training runs",
    "vaswani experiment backtranslation --smoke --seeds 0 --variants half bt-sample-tagged":
        "the smoke study tests/experiments/test_backtranslation_experiment.py runs with the same variants",
    "vaswani experiment distillation --smoke --seeds 0":
        "the smoke study tests/experiments/test_distillation_experiment.py runs",
    "vaswani experiment cleaning --smoke --seeds 0 --variants cleaned":
        "the smoke study tests/experiments/test_cleaning_experiment.py runs",
    "vaswani experiment memory --out results/memory": "a study: the memory of full-size models measured",
    "vaswani experiment ensemble --seeds 0 1 2 3 --runs-dir runs/ensemble --jobs 2 --set train.max_epochs=10 "
    "--out results/ensemble":
        "a study: four training runs of half an hour each",
    "vaswani experiment ensemble --runs runs/seed1 runs/seed2 runs/seed3 runs/seed4 --out /tmp/ensemble":
        "a study: four models and their ensembles scored and timed on Multi30k's test sets",
}

# ---- the stand-ins --------------------------------------------------------------------------------------------------
# Text files under the names the pages use: (words of the language, lines). Sentences are numbered, so every line
# differs; the words only need to be the same on both sides of a pair.
WORDS = {"de": "ein kleiner hund läuft über die wiese nummer", "en": "a small dog runs over the meadow number",
         "fr": "un petit chien court sur le pré numéro", "zh": "一只 小狗 跑过 草地 号"}
PAIRS = 150  # enough for a training run to hold out its validation pairs
FILE_STEMS = [  # (stem, languages, lines)
    *[(stem, ("de", "en", "fr"), PAIRS) for stem in ("train",)],
    *[(stem, ("de", "en"), PAIRS) for stem in ("general", "real", "news", "crawl", "pairs", "bt/backtranslated",
                                               "synthetic/bt/backtranslated", "runs/crawl-clean/crawl")],
    *[(stem, ("de", "en", "fr"), 12) for stem in ("test", "dev", "newsdev", "newstest2014", "newstest2015")],
    ("mono", ("en",), 6), ("sentences", ("de",), 4),
]
TEXT_FILES = {f"{stem}.{language}": (language, lines) for stem, languages, lines in FILE_STEMS
              for language in languages}
EXTRA_FILES = ("starts.en", "phrases.en", "terms.tsv", "pairs.tsv", "bomb.yaml")
# Runs trained for a few updates, under the names the pages give them: `run` on train.de -> train.en with its final
# model; `run-en-de` the other way (a model that back-translates English); `run-plain` as the smoke preset trains
# it, without a final model (what docs/reliability.md damages by hand is its best checkpoint).
RUNS = {**{name: "run" for name in ("runs/multi30k-cpu", "runs/seed1", "runs/seed2", "runs/news", "runs/cpu-fp32",
                                    "runs/cpu-bf16", "runs/multi30k-gpu")},
        "runs/en-de": "run-en-de", "runs/smoke": "run-plain"}
# An evaluation of that run: what `compare` reads.
EVALUATIONS = ("eval/greedy", "runs/eval-fp32", "runs/eval-bf16")
TINY_RUN = ["--preset", "smoke", "--set", "data.vocab_size=300", "--set", "model.d_model=32", "--set", "model.d_ff=64",
            "--set", "train.max_steps=4", "--set", "train.eval_every_steps=2", "--set", "train.bleu_subset=0",
            "--set", "train.progress=false", "--set", "train.precision=fp32", "--set", "train.device=cpu",
            "--set", "train.max_tokens=400", "--set", "train.final_model=true", "--set", "train.average_last=2",
            "--set", "train.final_beam=2", "--set", "train.final_alphas=0.6", "--set", "train.final_valid_sentences=8"]

# ---- what makes a long command short --------------------------------------------------------------------------------
# Settings added to every `train` that does not set them itself: two updates of a tiny model, no final model.
TRAIN_SETTINGS = {"train.max_steps": "2", "train.max_epochs": "null", "train.eval_every_steps": "2",
                  "train.bleu_subset": "0", "train.progress": "false", "train.device": "cpu",
                  "train.max_tokens": "4000",
                  "train.max_minutes": "null", "train.decay_on_clock": "false", "train.final_model": "false",
                  "train.scale_up_models": "[]"}
MODEL_SETTINGS = {"model.d_model": "32", "model.d_ff": "64", "model.n_encoder_layers": "1",
                  "model.n_decoder_layers": "1"}
# A search cut after a few tokens, for commands that translate a whole test set.
SHORT_SEARCH = ["--max-len-a", "0", "--max-len-b", "4"]


def write_text_files(folder: Path) -> None:
    for name, (language, lines) in TEXT_FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{WORDS[language]} {i}\n" for i in range(lines)), encoding="utf-8")
    sentences = (folder / "sentences.de").read_text(encoding="utf-8").splitlines()
    (folder / "starts.en").write_text("a small\n\nthe\n\n", encoding="utf-8")  # one prefix per sentence, or none
    (folder / "phrases.en").write_text("dog\n\nmeadow\tsmall\n\n", encoding="utf-8")  # phrases per sentence
    (folder / "terms.tsv").write_text("hund\tdog\nwiese\tmeadow\n", encoding="utf-8")
    (folder / "pairs.tsv").write_text("".join(f"{WORDS['zh']} {i}\t{WORDS['en']} {i}\n" for i in range(PAIRS)),
                                      encoding="utf-8")
    # a preset whose aliases expand to billions of values (docs/reliability.md)
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (folder / "bomb.yaml").write_text("\n".join(levels) + "\n", encoding="utf-8")
    assert len(sentences) == 4


@pytest.fixture(scope="session")
def stand_ins(build_once) -> Path:
    """The folder of every stand-in, built once for all workers; each test copies what its command names."""

    def build(folder: Path) -> None:
        write_text_files(folder)
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(folder)
            patch.setenv("VASWANI_CACHE", str(folder / "cache"))
            assert main(["train", *TINY_RUN, "--run-dir", "run", "--src", "train.de", "--tgt", "train.en"]) == 0
            assert main(["train", *TINY_RUN, "--run-dir", "run-en-de", "--src", "train.en", "--tgt", "train.de"]) == 0
            assert main(["train", *TINY_RUN, "--set", "train.final_model=false", "--run-dir", "run-plain",
                         "--src", "train.de", "--tgt", "train.en"]) == 0
            assert main(["evaluate", "--checkpoint", "run", "--src", "test.de", "--ref", "test.en", "--beam", "1",
                         "--out", "evaluation"]) == 0

    return build_once("documented_command_stand_ins", build)


# ---- reading a command ----------------------------------------------------------------------------------------------
def values(args: list[str], option: str) -> list[str]:
    """The value after each ``option`` in ``args``."""
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == option]


def settings(args: list[str]) -> dict[str, str]:
    return dict(value.partition("=")[::2] for value in values(args, "--set"))


def run_directory(args: list[str]) -> str:
    """The run a ``train`` command writes: --run-dir, else runs/PRESET."""
    preset = Path(next(iter(values(args, "--preset")), "multi30k-cpu")).stem
    return next(iter(values(args, "--run-dir")), f"runs/{preset}")


# Studies that build their corpora from Multi30k's training pairs.
STUDIES_OF_MULTI30K = {("experiment", name) for name in ("backtranslation", "distillation", "cleaning")}


def reads_the_corpora(args: list[str]) -> bool:
    """Whether the command reads a registered corpus (Multi30k) from the real data files."""
    own_files = any(option in args for option in ("--src", "--tsv", "--resume", "--print-config"))
    return (args[0] == "train" and not own_files) or (args[0] == "evaluate" and "--dataset" in args) or (
        args[0] == "prepare" and not own_files) or tuple(args[:2]) in STUDIES_OF_MULTI30K


def named_stand_ins(args: list[str], names: tuple[str, ...]) -> list[str]:
    """The stand-ins among ``names`` that an argument names or lies inside: not the folder a command is told to
    write (--out, --output, a new run's --run-dir), which must not exist before."""
    written = {value for option in ("--out", "--output") for value in values(args, option)}
    if args[0] == "train" and "--resume" not in args:
        written.add(run_directory(args))
    elif args[0] == "train":
        args = [*args, run_directory(args)]  # --resume reads the run
    return [name for name in names if any(arg == name and arg not in written or arg.startswith(name + "/")
                                          for arg in args)]


def shrunk(args: list[str], corpora: bool) -> list[str]:
    """The command with the settings that make it take seconds, where it does not set them itself."""
    extra: list[str] = []
    if args[0] == "train":
        given = settings(args)
        wanted = dict(TRAIN_SETTINGS)
        if "--init-from" not in args and "--resume" not in args:
            wanted |= MODEL_SETTINGS | {"data.vocab_size": str(TINY_VOCAB) if corpora else "300"}
        extra = [word for key, value in wanted.items() if key not in given for word in ("--set", f"{key}={value}")]
    elif args[0] == "evaluate" and "--dataset" in args:
        extra = SHORT_SEARCH
    return [*args, *extra]


def outputs(args: list[str], workdir: Path) -> list[Path]:
    """What a command that succeeds must leave: the files and folders it is told to write, or writes by default."""
    paths = [workdir / value for option in ("--out", "--output", "--kept-src", "--kept-tgt")
             for value in values(args, option)]
    if args[0] == "train" and "--print-config" not in args:
        paths.append(workdir / run_directory(args) / "checkpoints" / "last")
    if args[0] == "experiment" and "--out" not in args:
        paths.append(workdir / "runs" / "experiments" / args[1])
    return paths


def as_run_here(word: str) -> str:
    """A word of the page's command as it runs in the test's folder: /tmp/... lands in the folder."""
    return "tmp/" + word[len("/tmp/"):] if word.startswith("/tmp/") else word


def error_pattern(error: str) -> re.Pattern[str]:
    """The page's error as a pattern: '...' stands for any text, a number for any number."""
    pieces = [r"\d+".join(re.escape(text) for text in re.split(r"\d+", part)) for part in re.split(r"\.\.\.|…", error)]
    return re.compile(".*".join(pieces))


# ---- the tests ------------------------------------------------------------------------------------------------------
# The commands the runner knows how to give stand-ins and make short: a subcommand, or an experiment by name.
RUNNABLE = {"train", "translate", "evaluate", "score", "export", "prepare", "finalize", "clean", "compare",
            "average", "backtranslate", "distill", "experiment memory", "experiment attention",
            "experiment final-models", "experiment backtranslation", "experiment distillation", "experiment cleaning"}


def runnable(command: DocumentedCommand) -> bool:
    return command.args[0] in RUNNABLE or " ".join(command.args[:2]) in RUNNABLE


# One test per distinct command (a command shown on several pages runs once), named after its first place.
DISTINCT: dict[tuple, DocumentedCommand] = {}
for _command in COMMANDS:
    if _command.text not in NOT_RUN and runnable(_command):
        DISTINCT.setdefault((_command.args, _command.environment, _command.stdin, _command.error, _command.prelude),
                            _command)
RUN = [pytest.param(c, id=c.where, marks=[pytest.mark.corpora] if reads_the_corpora(list(c.args)) else [])
       for c in DISTINCT.values()]


def test_every_documented_command_is_run_or_listed() -> None:
    unclassified = [f"{c.where}: {c.text}" for c in COMMANDS if c.text not in NOT_RUN and not runnable(c)]
    assert not unclassified, ("commands the pages show that are neither run (RUNNABLE) nor listed in NOT_RUN with "
                              "the reason: " + "; ".join(unclassified))
    assert len(RUN) > 40


def test_every_command_listed_as_not_run_is_on_a_page() -> None:
    shown = {c.text for c in COMMANDS}
    assert not [text for text in NOT_RUN if text not in shown], "NOT_RUN lists commands no page shows any more"


@pytest.mark.parametrize("command", RUN)
def test_a_documented_command_runs_as_written(command: DocumentedCommand, stand_ins: Path, tmp_path: Path,
                                              request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    args = [as_run_here(word) for word in command.args]
    corpora = reads_the_corpora(args)
    workdir = tmp_path / "here"
    place(stand_ins, workdir, [args, *([as_run_here(w) for w in step.args] for step in command.prelude
                                       if isinstance(step, DocumentedCommand))])
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    # only the commands marked `corpora` find the real data; another that looks for it fails at once
    monkeypatch.delenv("VASWANI_DATA", raising=False)
    monkeypatch.setenv("VASWANI_MIRROR", "http://127.0.0.1:9/")
    if corpora:
        monkeypatch.setenv("VASWANI_DATA", str(request.getfixturevalue("data_dir")))
        if args[0] == "train":
            request.getfixturevalue("prepared_multi30k")(workdir)
    for step in command.prelude:
        if isinstance(step, str):
            run_setup_line(step, workdir)
        else:
            code, _, err = run_as_written(step, workdir, monkeypatch, capsys)
            assert code == (0 if step.error is None else 2), f"{step.where}, before {command.where}: {err[-2000:]}"

    code, out, err = run_as_written(command, workdir, monkeypatch, capsys)
    if command.error is not None:
        message = " ".join(err.split())
        assert code == 2 and f"vaswani {args[0]}: error: " in message, f"{command.where}: exit {code}: {err}"
        assert error_pattern(command.error).search(message), f"{command.where}: the page shows {command.error!r}"
        return
    assert code == 0, f"{command.where}: `{command.text}` exits {code}: {err[-2000:]}"
    missing = [str(path.relative_to(workdir)) for path in outputs(args, workdir) if not path.exists()]
    assert not missing, f"{command.where}: `{command.text}` did not write {missing}"
    if args[0] == "translate" and "--output" not in args and "--input" not in args:
        lines = len(stdin_of(command, workdir).splitlines())  # a tiny model's translation may be empty: a line
        assert len(out.splitlines()) >= lines, f"{command.where}: `{command.text}` printed {out!r} for {lines} lines"


def stdin_of(command: DocumentedCommand, workdir: Path) -> str:
    """What the command reads on stdin: the text the page pipes into it, else a few German sentences."""
    return command.stdin if command.stdin is not None else (workdir / "sentences.de").read_text(encoding="utf-8")


def run_as_written(command: DocumentedCommand, workdir: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the command, run in-process in ``workdir`` with the variables the page sets
    in front of it and made short (``shrunk``)."""
    args = [as_run_here(word) for word in command.args]
    for name, value in command.environment:
        if name != "VASWANI_DATA":
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin_of(command, workdir)))
    code = main(shrunk(args, reads_the_corpora(args)))
    out, err = capsys.readouterr()
    return code, out, err


# `$(ls -d PATTERN)` in a setup line: the one match of PATTERN in the command's folder, found here, so that a line
# whose pattern matches nothing fails the test instead of writing to `/model.bin`.
LISTED_FOLDER = re.compile(r"\$\(ls -d ([^)]+)\)")


def run_setup_line(line: str, workdir: Path) -> None:
    """A page's setup line (SETUP_PROGRAMS: a file damaged by hand), run by bash in ``workdir``."""
    def folder(match: re.Match[str]) -> str:
        found = sorted(workdir.glob(match.group(1)))
        assert len(found) == 1, f"`{line}`: {match.group(1)} matches {len(found)} folders in {workdir}"
        return shlex.quote(str(found[0]))

    completed = subprocess.run(["bash", "-euo", "pipefail", "-c", LISTED_FOLDER.sub(folder, line)], cwd=workdir,
                               capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, f"`{line}` exits {completed.returncode}: {completed.stderr}"


def place(stand_ins: Path, workdir: Path, commands: list[list[str]]) -> None:
    """The stand-ins the commands read, under the names the page gives them, in ``workdir``: not the files inside a
    folder the last command is told to write."""
    workdir.mkdir()
    written = [Path(value) for option in ("--out", "--output") for value in values(commands[0], option)]
    for name in [*TEXT_FILES, *EXTRA_FILES]:
        if any(Path(name).is_relative_to(folder) for folder in written):
            continue
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stand_ins / name, workdir / name)
    for args in commands:
        for name in named_stand_ins(args, tuple(RUNS)):
            if not (workdir / name).exists():
                shutil.copytree(stand_ins / RUNS[name], workdir / name, symlinks=True)
        for name in named_stand_ins(args, EVALUATIONS):
            if not (workdir / name).exists():
                shutil.copytree(stand_ins / "evaluation", workdir / name, symlinks=True)
