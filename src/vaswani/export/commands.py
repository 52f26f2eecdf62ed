"""``vaswani export``: a checkpoint → a Hugging Face (MarianMT) or CTranslate2 model directory."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from vaswani.errors import VaswaniError

FORMATS = ("hf", "ctranslate2")
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
    parser.add_argument("--force", action="store_true", help="replace --out if it exists and is not empty")
    parser.set_defaults(handler=export_command)


def export_command(args: argparse.Namespace) -> int:
    if args.format == "hf" and args.quantization != "float32":
        raise VaswaniError("--quantization applies to --format ctranslate2 only (the hf export is float32)")
    out: Path = args.out
    check_output_directory(out, args.force)
    export = _exporter(args.format)
    # Build the export next to --out and move it into place at the end: a failure never leaves half a model
    # behind, and --force replaces the old directory only once the new one is complete.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if args.format == "hf":
            export(args.checkpoint, staging)
        else:
            export(args.checkpoint, staging, quantization=args.quantization)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {out} ({args.format}{'' if args.format == 'hf' else ', ' + args.quantization})")
    return 0


def check_output_directory(out: Path, force: bool) -> None:
    """Refuse a non-empty --out without --force, and a parent we cannot write to, before any conversion."""
    if out.exists() and not out.is_dir():
        raise VaswaniError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise VaswaniError(f"--out {out} exists and is not empty; pass --force to replace it")
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".write-test-"):
            pass
    except OSError as error:
        raise VaswaniError(f"--out {out}: cannot write to {parent} ({error.strerror or error})") from None


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
