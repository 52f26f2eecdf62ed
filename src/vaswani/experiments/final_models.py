"""`vaswani experiment final-models --runs RUN …`: one table of finished runs' final models — wall time, what the
end of the run chose on validation data and what each choice bought, and the test scores — with each run's files
(config, metrics, plots, summary, the selection and the test translations; not the weights) copied beside it.

It reads what ``vaswani train`` wrote and trains nothing: the numbers are the runs' own. A run without a final
model (``train.final_model=false``) is refused with the command that makes one.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vaswani.decoding.config import EngineOptions, StoredSearch
from vaswani.decoding.translator import Translator
from vaswani.errors import VaswaniError
from vaswani.evaluation.selection import SELECTION_FILE, Selection
from vaswani.experiments.reporting import fixed, log, markdown_table, pyplot, write_results
from vaswani.experiments.variants import metrics
from vaswani.io import atomic_copy
from vaswani.provenance import first_training_start
from vaswani.training.config import RunConfig
from vaswani.training.finalize import FINAL
from vaswani.training.presets import load_preset
from vaswani.training.summary import SUMMARY_FILE, RunSummary

# What a run directory holds that a reader of the results needs (weights stay in the run: they are not results).
RUN_FILES = ("config.yaml", SUMMARY_FILE, "metrics.jsonl", "provenance.jsonl")
FINAL_FILES = ("model.json", "search.json", SELECTION_FILE)
EVAL_FILES = ("results.json", "report.md", "hypotheses.txt")
# What a Multi30k model is for: an image caption translates; a sentence from anywhere else shows the domain's limit.
PROBES = (
    ("in domain (an image caption)", "Zwei Hunde spielen im Schnee neben einem roten Auto."),
    ("everyday speech", "Ich habe heute keine Zeit, weil ich arbeiten muss."),
    ("news", "Die Regierung will die Steuern im nächsten Jahr deutlich senken."),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=Path, nargs="+", required=True, metavar="RUN",
                        help="finished run directories whose final model was chosen (train.final_model=true, or "
                        "`vaswani finalize --run-dir RUN`)")


@dataclass
class FinalModelRow:
    """One finished run's final model, as its files tell it: the run, what the end of the run chose on the
    validation split and what each choice bought, and the test scores (sacreBLEU's, by test set)."""

    run: str
    dataset: str
    device: str | None
    precision: str | None
    threads: int | None
    commit: str | None
    command: str | None
    model: str
    wall_minutes: float | None
    training_minutes: float | None
    final_minutes: float | None
    updates: int
    epochs: float | None
    val_nll: float | None
    val_bleu_best_checkpoint_greedy: float | None
    final_weights: str
    val_bleu_final_weights_greedy: float
    final_search: str
    val_bleu_final: float
    valid_sentences: int
    test: dict[str, dict[str, float | str]]
    probes: list[dict[str, str]] = field(default_factory=list)  # the final model's translations of PROBES


def run(args: argparse.Namespace) -> int:
    rows = [final_model_row(run_dir) for run_dir in args.runs]
    for run_dir, row in zip(args.runs, rows):
        row.probes = probe_translations(run_dir, args.device)
    names = [row.run for row in rows]
    if len(set(names)) != len(names):
        raise VaswaniError(f"--runs: two runs share a directory name ({names}); each is copied to OUT/<name>/")
    for run_dir, row in zip(args.runs, rows):
        copy_run_files(run_dir, args.out / row.run)
    table = _table(rows, args.command_line)
    # The runs' hardware is in each row; the device here is only the machine that wrote the table.
    write_results(args.out, "final-models", args.command_line, torch.device("cpu"),
                  {"runs": [str(r) for r in args.runs]}, {"rows": [dataclasses.asdict(r) for r in rows]}, table,
                  {"final_models": _plot(rows)},
                  readme=findings(rows))
    log(f"final-models: wrote {args.out}/table.md, results.json, README.md, final_models.png")
    return 0


def final_model_row(run_dir: Path) -> FinalModelRow:
    """The numbers of one finished run's final model, read from its files."""
    summary_file, selection_file = run_dir / SUMMARY_FILE, run_dir / "checkpoints" / FINAL / SELECTION_FILE
    if not run_dir.is_dir():
        raise VaswaniError(f"{run_dir}: no such run directory")
    if not summary_file.is_file():
        raise VaswaniError(f"{run_dir}: no summary.json; the run has not finished (continue it with --resume)")
    if not selection_file.is_file():
        raise VaswaniError(f"{run_dir}: no final model ({selection_file} is missing); choose it with "
                           f"`vaswani finalize --run-dir {run_dir}`")
    summary = RunSummary.read(run_dir)
    selection = Selection.read(selection_file.parent)
    config: RunConfig = load_preset(str(run_dir / "config.yaml"))
    started = first_training_start(run_dir)
    valid = [r for r in metrics(run_dir) if r.kind == "valid"]
    candidates = {c.weights: c.greedy_valid.bleu for c in selection.candidates}
    chosen_greedy = next(s.valid.bleu for s in selection.searches if s.search == "greedy")
    m = config.model
    return FinalModelRow(
        run=run_dir.resolve().name,
        dataset=config.data.dataset,
        device=(f"{started.device_name}, {started.cpu_class}" if started.device_name and started.cpu_class
                else started.device_name),
        precision=started.precision,
        threads=started.torch_threads,
        commit=started.git.commit,
        command=started.command,
        model=f"d{m.d_model}, {m.n_encoder_layers}+{m.n_decoder_layers} layers, {m.n_heads} heads, "
              f"d_ff {m.d_ff}, vocab {m.vocab_size}",
        wall_minutes=summary.wall_minutes,
        training_minutes=summary.minutes,
        final_minutes=summary.final_minutes,
        updates=summary.step,
        epochs=valid[-1].epoch if valid else None,
        val_nll=valid[-1].nll if valid else None,
        val_bleu_best_checkpoint_greedy=candidates.get("best", candidates.get("last")),
        final_weights=selection.weights,
        val_bleu_final_weights_greedy=chosen_greedy,
        final_search=selection.search,
        val_bleu_final=selection.valid.bleu,
        valid_sentences=selection.valid_sentences,
        test={name: dataclasses.asdict(scores) for name, scores in selection.test.items()},
    )


def probe_translations(run_dir: Path, device: str = "auto") -> list[dict[str, str]]:
    """The final model's translations of :data:`PROBES`, with its stored search."""
    final = run_dir / "checkpoints" / FINAL
    translator = Translator.load(final, StoredSearch.read(final).search(), EngineOptions(device=device))
    outputs = translator.translate([source for _, source in PROBES])
    return [{"kind": kind, "source": source, "translation": output}
            for (kind, source), output in zip(PROBES, outputs)]


def copy_run_files(run_dir: Path, out: Path) -> None:
    """The run's files a reader of the results needs, under ``out`` (same layout as the run directory)."""
    final = run_dir / "checkpoints" / FINAL
    wanted = [run_dir / name for name in RUN_FILES] + sorted((run_dir / "plots").glob("*.png"))
    wanted += [final / name for name in FINAL_FILES]
    wanted += [path for test in sorted((final / "eval").glob("*")) for path in (test / n for n in EVAL_FILES)]
    for source in wanted:
        if source.is_file():
            atomic_copy(source, out / source.relative_to(run_dir))


def findings(rows: list[FinalModelRow]) -> str:
    """What the numbers say, run by run, in sentences chosen by comparing them."""
    lines = ["# Final models", "",
             "Written by `vaswani experiment final-models` from the runs' own files (see `table.md` for the command "
             "and every number). Everything below was chosen on the validation split; the test sets were translated "
             "once, with the final choice.", ""]
    for row in rows:
        weights_gain = row.val_bleu_final_weights_greedy - row.val_bleu_best_checkpoint_greedy
        search_gain = row.val_bleu_final - row.val_bleu_final_weights_greedy
        lines.append(f"## {row.run}")
        lines.append("")
        if row.final_weights == "best":
            lines.append(f"- The lowest-loss checkpoint was also the best translator on validation; no average of "
                         f"the last checkpoints beat its greedy BLEU ({row.val_bleu_best_checkpoint_greedy:.2f}).")
        else:
            lines.append(f"- The final weights, the {row.final_weights.replace('of last', 'of the last')} "
                         f"checkpoints, translate validation {_signed(weights_gain)} BLEU "
                         f"{'better' if weights_gain >= 0 else 'worse'} (greedy) than the lowest-loss checkpoint.")
        if row.final_search == "greedy":
            lines.append("- Greedy search beat every beam setting tried on validation.")
        else:
            lines.append(f"- {row.final_search.capitalize()} adds {_signed(search_gain)} BLEU over greedy on "
                         "validation.")
        for name, scores in row.test.items():
            lines.append(f"- {name}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, length ratio "
                         f"{scores['length_ratio']:.3f}.")
        if row.probes:
            lines.append("- What it is for: Multi30k holds image captions only, so the model translates captions; "
                         "the other sentences show where that ends." if row.dataset == "multi30k" else
                         f"- The final model on sentences of several kinds (trained on {row.dataset}):")
            lines += [f"  - {p['kind']}: *{p['source']}* → *{p['translation']}*" for p in row.probes]
        if row.wall_minutes is not None:
            within = "inside" if row.wall_minutes <= 60 else "over"
            lines.append(f"- Preparation, training and the final model took {row.wall_minutes:.1f} minutes of "
                         f"wall time ({within} the hour) on {row.device} ({row.threads} threads, "
                         f"{row.precision}).")
        lines.append("")
    return "\n".join(lines)


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def _table(rows: list[FinalModelRow], command: str) -> str:
    tests = sorted({name for row in rows for name in row.test})
    headers = ["run", "device", "model", "wall min", "updates", "epochs", "val NLL", "val BLEU best ckpt (greedy)",
               "final weights", "val BLEU (greedy)", "final search", "val BLEU"]
    headers += [f"{name} {metric}" for name in tests for metric in ("BLEU", "chrF", "len ratio")]
    body = []
    for row in rows:
        cells = [row.run, f"{row.device} ({row.threads} threads, {row.precision})", row.model,
                 fixed(row.wall_minutes, 1), row.updates, fixed(row.epochs, 1), fixed(row.val_nll, 3),
                 fixed(row.val_bleu_best_checkpoint_greedy), row.final_weights,
                 fixed(row.val_bleu_final_weights_greedy), row.final_search, fixed(row.val_bleu_final)]
        for name in tests:
            scores = row.test.get(name, {})
            cells += [fixed(scores.get("bleu")), fixed(scores.get("chrf")), fixed(scores.get("length_ratio"), 3)]
        body.append(cells)
    signatures = sorted({s["signature"] for row in rows for s in row.test.values()})
    commands = "\n".join(f"- `{row.run}`: `{row.command}` (commit `{row.commit}`)" for row in rows)
    return (f"# Final models\n\n{markdown_table(headers, body)}\n\n"
            f"BLEU signature: {', '.join(f'`{s}`' for s in signatures)}. Validation BLEU is on the whole "
            f"validation split; `wall min` covers data preparation, training and the final model.\n\n"
            f"Training commands:\n\n{commands}\n\nThis table: `{command}`\n")


def _plot(rows: list[FinalModelRow]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 0.9 + 1.1 * len(rows)))
    steps = [("best checkpoint, greedy", "val_bleu_best_checkpoint_greedy"),
             ("final weights, greedy", "val_bleu_final_weights_greedy"), ("final weights + search", "val_bleu_final")]
    height = 0.8 / (len(steps) + 1)
    bars = []
    for i, (label, key) in enumerate(steps):
        bars.append(axis.barh([r + i * height for r in range(len(rows))], [getattr(row, key) for row in rows], height,
                              label=f"val: {label}"))
    tests = sorted({name for row in rows for name in row.test})
    for name in tests[:1]:
        bars.append(axis.barh([r + len(steps) * height for r in range(len(rows))],
                              [row.test.get(name, {}).get("bleu", 0.0) for row in rows], height,
                              label=f"{name}, final"))
    for container in bars:
        axis.bar_label(container, fmt="%.2f", padding=2, fontsize=8)
    axis.set_yticks([r + 0.4 - height / 2 for r in range(len(rows))], [row.run for row in rows])
    axis.set_xlabel("BLEU (sacreBLEU)")
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    axis.set_title("What the end of the run chose, and what it bought")
    return figure


__all__ = ["FinalModelRow", "add_arguments", "copy_run_files", "final_model_row", "findings", "run"]
