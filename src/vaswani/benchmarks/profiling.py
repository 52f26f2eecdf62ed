"""Where the time goes: ``torch.profiler``'s operators summed by kind, for any engine the benchmarks time.

An operator's *self* time excludes the operators it calls, so the kinds add up to all operator time without
counting anything twice. The profiler slows short operators (it records each call), long ones such as the matrix
products hardly at all: shares and the long operators are what a profile says, not its total.

    profile = profile_by_kind(lambda: model_step(batch))    # {"wall_ms", "kinds_ms", "top_operators"}
    lines = kind_table([("ours", profile), ("marian", other)])
"""

from __future__ import annotations

import time
from typing import Any, Callable

OTHER = "other (views, allocation, small ops)"
# Checked in order: the first kind whose test matches an operator's name is its kind.
OPERATOR_KINDS: list[tuple[str, Callable[[str], bool]]] = [
    ("optimizer (AdamW)", lambda name: "adam" in name or name.startswith("aten::_foreach")),
    ("matrix products", lambda name: name in {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                              "aten::matmul", "aten::dot", "aten::addbmm"}),
    ("attention kernel", lambda name: "scaled_dot_product" in name),
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


def operator_kind(name: str) -> str:
    """The kind an aten operator's time is counted under (``OTHER`` if none matches)."""
    return next((kind for kind, matches in OPERATOR_KINDS if matches(name)), OTHER)


def profile_by_kind(run: Callable[[], Any], top: int = 15) -> dict[str, Any]:
    """Run ``run()`` once under torch.profiler: wall ms, self CPU ms per kind (largest first), top operators."""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    wall_ms = (time.perf_counter() - start) * 1e3
    kinds: dict[str, float] = {}
    operators = []
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        ms = event.self_cpu_time_total / 1e3
        kind = operator_kind(event.key)
        kinds[kind] = kinds.get(kind, 0.0) + ms
        operators.append({"name": event.key, "self_ms": round(ms, 2), "calls": event.count})
    operators.sort(key=lambda o: -o["self_ms"])
    return {"wall_ms": round(wall_ms, 1),
            "kinds_ms": {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "top_operators": operators[:top]}


def kind_table(profiles: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Markdown lines: one row per kind, an ``ms | share`` column pair per named profile, then their totals."""
    totals = [sum(p["kinds_ms"].values()) for _, p in profiles]
    kinds = list(dict.fromkeys(k for _, p in profiles for k in p["kinds_ms"]))
    lines = ["| kind | " + " | ".join(f"{name} ms | share" for name, _ in profiles) + " |",
             "|---|" + "---:|---:|" * len(profiles)]
    for kind in kinds:
        spent = [p["kinds_ms"].get(kind, 0.0) for _, p in profiles]
        lines.append(f"| {kind} | " + " | ".join(f"{ms:.0f} | {100 * ms / total:.0f} %"
                                                 for ms, total in zip(spent, totals)) + " |")
    lines.append("| **all operators** | " + " | ".join(f"**{total:.0f}** | 100 %" for total in totals) + " |")
    lines.append("| profiled run, wall clock | " + " | ".join(f"{p['wall_ms']:.0f} | " for _, p in profiles) + " |")
    return lines


def largest_operators(name: str, profile: dict[str, Any], count: int = 6) -> str:
    """One markdown line naming a profile's ``count`` largest operators by self time."""
    top = ", ".join(f"`{o['name'].removeprefix('aten::')}` {o['self_ms']:.0f} ms ({o['calls']} calls)"
                    for o in profile["top_operators"][:count])
    return f"- {name}'s largest operators: {top}."
