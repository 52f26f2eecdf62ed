"""The fault loop: kill a training run with SIGKILL at random points, resume it each time, and check that it ends
bit-identical to a run that was never interrupted and that every checkpoint left on disk loads.

    python -m vaswani.tools.faults --kills 20 --out results/reliability

Each training process is forked from a fork server that has imported torch and the trainer (so it starts at once,
not after the seconds an interpreter takes to import torch; it is still a process of its own that SIGKILL ends as it
would end ``vaswani train``, and it never inherits the loop's own state, such as a CUDA context). It reports what it
is doing through a pipe, one ``NAME STEP`` message before each phase (``step``: an optimizer update; ``evaluation``:
validation loss and greedy BLEU; ``checkpoint``: writing a checkpoint, moving ``last``, pruning). The loop picks a
phase for each kill, lets the training process reach it (skipping a random number of occurrences), waits a random
few milliseconds and kills the process. Where the kill landed is the last phase line the process wrote before it
died: a pipe keeps every line written, so the reading is exact even though the kill itself is asynchronous.

After each kill: every ``step_*`` checkpoint on disk must be complete and load (weights and trainer state), and the
next training process resumes from the newest one (or starts over, moving the earlier files aside, when the kill
came before the first checkpoint). After the last kill a final training process runs to the end; its weights are
compared bit for bit with the uninterrupted reference run's, and its metrics log must hold every update exactly once.

Everything runs on the CPU with one thread: bit-identity across a resume is a property of this code on a
deterministic device (GPU kernels may not be deterministic; see README, Reliability).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shlex
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

from vaswani.benchmarks.engines import Stamp
from vaswani.io import atomic_write_text
from vaswani.model.serialization import load_model
from vaswani.provenance import provenance
from vaswani.records import write_record
from vaswani.tools.faults_report import CheckpointCheck, Comparison, FaultLoopResult, Kill
from vaswani.training.callbacks import Callback
from vaswani.training.checkpoint import is_complete, latest_checkpoint, load_trainer_state
from vaswani.training.metrics import read_metrics
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.resume import resumed_config
from vaswani.training.run import train
from vaswani.training.rundir import run_evidence

# A tiny model on short sentences that still does everything a real run does: dropout (RNG state), epochs ending
# mid-run (the sampler's order), periodic checkpoints, pruning, evaluations with greedy BLEU, and checkpoints re-saved
# at the same update (an evaluation right after a periodic save).
DEFAULT_SETTINGS = [
    "train.max_epochs=null", "train.save_every_steps=2", "train.eval_every_steps=6", "train.bleu_subset=8",
    "train.precision=fp32", "train.progress=false", "train.patience=null", "train.log_every_steps=1",
    "train.max_tokens=600", "train.keep_checkpoints=3", "train.num_threads=1", "train.device=cpu",
    "model.dropout=0.1", "data.vocab_size=400", "data.max_len=16",  # 16 tokens: 5 updates per epoch, 1 valid batch
]
PHASES = ("step", "checkpoint", "evaluation")
# How long after a phase starts the kill may come (seconds): within a tiny model's update, a checkpoint write,
# an evaluation with a few greedy translations.
MAX_DELAY = {"step": 0.01, "checkpoint": 0.004, "evaluation": 0.05}
# Imported once by the fork server, before the lives are forked from it.
PRELOAD = ["vaswani.training.run", "torch.utils.tensorboard", "matplotlib.pyplot", "tokenizers"]
_channel = None  # this training process's end of the pipe


# ---- the child: one training process, reporting its phases ---------------------------------------------------

def _mark(name: str, step: int) -> None:
    if _channel is not None:
        _channel.send_bytes(f"{name} {step}".encode())  # one write(2): all of it reaches the pipe, or none


def train_announcing_phases(preset: str, run_dir: Path, settings: list[str], resume: bool, start_over: bool) -> int:
    """Train as ``vaswani train`` does, announcing each phase on stdout."""
    class PhaseReporter(Callback):
        def on_update_start(self, trainer):
            _mark("step", trainer.progress.step + 1)

        def on_evaluation_start(self, trainer):
            _mark("evaluation", trainer.progress.step)

        def on_checkpoint_start(self, trainer, reason):
            _mark("checkpoint", trainer.progress.step)

        def on_checkpoint_end(self, trainer, reason):
            _mark("after-checkpoint", trainer.progress.step)

    config = resumed_config(run_dir, settings) if resume else apply_settings(load_preset(preset), settings)
    summary = train(config, run_dir, resume=resume, start_over=start_over, callbacks=[PhaseReporter()])
    _mark("finished", summary.step)
    return 0


def _training_process(channel, workdir: str, environment: dict[str, str], log: str, *arguments) -> None:
    """Entry point of a training process: its own directory, environment and log, then training."""
    global _channel
    _channel = channel
    os.chdir(workdir)
    os.environ.update(environment)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    # Python's own streams too, so that everything the process prints lands in its log.
    sys.stdout = sys.stderr = os.fdopen(descriptor, "w", buffering=1)
    import torch

    torch.set_num_threads(1)
    try:
        train_announcing_phases(*arguments)
    except BaseException as error:  # noqa: BLE001 - reported to the loop, which fails with the log's name
        _mark(f"failed:{type(error).__name__}", -1)
        raise


# ---- the parent: the loop -----------------------------------------------------------------------------------------

class TrainingProcess:
    """A training process of the loop: the process and the phases it has announced so far."""

    def __init__(self, context, preset: str, run_dir: Path, settings: list[str], workdir: Path, log: Path):
        resume = latest_checkpoint(run_dir / "checkpoints") is not None
        start_over = not resume and run_dir.exists() and bool(run_evidence(run_dir))
        self.channel, child_end = context.Pipe(duplex=False)
        environment = {"OMP_NUM_THREADS": "1", **{k: v for k, v in os.environ.items() if k.startswith("VASWANI_")}}
        arguments = (child_end, str(workdir), environment, str(log), preset, run_dir.resolve(), settings, resume,
                     start_over)
        self.process = context.Process(target=_training_process, args=arguments)
        self.process.start()
        child_end.close()  # the parent keeps only its reading end: EOF once the child is gone
        self.phases: list[tuple[str, int]] = []

    def next_phase(self, timeout: float) -> tuple[str, int] | None:
        """The next announced phase; None once the process has ended and everything it wrote was read."""
        if not self.channel.poll(timeout):
            self.process.kill()
            raise RuntimeError(f"a training process announced nothing for {timeout:.0f} s; killed it")
        try:
            name, step = self.channel.recv_bytes().decode().split()
        except EOFError:
            return None
        self.phases.append((name, int(step)))
        return self.phases[-1]

    def drain(self, timeout: float) -> None:
        while self.next_phase(timeout) is not None:
            pass
        self.process.join()
        self.channel.close()


def _context() -> multiprocessing.context.BaseContext:
    """Lives start from a fork server: a fresh interpreter that imports torch and the trainer once and forks each
    training process from itself. Each therefore starts at once, and never inherits this process's state (a CUDA context
    cannot survive a fork, and the loop's caller may have created one)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def check_checkpoints(run_dir: Path) -> CheckpointCheck:
    """Every ``step_*`` directory left on disk must be complete, and its weights and trainer state must load."""
    checked, broken = [], []
    for directory in sorted((run_dir / "checkpoints").glob("step_*")):
        try:
            if not is_complete(directory):
                raise RuntimeError("incomplete")
            load_model(directory)
            load_trainer_state(directory)
            checked.append(directory.name)
        except Exception as error:  # noqa: BLE001 - any failure to load is what this check reports
            broken.append(f"{directory.name}: {error}")
    return CheckpointCheck(checked, broken)


def _train_steps(run_dir: Path) -> list[int]:
    return [r.step for r in read_metrics(run_dir / "metrics.jsonl") if r.kind == "train"]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / "last" / "model.safetensors")


class TrainingProcessFailed(RuntimeError):
    """A training process ended on an error of its own (not a kill of ours): the loop cannot go on."""

    def __init__(self, what: str, exitcode: int | None, log: Path):
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
        cause = f": {lines[-1].strip()}" if lines else ""
        super().__init__(f"{what} failed with exit status {exitcode}{cause} (whole log: {log})")


class FaultLoop:
    """The loop's steps, sharing one clock, one random generator and the lives' settings."""

    def __init__(self, workdir: Path, preset: str, settings: list[str], seed: int, process_timeout: float,
                 log: Callable[[str], None]):
        self.workdir, self.preset, self.settings, self.process_timeout = workdir, preset, settings, process_timeout
        self.rng = random.Random(seed)
        self.context = _context()
        self.reference_dir, self.faulty_dir = workdir / "reference", workdir / "faulty"
        self.started = time.perf_counter()
        self._log = log

    def log(self, message: str) -> None:
        self._log(f"[{self.seconds():6.1f} s] {message}")

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def start_process(self, run_dir: Path, log: Path) -> TrainingProcess:
        return TrainingProcess(self.context, self.preset, run_dir, self.settings, self.workdir, log)

    def run_to_end(self, run_dir: Path, log: Path) -> list[tuple[str, int]]:
        """A training process that must finish on its own; returns the phases it announced."""
        child = self.start_process(run_dir, log)
        child.drain(self.process_timeout)
        if child.process.exitcode != 0:
            raise TrainingProcessFailed("a training process", child.process.exitcode, log)
        return child.phases

    def run_reference(self) -> list[tuple[str, int]]:
        for directory in (self.reference_dir, self.faulty_dir):
            shutil.rmtree(directory, ignore_errors=True)
        return self.run_to_end(self.reference_dir, self.workdir / "reference.log")

    def resumes_from(self) -> int | None:
        """The update the next training process of the faulty run continues from (None: it starts from scratch)."""
        latest = latest_checkpoint(self.faulty_dir / "checkpoints")
        return json.loads((latest / "meta.json").read_text())["step"] if latest is not None else None

    def kill_once(self, index: int, kills: int) -> Kill | None:
        """Start a training process of the faulty run, SIGKILL it in the phase picked for kill ``index``, check what
        it left on disk; None when it finished before the kill came."""
        resumed_from = self.resumes_from()
        # the first kills cover every phase once; the rest pick at random
        target = PHASES[index - 1] if index <= len(PHASES) else self.rng.choice(PHASES)
        skip = self.rng.randrange({"step": 4, "checkpoint": 2, "evaluation": 1}[target])
        delay = self.rng.uniform(0.0, MAX_DELAY[target])
        child = self.start_process(self.faulty_dir, self.workdir / "faulty.log")
        seen = 0
        while (phase := child.next_phase(self.process_timeout)) is not None:
            if phase[0] == target:
                if seen == skip:
                    time.sleep(delay)
                    child.process.kill()  # SIGKILL
                    break
                seen += 1
        child.drain(self.process_timeout)  # the phases the process announced before it died
        if child.process.exitcode == 0:
            return None
        if child.process.exitcode != -signal.SIGKILL:
            raise TrainingProcessFailed(f"training process {index}", child.process.exitcode,
                                        self.workdir / "faulty.log")
        landed, step = child.phases[-1] if child.phases else ("start-up", 0)
        checkpoints_dir = self.faulty_dir / "checkpoints"
        staging = sorted(p.name for p in checkpoints_dir.glob(".*-step_*")) if checkpoints_dir.is_dir() else []
        checkpoints = check_checkpoints(self.faulty_dir)
        record = Kill(index, target, landed, step, round(1e3 * delay, 2), resumed_from, staging,
                      checkpoints_on_disk=len(checkpoints.checked) + len(checkpoints.broken),
                      checkpoints_loaded=len(checkpoints.checked), broken=checkpoints.broken)
        self.log(f"kill {index}/{kills}: aimed at {target}, landed in {landed} at update {step} "
                 f"(resumed from {resumed_from}); {record.checkpoints_loaded}/{record.checkpoints_on_disk} "
                 f"checkpoints load" + (f"; left {staging}" if staging else ""))
        return record

    def compare(self, max_steps: int) -> Comparison:
        """The finished faulty run against the reference: weights bit for bit, the metrics log."""
        expected, actual = _weights(self.reference_dir), _weights(self.faulty_dir)
        differing = sorted(name for name in expected
                           if name not in actual or not bool((expected[name] == actual[name]).all()))
        return Comparison(
            bit_identical=not differing and expected.keys() == actual.keys(),
            differing_tensors=differing,
            tensors_compared=len(expected),
            metrics_hold_each_update_once=_train_steps(self.faulty_dir) == list(range(1, max_steps + 1)),
        )


def fault_loop(workdir: Path, kills: int = 20, seed: int = 0, max_steps: int | None = None,
               preset: str = "smoke", settings: list[str] | None = None, process_timeout: float = 300.0,
               log: Callable[[str], None] = print) -> FaultLoopResult:
    """Run the reference, then the loop of ``kills`` kills and a final training process; return the record of it all."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    max_steps = max_steps or 3 * kills + 12
    settings = [*DEFAULT_SETTINGS, *(settings or []), f"train.max_steps={max_steps}"]
    loop = FaultLoop(workdir, preset, settings, seed, process_timeout, log)

    loop.log(f"reference: {max_steps} uninterrupted updates")
    reference_phases = loop.run_reference()

    records: list[Kill] = []
    for index in range(1, kills + 1):
        record = loop.kill_once(index, kills)
        if record is None:
            loop.log(f"kill {index}: the run finished before the kill; the loop stops here")
            break
        records.append(record)

    final_resumed_from = loop.resumes_from()
    loop.log("final training process: runs to the end")
    loop.run_to_end(loop.faulty_dir, workdir / "faulty.log")
    broken_at_the_end = check_checkpoints(loop.faulty_dir).broken
    return FaultLoopResult(
        kills=records,
        kills_done=len(records),
        kills_asked=kills,
        finished_before_all_kills=len(records) < kills,
        final_resumed_from=final_resumed_from,
        max_steps=max_steps,
        reference_updates=sum(1 for name, _ in reference_phases if name == "step"),
        **vars(loop.compare(max_steps)),
        every_checkpoint_loaded=all(not r.broken for r in records) and not broken_at_the_end,
        landed={phase: sum(1 for r in records if r.landed == phase) for phase in sorted({r.landed for r in records})},
        process_start_method=loop.context.get_start_method(),
        seed=seed,
        settings=settings,
        preset=preset,
        seconds=round(loop.seconds(), 1),
    )


def write_results(result: FaultLoopResult, out: Path, command: str | None = None) -> None:
    """``out/results.json`` (``result`` with this machine's provenance) and ``out/table.md``."""
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance("cpu", command=command)
    write_record(out / "results.json", replace(result, provenance=Stamp(**prov.to_json())))
    commit = prov.git.commit or "unknown"
    lines = [
        "# Fault loop: SIGKILL at random points, resume, compare bit for bit",
        "",
        f"Command: `{prov.command}` at commit `{commit[:12]}`; "
        f"{prov.hardware.device_name}, {result.seconds} s.",
        "",
        f"**bit_identical: {str(result.bit_identical).lower()}** — the final weights after "
        f"{result.kills_done} kills and resumes against an uninterrupted run of {result.max_steps} updates "
        f"({result.tensors_compared} tensors compared).  ",
        f"Every checkpoint left on disk loaded after every kill: {str(result.every_checkpoint_loaded).lower()}.  ",
        f"The metrics log holds each update exactly once: {str(result.metrics_hold_each_update_once).lower()}.  ",
        "Kills landed in: " + ", ".join(f"{phase} {count}" for phase, count in result.landed.items()) + ".",
        "",
        "| kill | aimed at | landed in | at update | delay ms | resumed from | checkpoints load | partial files left |",
        "|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in result.kills:
        resumed = "start" if r.resumed_from is None else r.resumed_from
        lines.append(f"| {r.kill} | {r.target} | {r.landed} | {r.step} | {r.delay_ms} | {resumed} "
                     f"| {r.checkpoints_loaded}/{r.checkpoints_on_disk} | {', '.join(r.partial_files_left) or '–'} |")
    lines += ["", f"The final training process resumed from update {result.final_resumed_from} and ran to "
              f"{result.max_steps}. 'landed in' is the last phase the process announced before it died "
              "(`after-checkpoint`: the checkpoint is complete and the next phase has not begun). Partial files are "
              "staging directories of a checkpoint write the kill interrupted; the next save removes them, and resume "
              "never reads them.",
              ""]
    atomic_write_text(out / "table.md", "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vaswani.tools.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=None, help="updates of the run (default 3 x kills + 12)")
    parser.add_argument("--workdir", type=Path, default=Path("runs/faults"))
    parser.add_argument("--out", type=Path, default=Path("results/reliability"))
    parser.add_argument("--data-dir", default=None, help="corpora (default $VASWANI_DATA)")
    args = parser.parse_args(argv)
    if args.data_dir:
        os.environ["VASWANI_DATA"] = str(Path(args.data_dir).resolve())
    try:
        result = fault_loop(args.workdir, kills=args.kills, seed=args.seed, max_steps=args.max_steps,
                            log=lambda message: print(message, file=sys.stderr, flush=True))
    except TrainingProcessFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_results(result, args.out, command=shlex.join(["python", "-m", "vaswani.tools.faults", *sys.argv[1:]]))
    print(f"bit_identical: {result.bit_identical}; every checkpoint loaded: {result.every_checkpoint_loaded}; "
          f"wrote {args.out}/results.json and table.md")
    return 0 if result.bit_identical and result.every_checkpoint_loaded else 1


if __name__ == "__main__":
    sys.exit(main())
