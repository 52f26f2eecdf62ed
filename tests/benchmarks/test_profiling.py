"""`vaswani.benchmarks.profiling`: operators land in the right kind, and a profile shows what a workload does."""

from __future__ import annotations

import torch

from vaswani.benchmarks.profiling import (
    OTHER,
    OperatorProfile,
    ceiling_line,
    kind_table,
    largest_operators,
    matmul_lines,
    matmul_peak,
    matmul_rate,
    operator_kind,
    profile_by_kind,
)


def test_operators_are_sorted_into_kinds() -> None:
    assert operator_kind("aten::addmm") == operator_kind("aten::bmm") == "matrix products"
    assert operator_kind("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention kernel"
    assert operator_kind("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention kernel"
    assert operator_kind("aten::native_layer_norm_backward") == "backward of other operators"
    assert operator_kind("aten::_fused_adamw_") == operator_kind("aten::_foreach_mul_") == "optimizer (AdamW)"
    assert operator_kind("aten::index_select") == "copies, gathers, reorders"
    assert operator_kind("aten::topk") == "max / top-k / sort"
    assert operator_kind("aten::view") == operator_kind("aten::something_new") == OTHER


def test_a_profile_counts_calls_and_puts_the_matrix_products_first() -> None:
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def workload() -> None:
        for _ in range(20):
            torch.mm(a, b)
        for _ in range(3):
            a.add(1.0)

    profile = profile_by_kind(workload)
    top = profile.top_operators[0]
    assert top.name == "aten::mm" and top.calls == 20
    assert next(iter(profile.kinds_ms)) == "matrix products"  # the largest kind comes first
    assert {o.name: o.calls for o in profile.top_operators}["aten::add"] == 3
    assert 0 < sum(profile.kinds_ms.values()) <= 1.01 * profile.wall_ms

    lines = kind_table([("x", profile), ("y", profile)])
    assert lines[0] == "| kind | x ms | share | y ms | share |"
    row = next(line for line in lines if line.startswith("| matrix products |"))
    share = 100 * profile.kinds_ms["matrix products"] / sum(profile.kinds_ms.values())
    assert f"{share:.0f} %" in row
    assert largest_operators("x", profile).startswith("- x's largest operators: `mm`")


def test_a_profile_counts_the_matrix_products_floating_point_operations() -> None:
    x, w, q = torch.randn(64, 256), torch.randn(768, 256), torch.randn(8, 16, 32)

    def workload() -> None:
        torch.nn.functional.linear(x, w, torch.zeros(768))  # addmm
        torch.mm(x, w.t())
        torch.bmm(q, q.transpose(1, 2))
        x.add(1.0)  # counts no FLOP

    profile = profile_by_kind(workload)
    assert profile.matmul_gflop == round((2 * 2 * 64 * 256 * 768 + 2 * 8 * 16 * 16 * 32) / 1e9, 3)
    rate = matmul_rate(profile)
    assert rate == profile.matmul_gflop / (profile.kinds_ms["matrix products"] / 1e3)
    assert matmul_rate(OperatorProfile(1.0, {"element-wise": 1.0}, 0.0, 1, [])) is None


def test_the_peak_and_the_ceiling_are_stated_from_the_numbers() -> None:
    assert matmul_peak(threads=1, size=128, repeats=2) > 0
    assert torch.get_num_threads() >= 1
    kinds = {"matrix products": 400.0, "attention kernel": 50.0, "element-wise": 100.0}
    profile = OperatorProfile(600.0, kinds, matmul_gflop=20.0, passes=1, top_operators=[])
    assert matmul_lines("ours", profile, peak=100.0, threads=2) == [
        "- ours' matrix products ran at 50 GFLOP/s: 50 % of what torch.mm reached on a 1024 × 1024 × 1024 product "
        "in the same run (100 GFLOP/s, 2 threads)."]
    assert matmul_lines("ours", profile, peak=None, threads=2) == []
    assert ceiling_line("ours", profile, "marian", 900.0, "unprofiled median") == (
        "- If every operator but its matrix products and attention kernel took no time, ours would run at most at "
        "2.00× marian's speed (marian's unprofiled median 900 ms ÷ 450 ms).")


def test_several_passes_keep_each_kinds_least_time() -> None:
    """A pass that lands in a slow moment does not count: here the first and last passes do 6× the products of
    the second (a margin no load on a shared machine turns around; 2× was not enough)."""
    a = torch.randn(256, 256)
    products = iter([60, 10, 60])

    def workload() -> None:
        for _ in range(next(products)):
            torch.mm(a, a)

    profile = profile_by_kind(workload, passes=3)
    assert profile.passes == 3
    assert {o.name: o.calls for o in profile.top_operators}["aten::mm"] == 10  # the fastest pass's
    assert profile.matmul_gflop == round(10 * 2 * 256**3 / 1e9, 3)


def test_every_phase_the_engine_profile_looks_for_names_a_function_of_that_file() -> None:
    """A phase is found in the profile by its file and function name: a file moved or a function renamed would make
    the phase silently absent from every profile."""
    import ast
    from pathlib import Path

    import vaswani
    from vaswani.benchmarks.engine_profile import STARTUP_PHASES, TRANSLATION_PHASES

    package = Path(vaswani.__file__).parent
    for what, (file, function) in [*STARTUP_PHASES, *TRANSLATION_PHASES]:
        if not file.startswith("vaswani/"):
            continue  # another library's, or a built-in
        path = package.parent / file
        assert path.is_file(), f"{what}: {file} does not exist"
        names = {node.name for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        assert function in names or function == "__init__", f"{what}: {file} defines no {function}"


def test_the_engine_profile_finds_ctranslate2s_batches_and_the_python_around_them(trained_checkpoint, tmp_path) -> None:
    """ctranslate2's methods are not calls of their own to cProfile: the profile still counts the batches searched
    and splits the translation into CTranslate2's share and the Python around it."""
    import os
    import shutil
    import sys
    from pathlib import Path

    import pytest

    pytest.importorskip("ctranslate2")
    from vaswani.benchmarks.engine_profile import profile_translate
    from vaswani.benchmarks.engines import command_environment

    checkpoint = Path(shutil.copytree(trained_checkpoint, tmp_path / "checkpoint"))
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "source.txt").write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    env = command_environment(tmp_path / "pycache")
    env["PYTHONPATH"] = f"{Path(__file__).resolve().parents[2] / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"

    def command(source: Path, out: Path) -> list[str]:
        return [sys.executable, "-m", "vaswani", "translate", "--checkpoint", str(checkpoint), "--engine",
                "ctranslate2", "--length-norm", "power", "--beam", "2", "--threads", "1", "--batch-size", "1",
                "--input", str(source), "--output", str(out)]

    profile = profile_translate(command, tmp_path, env, "float32")
    search, rescoring = profile.translation[:2]
    assert profile.batches == search.calls == 2  # one sentence a batch
    assert search.seconds > 0 and 0 < search.share < 1 and profile.python_per_batch_ms > 0
    assert rescoring.seconds >= 0
    assert {phase.what.split(" (")[0] for phase in profile.startup if phase.seconds > 0} >= {"the CTranslate2 engine"}
