"""A checkpoint converted to a CTranslate2 model: the one conversion, and the copy of it kept next to the checkpoint.

CTranslate2's Python *spec* API describes a Transformer by flags plus named weights; :func:`model_spec` fills it
from our model, the way ``ctranslate2/converters/opennmt_py.py`` and ``marian.py`` fill it from theirs:

- post-LN and pre-LN (``pre_norm``; pre-LN's final encoder/decoder LayerNorms are the spec's ``layer_norm``),
- ReLU and exact (erf) GELU,
- sinusoidal and learned positions as an explicit table (ours interleaves sin/cos, so the table is stored rather
  than left to CTranslate2's built-in half/half sinusoid), rotary positions as ``rotary_dim=0`` with
  ``rotary_interleave=True`` (our RoPE rotates (even, odd) feature pairs), no positions as a zero table,
- every tying mode (tied matrices are written once per place that uses them; the spec deduplicates equal arrays),
- ``scale_embeddings`` on or off, LayerNorm ε = 1e-5 (torch's default, ours).

A sliding attention window is refused: CTranslate2's ``sliding_window`` only crops the decoder's cache, it cannot
band the encoder's attention.

:func:`converted_model` is what the CTranslate2 engine loads: the conversion of a checkpoint in one quantization,
built once into ``CHECKPOINT/ctranslate2/<quantization>-<key>/`` (or the user cache when the checkpoint's directory
cannot be written). The key is the sha256 of the files the conversion reads (weights, model.json, tokenizer.json),
so changed weights get a new conversion and the stale one is removed. Its manifest (kind "ctranslate2
conversion") records the key, the quantization and each file's sha256, and every load checks them (or finds, in
ct2_checked.py's record, that no file changed since they were last checked): a damaged, partial or foreign
conversion is never loaded, it is converted again. A conversion is assembled in a temporary
directory and renamed into place: two processes starting at once may both convert, but each loads a whole model
(the second finds the first one's whole conversion and discards its own). ``vaswani export --format
ctranslate2`` writes the same conversion (:func:`write_converted_model`) into its output directory.

Conversion imports torch; finding an existing conversion does not.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vaswani.config import ModelConfig
from vaswani.data.tokenizer import BOS, EOS, UNK, Tokenizer
from vaswani.errors import EnvironmentFault, VaswaniError
from vaswani.io import (
    MANIFEST_FILE,
    default_cache_dir,
    files_sha256,
    install_directory,
    read_manifest,
    staging_directory,
    verify_files,
    write_faults_named,
    write_manifest,
)
from vaswani.model.safetensors_header import read_header
from vaswani.model.serialization import TOKENIZER_FILE

if TYPE_CHECKING:
    import numpy as np

    from vaswani.model.transformer import Transformer

CHECKPOINT_FILES = ("model.safetensors", "model.json", TOKENIZER_FILE)  # what a conversion is made from
CONVERTED_DIRECTORY = "ctranslate2"  # inside the checkpoint directory
CONVERSION_KIND = "ctranslate2 conversion"  # its manifest: the weights' key, the quantization, each file's sha256
CONVERTED_FILES = ("model.bin", "config.json")  # what CTranslate2 loads, besides the vocabulary
# Rows of the explicit position table for sinusoidal/no positions (ours is unbounded; CTranslate2 needs a size):
# enough for the default output limit (1.5 · 1024 + 10) of the longest source a Translator accepts (1024 tokens).
MAX_POSITIONS = 2048
LAYER_NORM_EPSILON = 1e-5  # nn.LayerNorm's default, which every LayerNorm of ours uses
ABANDONED_AFTER_S = 3600  # a conversion directory still being assembled after an hour was left by a killed process


def cannot_express(config: ModelConfig) -> str | None:
    """Why CTranslate2 cannot express a model of ``config`` (None if it can)."""
    if config.sliding_window is not None:
        return (f"model.sliding_window={config.sliding_window} (CTranslate2 cannot restrict the encoder's "
                "attention to a band)")
    return None


def position_rows(config: ModelConfig) -> int | None:
    """Positions the converted model has a table row for (None: rotary positions, computed at any position)."""
    if config.positions == "rope":
        return None
    return config.max_len if config.positions == "learned" else max(MAX_POSITIONS, config.max_len)


# ---- the conversion ---------------------------------------------------------------------------------------------
def _array(tensor: Any) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _position_table(model: Transformer, side: str) -> np.ndarray:
    """The table added to ``side``'s embeddings (rotary positions are applied inside attention instead)."""
    import numpy as np

    from vaswani.model.positions import sinusoidal_table  # torch: only to convert

    config = model.config
    if config.positions == "learned":
        return _array(model.state_dict()[f"{side}.embed.positions.embedding.weight"])
    rows = position_rows(config) or max(MAX_POSITIONS, config.max_len)  # the encoder of a rotary model: zeros
    if config.positions == "sinusoidal":
        return _array(sinusoidal_table(rows, config.d_model))
    return np.zeros((rows, config.d_model), dtype=np.float32)


def model_spec(model: Transformer, vocabulary: list[str]) -> Any:
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    reason = cannot_express(config)
    if reason is not None:
        raise VaswaniError(f"the CTranslate2 format cannot express {reason}")
    pre_norm = config.norm == "pre"
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}[config.activation]
    rotary = dict(rotary_dim=0, rotary_interleave=True, rotary_base=config.rope_base) if config.positions == "rope" \
        else {}
    encoder = transformer_spec.TransformerEncoderSpec(
        config.n_encoder_layers, config.n_heads, pre_norm=pre_norm, activation=activation, **rotary
    )
    # return_attention gives the last layer's cross-attention averaged over its heads (alignment_heads=0: all).
    decoder = transformer_spec.TransformerDecoderSpec(
        config.n_decoder_layers, config.n_heads, pre_norm=pre_norm, activation=activation, alignment_layer=-1,
        alignment_heads=0, **rotary
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    weights = {name: _array(tensor) for name, tensor in model.state_dict().items()}

    def linear(target: Any, name: str) -> None:
        target.weight, target.bias = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def norm(target: Any, name: str) -> None:
        target.gamma, target.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    for side, side_spec in (("encoder", encoder), ("decoder", decoder)):
        side_spec.scale_embeddings = config.scale_embeddings
        embeddings = side_spec.embeddings[0] if side == "encoder" else side_spec.embeddings  # encoder: a list
        embeddings.weight = weights[f"{side}.embed.tokens.weight"]
        if hasattr(side_spec, "position_encodings"):  # absent for a rotary decoder
            side_spec.position_encodings.encodings = _position_table(model, side)
        if pre_norm:
            norm(side_spec.layer_norm, f"{side}.final_norm")

    for i, layer in enumerate(encoder.layer):
        ours = f"encoder.layers.{i}"
        # Our self-attention already fuses Q, K, V row-wise as [Wq; Wk; Wv], which is CTranslate2's layout.
        linear(layer.self_attention.linear[0], f"{ours}.self_attn.qkv_proj")
        linear(layer.self_attention.linear[1], f"{ours}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{ours}.attn_block.norm")
        linear(layer.ffn.linear_0, f"{ours}.ffn.up")
        linear(layer.ffn.linear_1, f"{ours}.ffn.down")
        norm(layer.ffn.layer_norm, f"{ours}.ffn_block.norm")

    for i, layer in enumerate(decoder.layer):
        ours = f"decoder.layers.{i}"
        linear(layer.self_attention.linear[0], f"{ours}.self_attn.qkv_proj")
        linear(layer.self_attention.linear[1], f"{ours}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{ours}.self_block.norm")
        linear(layer.attention.linear[0], f"{ours}.cross_attn.q_proj")
        linear(layer.attention.linear[1], f"{ours}.cross_attn.kv_proj")  # [Wk; Wv], as CTranslate2 fuses them
        linear(layer.attention.linear[2], f"{ours}.cross_attn.out_proj")
        norm(layer.attention.layer_norm, f"{ours}.cross_block.norm")
        linear(layer.ffn.linear_0, f"{ours}.ffn.up")
        linear(layer.ffn.linear_1, f"{ours}.ffn.down")
        norm(layer.ffn.layer_norm, f"{ours}.ffn_block.norm")
    decoder.projection.weight = weights["output.weight"]  # no bias: CTranslate2 treats it as optional

    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS  # our decoder reads <s> first
    spec.config.add_source_eos = True  # our sources end in </s>; CTranslate2 appends it itself
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def vocabulary(tokenizer: Tokenizer, size: int) -> list[str]:
    """Token strings by id, padded with unique placeholders up to the model's vocabulary size."""
    return [token_string(tokenizer, i) for i in range(size)]


def token_string(tokenizer: Tokenizer, token_id: int) -> str:
    """The vocabulary entry of ``token_id``: the BPE token, or ``<unusedN>`` for a model row past the tokenizer."""
    token = tokenizer.id_to_token(token_id) if token_id < tokenizer.vocab_size else None
    return token if token is not None else f"<unused{token_id}>"


def write_converted_model(checkpoint: Path, out: Path, quantization: str) -> Path:
    """Convert the checkpoint in directory ``checkpoint`` into ``out`` (model.bin, config.json, vocabulary) with
    weights in ``quantization``: the one conversion, used by the engine's copy and by ``vaswani export``."""
    from vaswani.model.serialization import load_model  # torch: only to convert

    model = load_model(checkpoint).eval()
    reason = cannot_express(model.config)
    if reason is not None:
        raise VaswaniError(f"the CTranslate2 format cannot express {reason}")
    if not (checkpoint / TOKENIZER_FILE).is_file():
        raise VaswaniError(f"{checkpoint}: no {TOKENIZER_FILE} beside the weights; the conversion needs it")
    tokenizer = Tokenizer.load(checkpoint / TOKENIZER_FILE)
    spec = model_spec(model, vocabulary(tokenizer, model.config.vocab_size))
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    return out


# ---- the copy kept next to the checkpoint -------------------------------------------------------------------------
def checkpoint_key(checkpoint: Path) -> str:
    """sha256 of the files a conversion is made from: equal keys, equal conversions."""
    for name in CHECKPOINT_FILES:
        if not (checkpoint / name).is_file():
            raise VaswaniError(f"{checkpoint}: no {name}; a CTranslate2 model is converted from "
                               f"{', '.join(CHECKPOINT_FILES)}")
    return files_sha256(checkpoint, CHECKPOINT_FILES)


def converted_model(checkpoint: Path, quantization: str) -> Path:
    """The directory of ``checkpoint``'s conversion in ``quantization``, converted now if no whole one exists. A
    conversion is used only when its manifest says it is one, of these weights (the key) and this quantization,
    and every file it lists is as written; a damaged, partial or foreign one is converted again (saying why on
    stderr) into the first of the checkpoint's folder and the user cache that can be written."""
    key = checkpoint_key(checkpoint)
    name = f"{quantization}-{key[:16]}"
    roots = conversion_roots(checkpoint)
    problems = []
    for root in roots:
        problem = conversion_problem(root / name, key, quantization)
        if problem is None:
            return root / name
        if (root / name).exists():
            problems.append(problem if problem.startswith(str(root / name)) else f"{root / name}: {problem}")
    root = next((root for root in roots if _writable(root)), None)
    if root is None:
        raise EnvironmentFault(f"cannot write a CTranslate2 conversion into {roots[0]} or {roots[1]}; make one of "
                               "them writable (or set VASWANI_CACHE to a writable directory)")
    if problems:
        print(f"ctranslate2: converting again into {root / name}, because {problems[0]}", file=sys.stderr)
    _remove_abandoned(root)
    staging = staging_directory(root / name)
    try:
        try:
            write_converted_model(checkpoint, staging, quantization)
        except OSError as error:  # CTranslate2 names no file: the conversion's destination is what did not fit
            shutil.rmtree(staging, ignore_errors=True)
            with contextlib.suppress(OSError):  # the conversions' folder, if this left it empty
                root.rmdir()
            raise EnvironmentFault(f"{root / name}: the CTranslate2 conversion cannot be written "
                                   f"({error.strerror or error}); free space there or set VASWANI_CACHE to a "
                                   "directory with room") from None
        with write_faults_named(root / name):
            write_manifest(staging, CONVERSION_KIND, {
                "checkpoint": str(checkpoint.resolve()), "checkpoint_sha256": key, "quantization": quantization,
                "ctranslate2": _ctranslate2_version(), "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            })
            # Two processes may convert at once: the second finds the first one's whole conversion, drops its own.
            install_directory(staging, root / name,
                              keep=lambda found: conversion_problem(found, key, quantization) is None)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_stale(root, checkpoint, quantization, name)
    return root / name


def conversion_problem(directory: Path, key: str, quantization: str) -> str | None:
    """What keeps ``directory`` from being the conversion of the weights with ``key`` in ``quantization`` (None when
    nothing does): no manifest (partial, or not a conversion), another kind, other weights, another quantization,
    a file missing or changed since it was written."""
    if not directory.is_dir():
        return "there is none"
    try:
        manifest = read_manifest(directory)
    except VaswaniError as error:
        return str(error)
    if manifest is None:
        return f"no {MANIFEST_FILE}: a partial conversion, or not one"
    details = manifest.details
    if manifest.kind != CONVERSION_KIND:
        return f"it is a {manifest.kind}, not a CTranslate2 conversion"
    if details.get("checkpoint_sha256") != key or details.get("quantization") != quantization:
        return "its manifest names other weights or another quantization"
    if not set(CONVERTED_FILES) <= set(manifest.files):
        return f"its manifest does not list {', '.join(CONVERTED_FILES)}"
    try:
        verify_files(directory, manifest)
    except VaswaniError as error:
        return str(error)
    return None


def _remove_stale(root: Path, checkpoint: Path, quantization: str, current: str) -> None:
    """Delete this checkpoint's conversions of weights it no longer has: every other one in its own folder; in the
    user cache, which other checkpoints share, only those whose manifest names this checkpoint."""
    own = root == checkpoint / CONVERTED_DIRECTORY
    for stale in root.glob(f"{quantization}-*"):
        if stale.name == current or not stale.is_dir():
            continue
        if not own:
            try:
                manifest = read_manifest(stale)
            except VaswaniError:
                continue
            if manifest is None or manifest.details.get("checkpoint") != str(checkpoint.resolve()):
                continue
        shutil.rmtree(stale, ignore_errors=True)


def conversion_roots(checkpoint: Path) -> list[Path]:
    """The folders a conversion of ``checkpoint`` is kept in, in the order they are tried: its own, the user
    cache."""
    return [checkpoint / CONVERTED_DIRECTORY, default_cache_dir() / CONVERTED_DIRECTORY]


def _writable(root: Path) -> bool:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(root, os.W_OK | os.X_OK)


def _remove_abandoned(root: Path) -> None:
    """Delete conversions a killed process left half-assembled (never one another process is still writing)."""
    for leftover in root.glob(".*"):
        try:
            if time.time() - leftover.stat().st_mtime > ABANDONED_AFTER_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def _ctranslate2_version() -> str:
    import ctranslate2

    return ctranslate2.__version__


def weight_parameters(checkpoint: Path) -> int:
    """The number of parameters in the checkpoint's safetensors file, from its header alone (tied matrices are
    stored once, so this is the model's count of distinct parameters)."""
    path = checkpoint / CHECKPOINT_FILES[0]
    try:
        return sum(math.prod(shape) for shape in read_header(path).shapes.values())
    except (OSError, ValueError) as error:  # truncated, not a safetensors file, or no file at all
        raise VaswaniError(f"{path}: cannot be read as safetensors weights ({error}); the file is truncated or "
                           "corrupt") from None
