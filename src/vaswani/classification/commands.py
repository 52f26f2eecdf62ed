"""``vaswani classify train | predict | experiment | summary``: parse arguments, call the modules that do the work."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from vaswani.arguments import add_settings_argument, ranged
from vaswani.classification.settings import TrainSettings
from vaswani.errors import ConfigError
from vaswani.io import check_output, directory_written_whole
from vaswani.settings import MAX_BATCH, MAX_COUNT, MAX_LENGTH, MAX_THREADS, parse_settings

DEFAULTS = TrainSettings()  # the command line's defaults are the dataclass's: one place to change them


def register(subparsers: argparse._SubParsersAction) -> None:
    classify = subparsers.add_parser(
        "classify",
        help="train and apply a Transformer text classifier on any CSV (text column + label column)",
        description="Text classification with the project's Transformer encoder, compared with TF-IDF + "
        "logistic regression.",
    )
    commands = classify.add_subparsers(dest="classify_command", metavar="SUBCOMMAND", required=True)

    train = commands.add_parser("train", help="train a classifier on a labelled CSV and write its evaluation report")
    _add_training_arguments(train)
    train.add_argument("--out", type=Path, default=Path("runs/classifier"), help="output directory (model + report)")
    train.add_argument("--force", action="store_true",
                       help="replace an earlier classifier of `classify train` in --out (whole, once the new one is "
                       "complete); nothing else is ever replaced")
    train.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=DEFAULTS.seed,
                       help="seed of the split, the initialisation and the batch order")
    train.add_argument("--examples", type=ranged(int, ge=0, le=MAX_COUNT), default=5,
                       help="random validation examples to print at the end")
    train.set_defaults(handler=train_command)

    predict = commands.add_parser("predict", help="label the texts of a CSV file, or one --text")
    predict.add_argument("--model", type=Path, required=True, help="directory written by `classify train`")
    source = predict.add_mutually_exclusive_group(required=True)
    source.add_argument("--csv", type=Path, help="CSV file to label; its rows are written back in order")
    source.add_argument("--text", help="a single text: print its label and class probabilities")
    predict.add_argument("--text-column", help="column holding the text (default: the one used in training)")
    predict.add_argument("--output", type=Path, help="CSV to write (default: standard output)")
    predict.set_defaults(handler=predict_command)

    experiment = commands.add_parser(
        "experiment", help="Transformer vs TF-IDF baseline over several seeds on one held-out split (results/)"
    )
    _add_training_arguments(experiment)
    experiment.add_argument("--seeds", type=ranged(int, ge=0, le=MAX_COUNT), nargs="+", default=[0, 1, 2])
    experiment.add_argument("--split-seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0,
                            help="seed of the held-out split shared by all runs")
    experiment.add_argument("--out", type=Path, default=None,
                            help="where results.json, table.md and the plots go (default runs/classifier-experiment/"
                            "results; the repository's results/ only when named here)")
    experiment.add_argument("--runs-dir", type=Path, default=Path("runs/classifier-experiment"),
                            help="where the trained models go (one directory per seed)")
    experiment.add_argument("--force", action="store_true",
                            help="replace the seeds' directories in --runs-dir if they hold an earlier experiment's")
    experiment.set_defaults(handler=experiment_command)

    summary = commands.add_parser(
        "summary", help="one README comparing several `classify experiment` folders (the first is the reference)"
    )
    summary.add_argument("folders", type=Path, nargs="+", metavar="FOLDER",
                         help="folders written by `classify experiment`, all on the same CSV and split")
    summary.add_argument("--out", type=Path, help="the README to write (default: FOLDER/README.md of the first)")
    summary.set_defaults(handler=summary_command)


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    data = parser.add_argument_group("data")
    data.add_argument("--csv", type=Path, required=True, help="CSV file with a header line")
    data.add_argument("--text-column", default=d.text_column)
    data.add_argument("--label-column", default=d.label_column)
    data.add_argument("--extra-text-columns", nargs="+", default=[], metavar="COLUMN",
                      help="columns prepended to the text (e.g. keyword); off by default")
    data.add_argument("--val-fraction", type=float, default=d.val_fraction)
    tok = parser.add_argument_group("tokenizer")
    tok.add_argument("--tokenizer", choices=["bpe", "word"], default=d.tokenizer,
                     help="lowercase regex words with <unk> (default; measured best on tweets), or the project's "
                     "byte-level BPE")
    tok.add_argument("--vocab-size", type=ranged(int, le=MAX_COUNT), default=d.vocab_size)
    tok.add_argument("--min-frequency", type=ranged(int, le=MAX_COUNT), default=d.min_frequency)
    tok.add_argument("--max-len", type=ranged(int, le=MAX_LENGTH), default=d.max_len,
                     help="tokens per text incl. <s> and </s>")
    tok.add_argument("--keep-case", action="store_true", help="do not lowercase texts before tokenizing")
    model = parser.add_argument_group("model")
    model.add_argument("--preset", choices=["tiny", "small"], default=d.preset)
    model.add_argument("--pooling", choices=["cls", "mean"], default=d.pooling)
    add_settings_argument(model, ("model",), "model.dropout=0.2")
    optim = parser.add_argument_group("optimisation")
    optim.add_argument("--epochs", type=ranged(int, le=MAX_COUNT), default=d.epochs)
    optim.add_argument("--batch-size", type=ranged(int, le=MAX_BATCH), default=d.batch_size)
    optim.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (AdamW)")
    optim.add_argument("--warmup", type=ranged(int, le=MAX_COUNT), default=d.warmup,
                       help="linear warmup steps, then linear decay to 0")
    optim.add_argument("--weight-decay", type=float, default=d.weight_decay, help="on weight matrices only")
    optim.add_argument("--clip", type=float, default=d.clip, help="max gradient norm")
    optim.add_argument("--patience", type=ranged(int, le=MAX_COUNT), default=d.patience,
                       help="epochs without better validation macro-F1")
    optim.add_argument("--precision", choices=["fp32", "bf16"], default=d.precision,
                       help="bf16 autocast; only faster on CPUs with native bf16 (AVX512-BF16/AMX)")
    optim.add_argument("--threads", type=ranged(int, ge=1, le=MAX_THREADS), default=1,
                       help="torch CPU threads (1 is fastest for these small matrices on a shared machine)")
    optim.add_argument("--no-progress", dest="progress", action="store_false", help="no tqdm progress bars")


def settings_from_args(args: argparse.Namespace) -> TrainSettings:
    overrides = parse_settings(args.settings, ("model",))["model"]
    return TrainSettings(
        text_column=args.text_column,
        label_column=args.label_column,
        extra_text_columns=list(args.extra_text_columns),
        val_fraction=args.val_fraction,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        max_len=args.max_len,
        lowercase=not args.keep_case,
        preset=args.preset,
        model_overrides=overrides,
        pooling=args.pooling,
        seed=getattr(args, "seed", 0),
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        clip=args.clip,
        patience=args.patience,
        precision=args.precision,
    )


def _set_threads(threads: int) -> None:
    import torch

    if threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)


# ---- handlers --------------------------------------------------------------------------------------------------
def train_command(args: argparse.Namespace) -> int:
    from vaswani.classification.baseline import baseline_metrics
    from vaswani.classification.checkpoint import CLASSIFIER_KIND
    from vaswani.classification.data import load_dataset
    from vaswani.classification.report import write_run_report
    from vaswani.classification.train import train_classifier
    from vaswani.provenance import command_line, git_state, hardware

    settings = settings_from_args(args)
    _set_threads(args.threads)
    # Everything that can fail without training fails first: --out, the CSV, the baseline's vocabulary.
    check_output(args.out, command="classify train", writes="folder", kind=CLASSIFIER_KIND, inputs=[args.csv],
                 force=args.force)
    data = load_dataset(args.csv, settings)
    _report_skipped(args.csv, data, settings)
    baseline = baseline_metrics(data, settings, args.csv)
    train_texts, _ = data.split("train")
    val_texts, val_ids = data.split("val")
    # The model and its report are one output: written whole, replacing an earlier one only when complete.
    with directory_written_whole(args.out, kind=CLASSIFIER_KIND, writer="classify train") as staging:
        result = train_classifier(data, settings, staging, progress=args.progress)
        details = {
            "command": command_line(), "git": git_state().to_json(), "hardware": hardware("cpu").to_json(),
            "csv": str(args.csv), "settings": settings.to_dict(), "parameters": result.n_parameters,
            "best_epoch": result.best_epoch, "train_rows": len(train_texts), "val_rows": len(val_texts),
            "seconds": round(result.seconds, 1), "skipped_empty_text": data.skipped_empty_text,
            "skipped_empty_label": data.skipped_empty_label,
        }
        write_run_report(staging, data.labels, result.val_metrics, baseline, {"Transformer": result.history}, details)
    report = args.out / "report.md"

    print(f"\nbest epoch {result.best_epoch}: accuracy {result.val_metrics.accuracy:.4f}, "
          f"macro-F1 {result.val_metrics.macro_f1:.4f}   (TF-IDF + LR baseline: accuracy {baseline.accuracy:.4f}, "
          f"macro-F1 {baseline.macro_f1:.4f})")
    _print_examples(val_texts, val_ids, result.val_predicted, result.val_probs, data.labels, args.examples, args.seed)
    print(f"\nmodel saved to {args.out}/ ; report: {report}")
    return 0


def _report_skipped(csv_path: Path, data, settings) -> None:
    if data.skipped_empty_text:
        print(f"{csv_path}: skipped {data.skipped_empty_text} row(s) with an empty {settings.text_column!r}",
              file=sys.stderr)
    if data.skipped_empty_label:
        print(f"{csv_path}: skipped {data.skipped_empty_label} row(s) with an empty {settings.label_column!r}",
              file=sys.stderr)


def _print_examples(texts, true_ids, predicted_ids, probs, labels, count: int, seed: int) -> None:
    if count <= 0:
        return
    print(f"\n{min(count, len(texts))} random validation examples:")
    for i in random.Random(seed).sample(range(len(texts)), min(count, len(texts))):
        mark = "ok   " if true_ids[i] == predicted_ids[i] else "WRONG"
        text = " ".join(texts[i].split())
        text = text if len(text) <= 100 else text[:97] + "..."
        print(f"  {mark} true {labels[true_ids[i]]!s:>6}  predicted {labels[predicted_ids[i]]!s:>6} "
              f"(p={probs[i][predicted_ids[i]]:.2f})  {text}")


def predict_command(args: argparse.Namespace) -> int:
    from vaswani.classification.predict import Classifier, predict_csv
    from vaswani.data.textfiles import check_unicode_text
    from vaswani.io import standard_stream

    # What the user gave is checked before the model is loaded and the texts labelled.
    if args.text is not None:
        check_unicode_text(args.text, "--text")
        if not args.text.strip():
            raise ConfigError("--text is empty")
        standard_stream("stdout", "label a CSV with --csv FILE --output FILE instead")
    elif args.output is not None:
        check_output(args.output, command="classify predict", writes="file", inputs=[args.model, args.csv],
                     option="--output")
    else:
        standard_stream("stdout", "pass --output FILE")
    classifier = Classifier.load(args.model)
    if args.text is not None:
        probs = classifier.predict_proba([args.text])[0]
        print(classifier.labels[int(probs.argmax())])
        for label, p in sorted(zip(classifier.labels, probs), key=lambda pair: -pair[1]):
            print(f"  {label}\t{p:.4f}")
        return 0
    summary = predict_csv(classifier, args.csv, args.output, args.text_column)
    if args.output is not None:
        print(f"{summary.rows} rows labelled -> {args.output}", file=sys.stderr)
    if summary.empty_text:
        print(f"{args.csv}: {summary.empty_text} row(s) with an empty text left without a prediction",
              file=sys.stderr)
    return 0


def experiment_command(args: argparse.Namespace) -> int:
    from vaswani.classification.checkpoint import CLASSIFIER_KIND
    from vaswani.classification.experiment import EXPERIMENT_KIND, EXPERIMENT_WRITER, RESULT_FILES, run_experiment

    settings = settings_from_args(args)
    explicit = args.out is not None
    args.out = args.out if explicit else args.runs_dir / "results"
    check_output(args.out, command=EXPERIMENT_WRITER, writes="files", kind=EXPERIMENT_KIND, inputs=[args.csv],
                 explicit=explicit, names=RESULT_FILES, nests=True)  # a variant's results inside the reference's
    for seed in args.seeds:  # an earlier experiment's trained classifiers are kept unless --force
        check_output(args.runs_dir / f"seed_{seed}", command=EXPERIMENT_WRITER, writes="folder", kind=CLASSIFIER_KIND,
                     inputs=[args.csv, args.out], force=args.force, option="--runs-dir")
    _set_threads(args.threads)
    results = run_experiment(args.csv, args.seeds, args.out, settings, args.runs_dir, args.split_seed,
                             progress=args.progress)
    summary = results.summary
    for model, scores in (("transformer", summary.transformer), ("baseline", summary.baseline)):
        print(f"{model:12s} accuracy {scores.accuracy.mean:.4f} ± {scores.accuracy.std:.4f}   "
              f"macro-F1 {scores.macro_f1.mean:.4f} ± {scores.macro_f1.std:.4f}")
    print(f"wrote {args.out}/results.json, table.md, confusion.png, learning_curve.png")
    return 0


def summary_command(args: argparse.Namespace) -> int:
    from vaswani.classification.summary import write_summary
    from vaswani.io import check_output

    if args.out is not None:  # the default, README.md of the first experiment, is that experiment's own page
        check_output(args.out, command="classify summary", writes="file", inputs=args.folders)
    print(f"wrote {write_summary(args.folders, args.out)}")
    return 0
