"""``vaswani export``: a checkpoint → a Hugging Face (MarianMT) or CTranslate2 model directory."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from vaswani.errors import VaswaniError, VaswaniWarning
from vaswani.io import check_output, directory_written_whole, write_faults_named

FORMATS = ("hf", "ctranslate2")
EXPORT_KIND = "export"
PACKAGES = {"hf": "transformers", "ctranslate2": "ctranslate2"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a checkpoint as a Hugging Face (MarianMT) or CTranslate2 model",
        description="Export a checkpoint for other tools: --format hf gives a directory that "
        "transformers.MarianMTModel and AutoTokenizer load (and, on transformers 4, pipeline('translation')); "
        "--format ctranslate2 gives a "
        "CTranslate2 model (optionally int8) with our tokenizer.json beside it. Needs pip install 'vaswani[export]'.",
    )
    parser.add_argument("--checkpoint", required=True, metavar="RUN", help="checkpoint directory or run directory")
    parser.add_argument("--format", required=True, choices=FORMATS, help="target format")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory to write")
    parser.add_argument("--quantization", default="float32", metavar="TYPE",
                        help="ctranslate2 only: weight type, e.g. float32, int8, int8_float32 (default float32)")
    parser.add_argument("--force", action="store_true",
                        help="replace --out when it holds an earlier export; nothing else is ever replaced")
    parser.set_defaults(handler=export_command)


def export_command(args: argparse.Namespace) -> int:
    if args.format == "hf" and args.quantization != "float32":
        raise VaswaniError("--quantization applies to --format ctranslate2 only (the hf export is float32)")
    out: Path = args.out
    check_output(out, command="export", writes="folder", kind=EXPORT_KIND, inputs=[args.checkpoint], force=args.force)
    _say_if_ensemble(args.checkpoint)
    export = _exporter(args.format)
    # Written whole, with an "export" manifest; a write the disk refuses, whichever library made it, is one line.
    details = {"format": args.format, **({"quantization": args.quantization} if args.format != "hf" else {})}
    with directory_written_whole(out, kind=EXPORT_KIND, details=details, writer="export") as staging, \
            write_faults_named(staging):
        if args.format == "hf":
            export(args.checkpoint, staging)
        else:
            export(args.checkpoint, staging, quantization=args.quantization)
    print(f"wrote {out} ({args.format}{'' if args.format == 'hf' else ', ' + args.quantization})")
    return 0


def _say_if_ensemble(checkpoint: str) -> None:
    """An export holds one model: for a checkpoint that is an ensemble, say which one is exported."""
    from vaswani.decoding import read_stored_ensemble
    from vaswani.model.serialization import resolve_checkpoint

    directory = resolve_checkpoint(checkpoint)
    stored = read_stored_ensemble(directory)
    if stored is not None:
        warnings.warn(f"{directory} is an ensemble of {len(stored.members)}, and an export holds one model: "
                      "exporting the checkpoint's own weights (a run's final model: its best single candidate), or "
                      f"export a member, such as {stored.members[0]}", VaswaniWarning, stacklevel=2)


def _exporter(fmt: str):
    try:
        if fmt == "hf":
            import transformers  # noqa: F401

            from vaswani.export.hf import export_hf

            return export_hf
        import ctranslate2  # noqa: F401

        from vaswani.export.ctranslate2 import export_ctranslate2

        return export_ctranslate2
    except ImportError:
        raise VaswaniError(f"--format {fmt} needs the {PACKAGES[fmt]} package: pip install 'vaswani[export]'") from None
