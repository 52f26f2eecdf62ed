"""``vaswani serve-bench``, the reporting half: what :mod:`vaswani.tools.serve_load` measured, as results.json
(every run, with provenance), table.md, README.md (the findings, every number read from the runs) and
throughput.png, plus screenshots of the page taken while a server runs (when Playwright and chromium are
installed)."""

from __future__ import annotations

import dataclasses
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vaswani.io import atomic_write_figure, atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    from vaswani.tools.serve_load import LoadTest, Run

MODES = ("batching", "no batching")


@dataclass
class Row:
    """One server at one level: medians over the repeats, and the spread of the rate."""

    server: str
    clients: int
    sentences_per_s: float
    sentences_per_s_min: float
    sentences_per_s_max: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    errors: int
    # batching rows: its rate over no batching's, per repeat (median and range); layout rows: over the bare
    # script's best median
    ratio: float | None = None
    ratio_range: tuple[float, float] | None = None


@dataclass
class Summary:
    rows: list[Row]  # batching and no batching at every level
    layout_rows: list[Row]  # each thread layout at the largest level
    health: dict[int, float]  # GET /health requests/s per level (median)
    model_alone: dict[int, float]  # the batcher without HTTP: sentences/s per level
    bare: dict[str, float]  # the bare script's sentences/s per layout (inter x intra), median
    checks: list[str]  # the targets, each with its measured figure


def row(server: str, clients: int, runs: list[Run]) -> Row:
    rates = [run.per_s for run in runs]

    def median(key: str) -> float | None:
        values = [getattr(run, key) for run in runs if getattr(run, key) is not None]
        return statistics.median(values) if values else None

    return Row(server, clients, statistics.median(rates), min(rates), max(rates), median("p50_ms"),
               median("p95_ms"), median("p99_ms"), sum(run.errors for run in runs))


def summarise(test: LoadTest) -> Summary:
    levels = sorted({run.clients for run in test.runs})
    rows = []
    for level in levels:
        runs = {mode: [r for r in test.runs if r.server == mode and r.clients == level] for mode in MODES}
        batched, alone = row("batching", level, runs["batching"]), row("no batching", level, runs["no batching"])
        ratios = sorted(a.per_s / b.per_s for a in runs["batching"] for b in runs["no batching"]
                        if a.repeat == b.repeat and b.per_s > 0)
        if ratios:
            batched.ratio, batched.ratio_range = statistics.median(ratios), (ratios[0], ratios[-1])
        rows += [batched, alone]
    bare = {name: statistics.median(r.sentences_per_s for r in test.bare_runs if r.layout == name)
            for name in dict.fromkeys(r.layout for r in test.bare_runs)}
    in_order = {name: rate for name, rate in bare.items() if name.endswith("in arrival order")}
    layout_rows = []
    for name in test.setup.get("layouts", []):
        runs = [r for r in test.layout_runs if r.server == name]
        if runs:
            layout_row = row(name, runs[0].clients, runs)
            if bare:
                best = max((in_order or bare).values())  # a server's ceiling: the sentences as they arrive
                per_repeat = sorted(r.per_s / best for r in runs)
                layout_row.ratio, layout_row.ratio_range = layout_row.sentences_per_s / best, (per_repeat[0],
                                                                                              per_repeat[-1])
            layout_rows.append(layout_row)
    health = {level: statistics.median(r.per_s for r in test.health_runs if r.clients == level) for level in levels
              if any(r.clients == level for r in test.health_runs)}
    model_alone = {alone.clients: alone.sentences_per_s for alone in test.model_alone}
    summary = Summary(rows, layout_rows, health, model_alone, bare, [])
    summary.checks = checks(summary)
    return summary


def checks(summary: Summary) -> list[str]:
    """The targets of continuous batching and of the thread layout, each stated with its figure and, where it is
    out of reach, the ceiling measured in the same run that shows why."""
    found = []
    batching = {r.clients: r for r in summary.rows if r.server == "batching"}
    levels = sorted(batching)
    if 1 in batching and batching[1].ratio is not None:
        one = batching[1]
        found.append(f"1 client: batching serves {one.ratio:.2f}× what no batching serves (per-repeat "
                     f"{one.ratio_range[0]:.2f}–{one.ratio_range[1]:.2f}; target ≥ 1.0×): "
                     f"{_verdict(one.ratio_range, 1.0)}.")
    if 1 in batching and 8 in batching and batching[1].p95_ms and batching[8].p95_ms:
        one, eight = batching[1], batching[8]
        line = (f"8 clients: p95 {eight.p95_ms:.0f} ms, {eight.p95_ms / one.p95_ms:.2f}× the one-client p95 of "
                f"{one.p95_ms:.0f} ms (target ≤ 2×)")
        rate = summary.model_alone.get(8)
        if rate:
            least = 1000 * 8 / rate  # Little's law: N clients in a closed loop wait N / throughput on average
            line += (f"; the model alone serves 8 callers at {rate:.0f} sentences/s, so 8 closed-loop clients wait "
                     f"at least 8 / {rate:.0f} = {least:.0f} ms on average, "
                     f"{least / one.p95_ms:.2f}× the one-client p95, before any HTTP")
        found.append(line + ".")
    if summary.layout_rows and summary.bare:
        best = max(summary.layout_rows, key=lambda r: r.sentences_per_s)
        in_order = {name: rate for name, rate in summary.bare.items() if name.endswith("in arrival order")}
        order_name, order_rate = max((in_order or summary.bare).items(), key=lambda item: item[1])
        sorted_name, sorted_rate = max(summary.bare.items(), key=lambda item: item[1])
        found.append(f"{best.clients} clients: the best thread layout, {best.server}, serves "
                     f"{best.sentences_per_s:.1f} sentences/s, {best.ratio:.2f}× the bare CTranslate2 script's "
                     f"{order_rate:.1f} in batches of {best.clients} ({order_name}, inter × intra threads; target "
                     f"≥ 0.9×) and {best.sentences_per_s / sorted_rate:.2f}× its best, {sorted_rate:.1f} "
                     f"({sorted_name}).")
    if levels:
        top = batching[levels[-1]]
        ceiling = summary.model_alone.get(top.clients)
        if ceiling:
            found.append(f"{top.clients} clients: batching serves {top.sentences_per_s:.1f} sentences/s; the model "
                         f"alone (no HTTP) {ceiling:.1f}; GET /health (no model) "
                         f"{summary.health.get(top.clients, 0):.0f} requests/s.")
    return found


def _verdict(ratio_range: tuple[float, float], target: float) -> str:
    low, high = ratio_range
    if low >= target:
        return "met in every repeat"
    if high < target:
        return "below it in every repeat"
    return "the repeats straddle it: no difference beyond the noise"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def engine_line(model: dict[str, Any]) -> str:
    """What the servers ran on, from their /v1/model: e.g. "ctranslate2 int8 on cpu"."""
    engine = model.get("engine") or "torch"
    return " ".join(part for part in (engine, model.get("quantization"), "on", model.get("device") or "cpu") if part)


def _layout_of(model: dict[str, Any]) -> str:
    workers, parallel, threads = model.get("workers", 1), model.get("parallel_batches", 1), model.get("threads")
    return f"{workers}x{parallel}x{threads}" if threads else f"{workers} worker(s)"


def _load_line(test: LoadTest) -> str:
    loads = [run.load_average for run in test.runs + test.layout_runs + test.health_runs
             if run.load_average is not None]
    if not loads:
        return ""
    return (f" The machine's load average (1 minute, every job on it) at the end of the runs: "
            f"{min(loads):.1f}–{max(loads):.1f} on {test.setup['cores_visible']} cores.")


def table(test: LoadTest, summary: Summary) -> str:
    setup, prov = test.setup, test.provenance
    lines = [
        "# `vaswani serve` under load (loopback)",
        "",
        f"Beam {setup['beam']}, one sentence per request, {setup['seconds_per_run']:.0f} s per run, "
        f"{setup['repeats']} repeats interleaved A B, B A (medians; min–max in brackets). "
        f"**The server and the load generator share the machine's {setup['cores_visible']} cores** "
        f"(server: {engine_line(test.model)}, thread layout {_layout_of(test.model)}: workers × parallel batches × "
        f"threads per batch).{_load_line(test)}",
        "",
        "| clients | mode | sentences/s | batching speed-up | p50 ms | p95 ms | p99 ms | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary.rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}× ({r.ratio_range[0]:.2f}–{r.ratio_range[1]:.2f})"
        lines.append(f"| {r.clients} | {r.server} | {r.sentences_per_s:.2f} ({r.sentences_per_s_min:.2f}–"
                     f"{r.sentences_per_s_max:.2f}) | {ratio} | {_ms(r.p50_ms)} | {_ms(r.p95_ms)} | {_ms(r.p99_ms)} | "
                     f"{r.errors} |")
    if summary.health:
        lines += ["", "The ceiling of any rate above: the same clients asking `GET /health`, which costs no model time "
                  "(the HTTP stack and the load generator alone, on the same cores): "
                  + ", ".join(f"{rate:.0f} requests/s at {level} client{'s' if level > 1 else ''}"
                              for level, rate in sorted(summary.health.items())) + "."]
    if summary.model_alone:
        lines += ["", "The model alone (the server's batcher called in one process, no HTTP, as many callers as "
                  "clients): " + ", ".join(f"{rate:.1f} sentences/s at {level}"
                                           for level, rate in sorted(summary.model_alone.items())) + "."]
    if summary.layout_rows:
        lines += ["", "## Thread layouts", "",
                  "Each a batching server of its own, driven in turn at the largest level; workers × parallel "
                  "batches × threads per batch. The bare CTranslate2 script (ctranslate2 + tokenizers only) "
                  "translates the same sentences in batches of that size on the same threads, start-up excluded: in "
                  "arrival order (what a server gets from that many clients; the ratio column is over its best) "
                  "and sorted by length (what a batch job may do).",
                  "",
                  "| layout | clients | sentences/s | over the bare script in arrival order | p50 ms | p95 ms "
                  "| errors |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in summary.layout_rows:
            ratio = "" if r.ratio is None else f"{r.ratio:.2f}× ({r.ratio_range[0]:.2f}–{r.ratio_range[1]:.2f})"
            lines.append(f"| {r.server} | {r.clients} | {r.sentences_per_s:.2f} ({r.sentences_per_s_min:.2f}–"
                         f"{r.sentences_per_s_max:.2f}) | {ratio} | {_ms(r.p50_ms)} | {_ms(r.p95_ms)} | {r.errors} |")
        for name, rate in summary.bare.items():
            spread = [r.sentences_per_s for r in test.bare_runs if r.layout == name]
            lines.append(f"| bare script, {name} (inter × intra threads) | | {rate:.2f} ({min(spread):.2f}–"
                         f"{max(spread):.2f}) | | | | |")
    left_out = test.setup.get("layouts_left_out") or {}
    if left_out:
        named = ", ".join(f"{name} ({why})" for name, why in left_out.items())
        lines += ["", f"Layouts left out: {named}."]
    if summary.checks:
        lines += ["", "## Targets", "", *(f"- {check}" for check in summary.checks)]
    lines += ["", f"Command: `{prov.command}` · commit {(prov.git.commit or '?')[:10]}"
              f"{' (dirty tree)' if prov.git.dirty else ''} · {prov.hardware.processor}, "
              f"{prov.hardware.cpu_count} cores", ""]
    return "\n".join(lines)


def readme(test: LoadTest, summary: Summary) -> str:
    """Findings in prose, every number read from the rows."""
    batched = {r.clients: r for r in summary.rows if r.server == "batching"}
    alone = {r.clients: r for r in summary.rows if r.server == "no batching"}
    most, least = max(batched), min(batched)
    errors = sum(r.errors for r in summary.rows + summary.layout_rows)
    text = [
        "# Serving under load",
        "",
        "Written by `vaswani serve-bench` (see `table.md` for every level and `results.json` for every run).",
        "",
        f"- With {most} concurrent clients, request batching serves **{batched[most].sentences_per_s:.2f}** "
        f"sentences/s against **{alone[most].sentences_per_s:.2f}** one sentence at a time: "
        f"{batched[most].ratio:.2f}× (per-repeat range {batched[most].ratio_range[0]:.2f}–"
        f"{batched[most].ratio_range[1]:.2f}); p95 latency {_ms(batched[most].p95_ms)} ms against "
        f"{_ms(alone[most].p95_ms)} ms.",
        f"- With {least} client(s) there is nothing to batch: {batched[least].sentences_per_s:.2f} against "
        f"{alone[least].sentences_per_s:.2f} sentences/s, {batched[least].ratio:.2f}× (per-repeat "
        f"{batched[least].ratio_range[0]:.2f}–{batched[least].ratio_range[1]:.2f}): an idle model searches a "
        "lone request at once.",
        *(f"- {check}" for check in summary.checks),
        f"- Errors over all runs: **{errors}**.",
        "- The server and the load generator share the same cores (and, on the machine that wrote these files, "
        "other jobs), so the absolute rates are low and noisy; the ratios were measured with the servers driven in "
        "turn (A B, B A, …) in one process.",
        "",
        "![throughput and latency](throughput.png)",
        "",
    ]
    model = test.model
    if test.screenshots:
        bleu = model.get("val_bleu")
        which = (f"step {model['step']}" if model.get("step") is not None else model.get("weights")) or "no step known"
        score = ("validation BLEU unknown" if bleu is None else
                 f"validation BLEU {bleu:.1f} on {model.get('val_bleu_on') or 'the validation split'}")
        text += [
            f"The screenshots show the page serving `{model.get('id')}` ({which}, {score}) and the beam-4 "
            "translation of the sentence typed; one target row is clicked, which lights up its source tokens.",
            "",
        ]
        text += [f"![the attention page]({shot})" for shot in test.screenshots] + [""]
    return "\n".join(text)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for mode, marker in zip(MODES, ("o", "s")):
        runs = [r for r in rows if r.server == mode]
        levels = [r.clients for r in runs]
        left.plot(levels, [r.sentences_per_s for r in runs], marker=marker, label=mode)
        left.fill_between(levels, [r.sentences_per_s_min for r in runs], [r.sentences_per_s_max for r in runs],
                          alpha=0.2)
        right.plot(levels, [(r.p95_ms or 0) / 1000 for r in runs], marker=marker, label=mode)
    levels = sorted({r.clients for r in rows})
    for axis, label in ((left, "sentences / s"), (right, "p95 latency (s)")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(levels, [str(level) for level in levels])
        axis.set_xlabel("concurrent clients")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    left.legend()
    fig.suptitle("vaswani serve on loopback (server and clients share the cores)", fontsize=10)
    fig.tight_layout()
    atomic_write_figure(path, fig, tight=False)
    plt.close(fig)


def write_report(test: LoadTest, out: Path) -> None:
    summary = summarise(test)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", {**dataclasses.asdict(test), "provenance": test.provenance.to_json(),
                                             "summary": dataclasses.asdict(summary)})
    atomic_write_text(out / "table.md", table(test, summary))
    plot(summary.rows, out / "throughput.png")
    atomic_write_text(out / "README.md", readme(test, summary))
    print(f"wrote {out}/results.json, table.md, throughput.png, README.md")


SCREENSHOT_SENTENCE = "Ein Mann mit einem roten Hut spielt Gitarre auf der Straße."


def save_screenshots(url: str, out: Path) -> list[str]:
    """The page with a translation and its heatmap, at laptop and phone widths (skipped without a browser)."""
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        print("no playwright: screenshots skipped", file=sys.stderr)
        return []
    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        print("no /usr/bin/chromium: screenshots skipped", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    names = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            for name, viewport in (("page.png", {"width": 1280, "height": 900}),
                                   ("page-phone.png", {"width": 390, "height": 844})):
                page = browser.new_page(viewport=viewport, device_scale_factor=2 if "phone" in name else 1)
                page.set_default_timeout(60_000)
                page.goto(url + "/")
                page.fill("#source", SCREENSHOT_SENTENCE)
                page.check("#nbest")
                page.click("#translate-button")
                page.wait_for_selector("#attention:not([hidden])")
                targets = page.locator("#heatmap .hm-target .hm-tgt")
                targets.nth(min(2, targets.count() - 1)).click()  # pin one row: its source tokens light up
                page.screenshot(path=str(out / name), full_page=True)
                page.close()
                names.append(name)
        finally:
            browser.close()
    return names
