"""`vaswani.benchmarks.profiling`: operators land in the right kind, and a profile shows what a workload does."""

from __future__ import annotations

import torch

from vaswani.benchmarks.profiling import OTHER, kind_table, largest_operators, operator_kind, profile_by_kind


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
    top = profile["top_operators"][0]
    assert top["name"] == "aten::mm" and top["calls"] == 20
    assert next(iter(profile["kinds_ms"])) == "matrix products"  # the largest kind comes first
    assert {o["name"]: o["calls"] for o in profile["top_operators"]}["aten::add"] == 3
    assert 0 < sum(profile["kinds_ms"].values()) <= 1.01 * profile["wall_ms"]

    lines = kind_table([("x", profile), ("y", profile)])
    assert lines[0] == "| kind | x ms | share | y ms | share |"
    row = next(line for line in lines if line.startswith("| matrix products |"))
    share = 100 * profile["kinds_ms"]["matrix products"] / sum(profile["kinds_ms"].values())
    assert f"{share:.0f} %" in row
    assert largest_operators("x", profile).startswith("- x's largest operators: `mm`")
