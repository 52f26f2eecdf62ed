"""Where the time goes: ``torch.profiler``'s operators summed by kind, for any engine the benchmarks time.

An operator's *self* time excludes the operators it calls, so the kinds add up to all operator time without
counting anything twice. The profiler slows short operators (it records each call), long ones such as the matrix
products hardly at all: shares and the long operators are what a profile says, not its total.

    profile = profile_by_kind(lambda: model_step(batch))    # an OperatorProfile: wall_ms, kinds_ms, ...
    lines = kind_table([("ours", profile), ("marian", other)])
    peak = matmul_peak(threads=2)                             # GFLOP/s of a large torch.mm, the rate to compare to

The matrix products' floating-point operations come from the profiler (``with_flops``), so a profile also says at
what rate they ran, and how far an engine could get if everything but its arithmetic took no time
(:func:`ceiling_line`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Callable

from vaswani.arguments import ranged
from vaswani.settings import MAX_COUNT
from vaswani.training.flops import measured_matmul_flops

OTHER = "other (views, allocation, small ops)"
MATRIX_PRODUCTS, ATTENTION_KERNEL = "matrix products", "attention kernel"
# The model's own arithmetic, which no bookkeeping can remove: the ceiling (ceiling_line) keeps its time.
ARITHMETIC = (MATRIX_PRODUCTS, ATTENTION_KERNEL)
# Checked in order: the first kind whose test matches an operator's name is its kind.
OPERATOR_KINDS: list[tuple[str, Callable[[str], bool]]] = [
    ("optimizer (AdamW)", lambda name: "adam" in name or name.startswith("aten::_foreach")),
    (MATRIX_PRODUCTS, lambda name: name in {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                              "aten::matmul", "aten::dot", "aten::addbmm"}),
    (ATTENTION_KERNEL, lambda name: "scaled_dot_product" in name),
    ("backward of other operators", lambda name: "backward" in name),
    ("softmax and loss", lambda name: name in {"aten::_log_softmax", "aten::_softmax", "aten::log_softmax",
                                               "aten::softmax", "aten::nll_loss_forward", "aten::nll_loss2d_forward",
                                               "aten::cross_entropy_loss"}),
    ("max / top-k / sort", lambda name: name in {"aten::max", "aten::topk", "aten::sort", "aten::argmax",
                                                 "aten::amax", "aten::min", "aten::argmin"}),
    ("dropout and random numbers", lambda name: name in {"aten::bernoulli_", "aten::random_", "aten::uniform_",
                                                         "aten::native_dropout", "aten::randint"}),
    ("copies, gathers, reorders", lambda name: name in {
        "aten::copy_", "aten::index_select", "aten::index", "aten::cat", "aten::gather", "aten::index_copy_",
        "aten::clone", "aten::index_put_", "aten::_index_put_impl_", "aten::masked_select", "aten::scatter_",
        "aten::repeat_interleave", "aten::fill_", "aten::zero_", "aten::embedding", "aten::nonzero",
        "aten::_to_copy"}),
    ("layer norm", lambda name: name == "aten::native_layer_norm"),
    ("element-wise", lambda name: name in {
        "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
        "aten::clamp_min", "aten::relu", "aten::gelu", "aten::where", "aten::masked_fill", "aten::masked_fill_",
        "aten::exp", "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::bitwise_or",
        "aten::bitwise_and", "aten::bitwise_not", "aten::logical_not", "aten::pow", "aten::log", "aten::neg",
        "aten::remainder", "aten::floor_divide", "aten::any", "aten::all", "aten::sum", "aten::mean",
        "aten::__rshift__", "aten::__and__", "aten::bitwise_right_shift"}),
]


@dataclass
class OperatorTime:
    name: str  # the aten operator
    self_ms: float
    calls: int


@dataclass
class OperatorProfile:
    """A workload under torch.profiler: its wall clock, self CPU ms per kind (largest first), the matrix
    products' GFLOP (of one pass), and its largest operators by self time."""

    wall_ms: float
    kinds_ms: dict[str, float]
    matmul_gflop: float
    passes: int
    top_operators: list[OperatorTime]


def possessive(name: str) -> str:
    """The possessive of an engine's name: vaswani's, MarianMT's, ours'."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def operator_kind(name: str) -> str:
    """The kind an aten operator's time is counted under (``OTHER`` if none matches)."""
    return next((kind for kind, matches in OPERATOR_KINDS if matches(name)), OTHER)


PROFILE_PASSES = 3


def add_passes_argument(parser: argparse.ArgumentParser) -> None:
    """``--profile-passes``, shared by the benchmarks that profile."""
    parser.add_argument("--profile-passes", type=ranged(int, ge=1, le=MAX_COUNT), default=PROFILE_PASSES, metavar="N",
                        help=f"profiled passes per engine; each kind's least time over them (default {PROFILE_PASSES})")


def profile_by_kind(run: Callable[[], Any], top: int = 15, passes: int = PROFILE_PASSES) -> OperatorProfile:
    """Run ``run()`` ``passes`` times under torch.profiler: wall ms, self CPU ms per kind (largest first), the
    matrix products' GFLOP (of one pass), top operators (of the fastest pass).

    With several passes every figure is its least over the passes: on a shared machine one pass can land in a slow
    moment, and a kind's least time is its least disturbed one (the work is the same in every pass)."""
    one = [_profile_pass(run) for _ in range(passes)]
    kinds = {kind: min(p.kinds_ms.get(kind, 0.0) for p in one)
             for kind in {k for p in one for k in p.kinds_ms}}
    fastest = min(one, key=lambda p: p.wall_ms)
    return OperatorProfile(fastest.wall_ms,
                           {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
                           fastest.matmul_gflop, passes, fastest.top_operators[:top])


def _profile_pass(run: Callable[[], Any]) -> OperatorProfile:
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        run()
    wall_ms = (time.perf_counter() - start) * 1e3
    kinds: dict[str, float] = {}
    operators = []
    matmul_flops = 0
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        ms = event.self_cpu_time_total / 1e3
        kind = operator_kind(event.key)
        kinds[kind] = kinds.get(kind, 0.0) + ms
        if kind == MATRIX_PRODUCTS:
            matmul_flops += event.flops
        operators.append(OperatorTime(event.key, round(ms, 2), event.count))
    operators.sort(key=lambda o: -o.self_ms)
    return OperatorProfile(round(wall_ms, 1), kinds, round(matmul_flops / 1e9, 3), 1, operators)


def matmul_rate(profile: OperatorProfile) -> float | None:
    """GFLOP/s of a profile's matrix products (None when it has none, or no FLOP count)."""
    ms = profile.kinds_ms.get(MATRIX_PRODUCTS, 0.0)
    gflop = profile.matmul_gflop
    return gflop / (ms / 1e3) if ms and gflop else None


def matmul_peak(threads: int, size: int = 1024, repeats: int = 25) -> float:
    """GFLOP/s of ``torch.mm`` on two (size × size) float32 matrices at ``threads`` threads, the best of
    ``repeats`` (:func:`vaswani.training.flops.measured_matmul_flops`). Measured in the run whose profiles it is
    set against, because a shared machine's speed drifts between runs; the best of many repeats, because a few can
    all land in a slow moment and put the profiled products above "the peak"."""
    import torch


    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return measured_matmul_flops(torch.device("cpu"), torch.float32, size, repeats) / 1e9
    finally:
        torch.set_num_threads(before)


def ceiling_line(name: str, profile: OperatorProfile, peer: str, peer_ms: float, measure: str) -> str:
    """A markdown line: the most ``name`` could run at, as a multiple of ``peer``'s speed, if everything but its
    arithmetic (matrix products and the attention kernel, at the rate they ran) took no time: ``peer_ms`` (the
    peer's ``measure``) ÷ the time of ``name``'s arithmetic."""
    arithmetic = sum(profile.kinds_ms.get(kind, 0.0) for kind in ARITHMETIC)
    return (f"- If every operator but its matrix products and attention kernel took no time, {name} would run at "
            f"most at {peer_ms / arithmetic:.2f}× {possessive(peer)} speed ({possessive(peer)} {measure} "
            f"{peer_ms:.0f} ms ÷ {arithmetic:.0f} ms).")


def matmul_lines(name: str, profile: OperatorProfile, peak: float | None, threads: int) -> list[str]:
    """A markdown line on the rate of ``name``'s matrix products against the machine's measured peak."""
    rate = matmul_rate(profile)
    if rate is None or not peak:
        return []
    return [f"- {possessive(name)} matrix products ran at {rate:.0f} GFLOP/s: {100 * rate / peak:.0f} % of what "
            f"torch.mm reached on a 1024 × 1024 × 1024 product in the same run ({peak:.0f} GFLOP/s, {threads} "
            f"thread{'s' if threads > 1 else ''})."]


def kind_table(profiles: list[tuple[str, OperatorProfile]]) -> list[str]:
    """Markdown lines: one row per kind, an ``ms | share`` column pair per named profile, then their totals."""
    totals = [sum(p.kinds_ms.values()) for _, p in profiles]
    kinds = list(dict.fromkeys(k for _, p in profiles for k in p.kinds_ms))
    lines = ["| kind | " + " | ".join(f"{name} ms | share" for name, _ in profiles) + " |",
             "|---|" + "---:|---:|" * len(profiles)]
    for kind in kinds:
        spent = [p.kinds_ms.get(kind, 0.0) for _, p in profiles]
        lines.append(f"| {kind} | " + " | ".join(f"{ms:.0f} | {100 * ms / total:.0f} %"
                                                 for ms, total in zip(spent, totals)) + " |")
    lines.append("| **all operators** | " + " | ".join(f"**{total:.0f}** | 100 %" for total in totals) + " |")
    lines.append("| profiled run, wall clock | " + " | ".join(f"{p.wall_ms:.0f} | " for _, p in profiles)
                 + " |")
    return lines


def largest_operators(name: str, profile: OperatorProfile, count: int = 6) -> str:
    """One markdown line naming a profile's ``count`` largest operators by self time."""
    top = ", ".join(f"`{o.name.removeprefix('aten::')}` {o.self_ms:.0f} ms ({o.calls} calls)"
                    for o in profile.top_operators[:count])
    return f"- {possessive(name)} largest operators: {top}."
