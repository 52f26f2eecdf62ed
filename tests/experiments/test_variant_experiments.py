"""`vaswani experiment robustness` and `ablation`: the perturbations do exactly what they claim, the position-wise
scores add up to the training loss's, finished variant runs are reused (and a different config is refused),
and both smoke runs write their tables and plots from real Multi30k data."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.experiments.ablation import (
    ABLATION_VARIANTS,
    AblationResults,
    AblationRow,
    AblationSettings,
    findings,
    join_groups,
)
from vaswani.experiments.perturb import CONDITIONS, drop_tokens, perturb_all, repeat_tokens, shuffle_middle
from vaswani.experiments.variants import RunVariant, threads_per_run, train_variants
from vaswani.model import Transformer
from vaswani.provenance import usable_cores
from vaswani.records import from_json, to_json
from vaswani.training.loss import translation_loss
from vaswani.training.metrics import MetricsRecord, training_speed
from vaswani.training.scoring import id_batches, teacher_forced_scores

PAD = 0


# ---- perturbations ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [4, 9, 20, 37])
def test_shuffle_permutes_exactly_the_middle_half(n: int) -> None:
    ids = np.arange(10, 10 + n)
    width = round(0.5 * n)
    start = (n - width) // 2
    changed = False
    for seed in range(5):
        out = shuffle_middle(ids, np.random.default_rng(seed))
        assert sorted(out[start : start + width]) == list(ids[start : start + width])
        assert (out[:start] == ids[:start]).all() and (out[start + width :] == ids[start + width :]).all()
        changed |= not (out == ids).all()
    assert changed
    assert abs((start + width / 2) - n / 2) <= 0.5  # centred on the midpoint


@pytest.mark.parametrize("n", [5, 10, 31])
def test_drop_pads_a_fifth_of_the_tokens_and_keeps_the_rest_in_place(n: int) -> None:
    ids = np.arange(10, 10 + n)
    out = drop_tokens(ids, np.random.default_rng(0), PAD)
    dropped = out == PAD
    assert dropped.sum() == round(0.2 * n)
    assert (out[~dropped] == ids[~dropped]).all()


@pytest.mark.parametrize("n", [5, 10, 31])
def test_repeat_inserts_a_copy_after_a_fifth_of_the_tokens(n: int) -> None:
    ids = np.arange(10, 10 + n)  # distinct ids: every duplicate is an inserted copy
    out = repeat_tokens(ids, np.random.default_rng(0))
    copies = round(0.2 * n)
    assert len(out) == n + copies
    repeated = np.flatnonzero(out[1:] == out[:-1]) + 1
    assert len(repeated) == copies
    assert (np.delete(out, repeated) == ids).all()  # removing the copies gives the sentence back


def test_perturbations_are_seeded_and_leave_the_input_alone() -> None:
    rng = np.random.default_rng(0)
    sources = [rng.integers(3, 100, size=int(n)) for n in rng.integers(3, 40, size=50)]
    before = [s.copy() for s in sources]
    for condition in CONDITIONS:
        first, second = perturb_all(sources, condition, 7, PAD), perturb_all(sources, condition, 7, PAD)
        assert all((a == b).all() for a, b in zip(first, second))
    assert all((a == b).all() for a, b in zip(sources, before))
    assert all((a == b).all() for a, b in zip(perturb_all(sources, "control", 0, PAD), sources))
    other_seed = perturb_all(sources, "shuffle", 8, PAD)
    assert any(not (a == b).all() for a, b in zip(perturb_all(sources, "shuffle", 7, PAD), other_seed))


# ---- scoring ------------------------------------------------------------------------------------------------
class _Ids:
    pad_id, bos_id, eos_id = 0, 1, 2


def test_position_wise_scores_add_up_to_the_training_loss() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=50)).eval()
    rng = np.random.default_rng(0)
    sources = [rng.integers(3, 50, size=int(n)) for n in rng.integers(2, 12, size=9)]
    targets = [rng.integers(3, 50, size=int(n)) for n in rng.integers(2, 12, size=9)]
    batches = id_batches(sources, targets, _Ids(), torch.device("cpu"), max_tokens=40)  # several batches
    scores = teacher_forced_scores(model, batches, label_smoothing=0.1, per_position=True)
    assert scores.tokens == sum(len(t) + 1 for t in targets) == sum(scores.position_count)
    assert scores.position_count[0] == 9 and scores.position_count[-1] >= 1

    from vaswani.data.batching import collate

    batch = collate([(i, s, t) for i, (s, t) in enumerate(zip(sources, targets))])
    with torch.inference_mode():
        reference = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, 0.1)
    assert scores.nll == pytest.approx(float(reference.nll_sum) / reference.n_tokens, rel=1e-5)
    assert scores.loss == pytest.approx(float(reference.loss_sum) / reference.n_tokens, rel=1e-5)
    assert scores.accuracy == pytest.approx(float(reference.n_correct) / reference.n_tokens)
    counts, accuracy = np.array(scores.position_count), np.array(scores.position_accuracy)
    assert (counts * accuracy).sum() == pytest.approx(float(reference.n_correct))


def test_join_groups_keeps_only_full_groups() -> None:
    assert join_groups(["a", "b", "c", "d", "e"], 2) == ["a b", "c d"]
    assert join_groups(["a", "b"], 1) == ["a", "b"]
    assert join_groups(["a"], 2) == []


def test_claims_are_read_against_the_seed_noise() -> None:
    nll = {"sinusoidal": 3.00, "sinusoidal-seed1": 3.05, "pre-ln": 2.80, "post-ln-no-warmup": 3.08,
           "pre-ln-no-warmup": 2.75, "gelu": 3.20, "rope": 2.95, "learned": 3.01}
    rows = [AblationRow(v, v, [], 100, x, x, 0.5, None, 0, "max_steps", None, None, test_bleu=20.0)
            for v, x in nll.items()]
    verdicts = {f.variant: f for f in findings(rows)}
    assert verdicts["pre-ln"].verdict == "agrees (beyond noise)"  # 0.20 > 2 × 0.05
    assert verdicts["pre-ln"].noise_multiple == pytest.approx(4.0)
    assert verdicts["sinusoidal"].verdict == "within noise: not shown"  # warmup: 0.08 ≤ 0.10
    assert verdicts["pre-ln-no-warmup"].verdict == "agrees (within noise)"  # "does not need": no difference
    assert verdicts["gelu"].verdict == "disagrees (beyond noise)"  # worse by 0.20
    assert verdicts["rope"].verdict == "within noise: not shown"
    assert verdicts["learned"].verdict == "agrees (within noise)"
    rows[3].val_nll = float("nan")  # a diverged run
    assert {f.variant: f for f in findings(rows)}["sinusoidal"].verdict == "diverged"


def test_the_published_ablation_reads_back_as_its_records() -> None:
    path = Path(__file__).parents[2] / "results" / "ablation" / "results.json"
    payload = json.loads(path.read_text())
    settings = from_json(AblationSettings, payload["settings"], str(path))
    results = from_json(AblationResults, payload["results"], str(path))
    assert to_json(settings) == payload["settings"] and to_json(results) == payload["results"]
    assert results.findings[0].claim.startswith("pre-LN") and settings.runs["rope"].settings


def test_step_time_leaves_out_the_windows_with_an_evaluation() -> None:
    records = [MetricsRecord("train", 10, elapsed_s=10.0, tokens_per_s=100.0),
               MetricsRecord("train", 20, elapsed_s=20.0, tokens_per_s=100.0),
               MetricsRecord("valid", 20),  # the trainer evaluates right after logging step 20
               MetricsRecord("train", 30, elapsed_s=90.0, tokens_per_s=100.0),  # includes the evaluation
               MetricsRecord("train", 40, elapsed_s=100.0, tokens_per_s=100.0)]
    assert training_speed(records).seconds_per_step == pytest.approx(1.0)


# ---- the experiments end to end -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One directory for both smoke runs: robustness trains three variants, ablation reuses them."""
    return tmp_path_factory.mktemp("variant-experiments")


def test_robustness_smoke(workdir: Path, data_dir: Path, experiment, monkeypatch) -> None:
    monkeypatch.chdir(workdir)  # the trainer caches prepared data under ./runs/data
    payload = experiment("robustness", workdir / "robustness", "--smoke", "--runs-dir", str(workdir / "runs"),
                         "--data-dir", str(data_dir))
    rows = payload["results"]["rows"]
    assert [(r["variant"], r["condition"]) for r in rows] == [
        (v, c) for v in ("sinusoidal", "learned", "rope") for c in CONDITIONS]
    for row in rows:
        assert np.isfinite(row["nll"]) and 0 <= row["accuracy"] <= 1 and row["bleu"] is not None
        assert row["tokens"] == sum(row["position_count"])
    controls = {r["variant"]: r for r in rows if r["condition"] == "control"}
    assert all(r["delta_nll"] == r["nll"] - controls[r["variant"]]["nll"] for r in rows)
    configs = {v: (workdir / "runs" / v / "config.yaml").read_text() for v in ("sinusoidal", "learned", "rope")}
    assert "positions: learned" in configs["learned"] and "positions: rope" in configs["rope"]
    assert (workdir / "robustness" / "position_accuracy.png").is_file()


def test_ablation_smoke_reuses_finished_runs(workdir: Path, data_dir: Path, experiment, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    if not (workdir / "runs" / "rope" / "summary.json").is_file():
        pytest.skip("needs the robustness smoke's runs")
    before = (workdir / "runs" / "rope" / "metrics.jsonl").stat().st_mtime_ns
    payload = experiment("ablation", workdir / "ablation", "--smoke", "--runs-dir", str(workdir / "runs"),
                         "--data-dir", str(data_dir))
    assert (workdir / "runs" / "rope" / "metrics.jsonl").stat().st_mtime_ns == before  # not retrained
    runs = payload["settings"]["runs"]
    assert runs["rope"]["reused"] and not runs["gelu"]["reused"]
    rows = payload["results"]["rows"]
    assert [r["variant"] for r in rows] == list(ABLATION_VARIANTS)
    assert all(r["steps"] == 4 and np.isfinite(r["val_nll"]) and r["test_bleu"] is not None for r in rows)
    assert all(r["seconds_per_step"] is None or r["seconds_per_step"] > 0 for r in rows)
    lengths = payload["results"]["length_generalisation"]
    assert {(r["variant"], r["group_size"]) for r in lengths} == {
        (v, k) for v in ("sinusoidal", "rope", "learned") for k in (1, 2)}
    doubled = {r["variant"]: r for r in lengths if r["group_size"] == 2}
    single = {r["variant"]: r for r in lengths if r["group_size"] == 1}
    assert doubled["rope"]["mean_source_tokens"] > 1.5 * single["rope"]["mean_source_tokens"]
    # an untrained smoke model may stop at once (length ratio 0); the teacher-forced score always exists
    assert all(np.isfinite(r["teacher_forced_nll"]) and r["length_ratio"] >= 0 for r in lengths)
    claims = {f["claim"]: f for f in payload["results"]["findings"]}
    by_name = {r["variant"]: r for r in rows}
    warmup = claims["post-LN needs warmup"]
    assert warmup["delta_val_nll"] == pytest.approx(by_name["sinusoidal"]["val_nll"] -
                                                    by_name["post-ln-no-warmup"]["val_nll"])
    config = (workdir / "runs" / "pre-ln-no-warmup" / "config.yaml").read_text()
    assert "norm: pre" in config and "warmup_ramp: false" in config
    assert (workdir / "ablation" / "learning_curves.png").is_file()


def test_a_run_with_another_config_is_never_mistaken_for_a_variant(workdir: Path, data_dir: Path,
                                                                   monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    if not (workdir / "runs" / "sinusoidal" / "summary.json").is_file():
        pytest.skip("needs the robustness smoke's runs")
    runs = workdir / "other-runs"
    shutil.copytree(workdir / "runs" / "sinusoidal", runs / "gelu", symlinks=True)  # a sinusoidal/ReLU run
    with pytest.raises(VaswaniError, match="another config"):
        train_variants([RunVariant("gelu", "GELU", ("model.activation=gelu",))], "smoke", runs, data_dir,
                       ["train.max_steps=4", "train.max_epochs=null", "train.progress=false",
                        "train.eval_every_steps=4", "train.bleu_subset=0"])
    summary = json.loads((workdir / "runs" / "sinusoidal" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_steps"


STUDY_SCRIPT = """
import sys
from pathlib import Path
from vaswani.errors import VaswaniError
from vaswani.experiments.variants import RunVariant, threads_per_run, train_variants
variants = [RunVariant(name, name, (f"model.dropout={p}",)) for name, p in (("a", 0.1), ("b", 0.2), ("c", 0.3))]
extra = ["train.max_steps=100000", "train.max_epochs=null", "train.progress=false", "train.log_every_steps=1",
         "train.eval_every_steps=100000", "train.bleu_subset=0", "train.num_threads=1"]
try:
    train_variants(variants, "smoke", Path(sys.argv[1]), Path(sys.argv[2]), extra, jobs=2)
except VaswaniError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
"""


def test_a_stop_signal_to_a_parallel_study_checkpoints_every_running_run_and_starts_no_other(
        tmp_path: Path, data_dir: Path) -> None:
    runs = tmp_path / "runs"
    study = subprocess.Popen([sys.executable, "-c", STUDY_SCRIPT, str(runs), str(data_dir)], cwd=tmp_path,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env={**os.environ, "VASWANI_CACHE": str(tmp_path / "cache")})
    try:
        deadline = time.monotonic() + 240
        while not all((runs / name / "metrics.jsonl").is_file() for name in "ab"):  # both are past an update
            assert study.poll() is None and time.monotonic() < deadline, "the study never started its two runs"
            time.sleep(0.2)
        study.send_signal(signal.SIGTERM)
        _, stderr = study.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(study.pid, signal.SIGKILL)  # whatever a failing study left running
    assert study.returncode == 2 and "interrupted: a, b" in stderr and "run the same command again" in stderr
    for name in "ab":
        summary = json.loads((runs / name / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted" and summary["signal"] == "SIGTERM"
        assert (runs / name / "checkpoints" / "last").exists()
    assert not (runs / "c").exists()  # the queued run never started


@pytest.mark.parametrize(("cores", "jobs", "threads"), [(2, 2, 1), (2, 1, 2), (16, 4, 4), (3, 2, 1), (2, 3, 1)])
def test_runs_trained_at_once_share_the_cores(cores: int, jobs: int, threads: int) -> None:
    assert threads_per_run(cores, jobs) == threads


def test_a_parallel_study_gives_each_run_its_share_of_the_cores_and_reuses_it_at_any_jobs(
        tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    """Two runs at once on this machine's cores take half of them each (not torch's default of one thread per
    core each, which oversubscribes the cores); the thread count is not a training setting, so the same study run
    again with --jobs 1 reuses both runs instead of calling them another config."""
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    variants = [RunVariant(name, name, (f"model.dropout={p}",)) for name, p in (("a", 0.1), ("b", 0.2))]
    extra = ["train.max_steps=2", "train.max_epochs=null", "train.progress=false", "train.eval_every_steps=2",
             "train.bleu_subset=0"]
    train_variants(variants, "smoke", tmp_path / "runs", data_dir, extra, jobs=2)
    expected = threads_per_run(usable_cores(), 2)
    for name in "ab":
        start = json.loads((tmp_path / "runs" / name / "provenance.jsonl").read_text().splitlines()[0])
        assert start["torch_threads"] == expected
    again = train_variants(variants, "smoke", tmp_path / "runs", data_dir, extra, jobs=1)
    assert all(run.reused for run in again)
