"""Where a number came from: the command, the code (git commit) and the machine. A figure without these is not
a result: every results file the tool writes carries :func:`provenance`."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from vaswani.errors import VaswaniError

if TYPE_CHECKING:
    import torch

PROVENANCE_FILE = "provenance.jsonl"  # in a run directory: one record per start or resume of its training
_command: str | None = None
_GPU_DETAILS = ("cuda_memory_gib", "cuda_capability", "cuda_version")


@dataclass(frozen=True)
class GitState:
    """The commit of a source tree and whether it had uncommitted changes (both None outside a git checkout)."""

    commit: str | None = None
    dirty: bool | None = None

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Hardware:
    """The machine and the device that ran the model (:func:`hardware`)."""

    platform: str
    processor: str
    cpu_count: int
    torch: str
    torch_threads: int
    device: str
    device_name: str
    cuda_device: str | None = None  # the visible GPU, named also under a CPU measurement
    cuda_memory_gib: float | None = None
    cuda_capability: str | None = None
    cuda_version: str | None = None
    # what decides a CPU's speed and precision (:func:`cpu_class`); None in a file that does not record it
    cpu_class: str | None = None

    def to_json(self) -> dict[str, object]:
        """The JSON object; without a GPU it has no GPU details, only ``"cuda_device": null``."""
        return {key: value for key, value in dataclasses.asdict(self).items()
                if self.cuda_device is not None or key not in _GPU_DETAILS}


@dataclass(frozen=True)
class Provenance:
    """Where a number came from (:func:`provenance`): the first keys of every results file."""

    command: str
    git: GitState
    hardware: Hardware
    versions: dict[str, str] = field(default_factory=dict)  # files of the earliest versions have none

    def to_json(self) -> dict[str, object]:
        return {"command": self.command, "git": self.git.to_json(), "hardware": self.hardware.to_json(),
                "versions": dict(self.versions)}

    @classmethod
    def from_json(cls, value: Mapping[str, object], source: str = "a results file") -> Provenance:
        """The provenance in the JSON object ``value`` (other keys ignored), every field checked."""
        from vaswani.records import from_json  # here, not at the top: every command's start-up imports this module

        return from_json(cls, dict(value), source)


@dataclass(frozen=True)
class TrainingStart:
    """The first record of a run's ``provenance.jsonl``, as leniently as any version wrote it (a key it lacks is
    None here), and whole in ``record``, which a results file quotes as it is."""

    command: str | None = None
    git: GitState = GitState()
    processor: str | None = None
    device_name: str | None = None
    precision: str | None = None
    torch_threads: int | None = None
    record: dict[str, object] = field(default_factory=dict)
    cpu_class: str | None = None


def record_command(argv: Sequence[str]) -> None:
    """Remember the arguments of the ``vaswani`` command this process runs (``cli.main`` calls this), so every
    results file names the command that made it — also when ``main`` is called in-process, as tests do."""
    global _command
    _command = shlex.join(["vaswani", *argv])


def command_line() -> str:
    """The command that made this process's results: the recorded ``vaswani …`` command, else ``sys.argv``."""
    return _command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


def provenance(device: torch.device | str = "cpu", command: str | None = None) -> Provenance:
    """The command line, git commit (and whether the tree had uncommitted changes), hardware and library versions."""
    return Provenance(command or command_line(), git_state(), hardware(device), versions())


def first_training_start(run_dir: Path) -> TrainingStart:
    """The first record of a run's ``provenance.jsonl``: the command, commit and machine its training started with
    (all None when it has none). A first line that is not a JSON object is a VaswaniError naming ``path:line``."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return TrainingStart()
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # not JSON, or a whole number too long for Python to read
            record = None
        if not isinstance(record, dict):
            raise VaswaniError(f"{path}:{number}: not a provenance record (a JSON object); the file is damaged")
        git, machine = (part if isinstance(part := record.get(key), dict) else {} for key in ("git", "hardware"))
        return TrainingStart(record.get("command"), GitState(git.get("commit"), git.get("dirty")),
                             machine.get("processor"), machine.get("device_name"), record.get("precision"),
                             record.get("torch_threads"), record, machine.get("cpu_class"))
    return TrainingStart()


def provenance_lines(record: Provenance) -> list[str]:
    """The markdown lines a results table ends with: its command, commit and hardware (from :func:`provenance`)."""
    dirty = " (uncommitted changes)" if record.git.dirty else ""
    return [f"Command: `{record.command}`  ", f"Commit: {record.git.commit}{dirty}  ",
            f"Hardware: {json.dumps(record.hardware.to_json())}"]


def git_state() -> GitState:
    """The commit of this source tree and whether it had uncommitted changes.

    ``VASWANI_GIT_COMMIT``, when set, names the commit and wins over any git checkout around the tree: a lent GPU
    machine runs a copy of the tree, which may sit inside another checkout or none, and
    ``scripts/gpu-session.sh`` sets it to the commit the copy was made from (``prepare`` checks that tree is
    clean first)."""
    copied_from = os.environ.get("VASWANI_GIT_COMMIT")
    if copied_from:
        return GitState(copied_from, False)
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return GitState()
    return GitState(commit.stdout.strip(), bool(status.stdout.strip())) if commit.returncode == 0 else GitState()


def load_averages() -> list[float]:
    """The machine's 1, 5 and 15-minute load averages ([] where the system has none): how many processes wanted a
    core, a measurement's and every other job's, so that a reader can tell a quiet run from a crowded one."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return []


def versions() -> dict[str, str]:
    import platform  # here and below, not at the top: `platform` compiles regular expressions at import, a cost
    from importlib import metadata  # every command's start-up would pay for recording its command line

    found = {"python": platform.python_version()}
    for package in ("torch", "tokenizers", "sacrebleu", "numpy", "safetensors", "matplotlib", "pyyaml"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def hardware(device: torch.device | str = "cpu") -> Hardware:
    """Platform, CPU, torch version and thread count, the name of the device that ran the model, and the GPU's
    details whenever one is visible (a CPU measurement on a GPU machine says so)."""
    import platform

    import torch  # here, not at the top: every command records its command line through this module

    device = torch.device(device)
    gpu: dict[str, object] = {}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device if device.type == "cuda" else 0)
        gpu = {"cuda_device": props.name, "cuda_memory_gib": round(props.total_memory / 2**30, 1),
               "cuda_capability": f"{props.major}.{props.minor}", "cuda_version": torch.version.cuda}
    return Hardware(platform.platform(), _cpu_name(), usable_cores(), torch.__version__, torch.get_num_threads(),
                    str(device), torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(), **gpu,
                    cpu_class=cpu_class(_cpu_flags()))


# The CPU classes that train and translate at different speeds, most capable first: bf16 units make
# precision=auto pick bf16, AVX-512 without them runs fp32 on wider vectors than AVX2.
CPU_CLASSES = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512 without bf16 units"),
               ("avx2", "AVX2 without bf16 units"))


def cpu_class(flags: Collection[str]) -> str | None:
    """The class of a CPU with these ``/proc/cpuinfo`` flags, e.g. ``'AVX2 without bf16 units'``; None when it has
    none of the classes' flags (another architecture, or no /proc/cpuinfo)."""
    return next((name for flag, name in CPU_CLASSES if flag in flags), None)


def _cpu_flags() -> frozenset[str]:
    return frozenset((_cpuinfo("flags") or "").split())


def _cpuinfo(key: str) -> str | None:
    """The first ``key`` line's value in /proc/cpuinfo (None where there is no such file or line)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. a container's share), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpu_name() -> str:
    import platform

    return _cpuinfo("model name") or platform.processor() or platform.machine()
