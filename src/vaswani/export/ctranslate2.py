"""Export a checkpoint as a CTranslate2 model, and translate text with it using our tokenizer.

CTranslate2 is the usual CPU inference engine for Transformer translators (int8 weights, fused kernels). Its
Python *spec* API describes a Transformer by flags plus named weights; we fill it directly from our model, the
way ``ctranslate2/converters/opennmt_py.py`` and ``marian.py`` fill it from theirs:

- post-LN and pre-LN (``pre_norm``; pre-LN's final encoder/decoder LayerNorms are the spec's ``layer_norm``),
- ReLU and exact (erf) GELU,
- sinusoidal and learned positions as an explicit table (ours interleaves sin/cos, so the table is stored rather
  than left to CTranslate2's built-in half/half sinusoid), rotary positions as ``rotary_dim=0`` with
  ``rotary_interleave=True`` (our RoPE rotates (even, odd) feature pairs), no positions as a zero table,
- every tying mode (tied matrices are written once per place that uses them; the spec deduplicates equal arrays),
- ``scale_embeddings`` on or off, LayerNorm ε = 1e-5 (torch's default, ours).

A sliding attention window is refused: CTranslate2's ``sliding_window`` only crops the decoder's cache, it cannot
band the encoder's attention.

Translating (the snippet of the README; the test runs exactly this function)::

    translator = Ct2Translator("exported/ct2")           # the export directory: model.bin + tokenizer.json
    translator.translate(["Ein Hund rennt."], beam_size=4)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from vaswani.config import ModelConfig
from vaswani.data.tokenizer import BOS, EOS, UNK, Tokenizer
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text
from vaswani.model.positions import sinusoidal_table
from vaswani.model.serialization import load_model, resolve_checkpoint
from vaswani.model.transformer import Transformer

TOKENIZER_FILE = "tokenizer.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16",
                 "int8_bfloat16")
# Rows of the explicit position table for sinusoidal/no positions (ours is unbounded; CTranslate2 needs a size).
MAX_POSITIONS = 1024
LAYER_NORM_EPSILON = 1e-5  # nn.LayerNorm's default, which every LayerNorm of ours uses


def ct2_unsupported(config: ModelConfig) -> str | None:
    """Why CTranslate2 cannot express ``config`` (None if it can)."""
    if config.sliding_window is not None:
        return (f"model.sliding_window={config.sliding_window} (CTranslate2 cannot restrict the encoder's "
                "attention to a band)")
    return None


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _position_table(model: Transformer) -> np.ndarray | None:
    """The table added to the embeddings, or None for rotary positions (applied inside attention)."""
    config = model.config
    length = max(MAX_POSITIONS, config.max_len)
    if config.positions == "sinusoidal":
        return _array(sinusoidal_table(length, config.d_model))
    if config.positions == "learned":
        return _array(model.state_dict()["encoder.embed.positions.embedding.weight"])
    return np.zeros((length, config.d_model), dtype=np.float32)  # "none", and the encoder of a rotary model


def _decoder_positions(model: Transformer) -> np.ndarray:
    if model.config.positions == "learned":
        return _array(model.state_dict()["decoder.embed.positions.embedding.weight"])
    return _position_table(model)


def model_spec(model: Transformer, vocabulary: list[str]) -> Any:
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    reason = ct2_unsupported(config)
    if reason is not None:
        raise VaswaniError(f"the CTranslate2 format cannot express {reason}")
    pre_norm = config.norm == "pre"
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}[config.activation]
    rotary = dict(rotary_dim=0, rotary_interleave=True, rotary_base=config.rope_base) if config.positions == "rope" \
        else {}
    encoder = transformer_spec.TransformerEncoderSpec(
        config.n_encoder_layers, config.n_heads, pre_norm=pre_norm, activation=activation, **rotary
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        config.n_decoder_layers, config.n_heads, pre_norm=pre_norm, activation=activation, **rotary
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
            table = _decoder_positions(model) if side == "decoder" else _position_table(model)
            side_spec.position_encodings.encodings = table
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


def token_id(tokenizer: Tokenizer, token: str) -> int:
    """Inverse of :func:`token_string`."""
    found = tokenizer.backend.token_to_id(token)
    if found is not None:
        return found
    if token.startswith("<unused") and token.endswith(">") and token[7:-1].isdigit():
        return int(token[7:-1])
    return tokenizer.unk_id


def export_ctranslate2(checkpoint: str | Path, out: str | Path, quantization: str = "float32") -> Path:
    """Write ``model.bin``, ``config.json``, the vocabularies and our ``tokenizer.json`` into ``out``."""
    if quantization not in QUANTIZATIONS:
        raise VaswaniError(f"--quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    directory = resolve_checkpoint(checkpoint)
    model = load_model(directory).eval()
    reason = ct2_unsupported(model.config)
    if reason is not None:
        raise VaswaniError(f"the CTranslate2 format cannot express {reason}")
    if not (directory / TOKENIZER_FILE).is_file():
        raise VaswaniError(f"{directory}: no {TOKENIZER_FILE} beside the weights; the export needs it")
    tokenizer = Tokenizer.load(directory / TOKENIZER_FILE)
    spec = model_spec(model, vocabulary(tokenizer, model.config.vocab_size))
    spec.validate()
    spec.optimize(quantization=quantization)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    atomic_write_text(out / TOKENIZER_FILE, tokenizer.to_str())
    return out


class Ct2Translator:
    """Text in, text out with a CTranslate2 export and our tokenizer (the one saved beside the model)."""

    def __init__(self, directory: str | Path, device: str = "cpu", compute_type: str = "default",
                 intra_threads: int = 0, inter_threads: int = 1):
        import ctranslate2

        directory = Path(directory)
        if not (directory / "model.bin").is_file() or not (directory / TOKENIZER_FILE).is_file():
            raise VaswaniError(f"{directory}: not a CTranslate2 export (expected model.bin and {TOKENIZER_FILE})")
        self.tokenizer = Tokenizer.load(directory / TOKENIZER_FILE)
        self.translator = ctranslate2.Translator(str(directory), device=device, compute_type=compute_type,
                                                 intra_threads=intra_threads, inter_threads=inter_threads)

    def translate(self, texts: Sequence[str], beam_size: int = 4, **options: Any) -> list[str]:
        """One translation per input (a blank line gives ""), as ``vaswani translate`` prints them; ``options`` go
        to ``ctranslate2.Translator.translate_batch`` (e.g. max_decoding_length, length_penalty)."""
        real = [i for i, text in enumerate(texts) if text.strip()]
        results = self.translate_ids([self.tokenizer.encode(texts[i].strip()) for i in real], beam_size, **options)
        out = [""] * len(texts)
        for i, text in zip(real, self.tokenizer.decode_batch(results)):
            out[i] = " ".join(text.splitlines())  # one line per translation, like our Translator
        return out

    def translate_ids(self, sources: Sequence[list[int]], beam_size: int = 4, **options: Any) -> list[list[int]]:
        """Token ids (without </s>, which the model config appends) -> the best hypothesis' ids, no </s>."""
        tok = self.tokenizer
        batch = [[token_string(tok, i) for i in ids] for ids in sources]
        results = self.translator.translate_batch(batch, beam_size=beam_size, **options)
        return [[token_id(tok, token) for token in result.hypotheses[0]] for result in results]


__all__ = ["export_ctranslate2", "model_spec", "vocabulary", "token_string", "token_id", "ct2_unsupported", "Ct2Translator", "QUANTIZATIONS"]
