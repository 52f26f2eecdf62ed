"""Export a checkpoint as a Hugging Face ``transformers`` MarianMT model + fast tokenizer.

The paper layout (post-LN, sinusoidal positions, ReLU or GELU, embeddings scaled by √d, output projection tied to
the decoder embedding) is exactly MarianMT's architecture, so the export is a renaming of weights plus two details
checked against ``transformers/models/marian/modeling_marian.py`` (5.x):

- **Sinusoid layout.** Our table interleaves sin and cos (``PE[:, 0::2] = sin``, ``PE[:, 1::2] = cos``); Marian's
  ``MarianSinusoidalPositionalEmbedding`` puts all sines in the first half and all cosines in the second, with the
  same frequencies. Marian computes its table itself (it is not stored), so instead of changing the table we
  permute the model's *hidden basis*: every weight that reads or writes the d_model-wide residual stream has that
  axis reordered the same way (embeddings, LayerNorms, attention/FFN input columns and output rows). LayerNorm and
  the residual sums do not care about the order of features, so the permuted model computes the same function and
  its positions line up with Marian's table.
- **Decoding conventions.** Our decoder starts with ``<s>`` (id 1), Marian checkpoints usually start with ``<pad>``;
  ``decoder_start_token_id`` is set to ours. ``final_logits_bias`` is zero (our output projection has no bias).

    dir = export_hf("runs/base", "exported/hf")
    model = MarianMTModel.from_pretrained(dir); tokenizer = AutoTokenizer.from_pretrained(dir)

Settings MarianMT cannot express (pre-LN, rotary/learned/no positions, sliding windows) are refused with a
VaswaniError pointing to the CTranslate2 format, which covers them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vaswani.config import ModelConfig
from vaswani.data.batching import BOS_ID, EOS_ID, PAD_ID
from vaswani.data.tokenizer import BOS, EOS, PAD, UNK, Tokenizer
from vaswani.errors import VaswaniError
from vaswani.model.serialization import TOKENIZER_FILE, load_model, resolve_checkpoint
from vaswani.model.transformer import Transformer

# Marian's position table is computed at load time for this many positions; ours is unbounded. Generation is
# capped below it (GENERATION_MAX_LENGTH) and inputs are truncated to it by the tokenizer.
MAX_POSITIONS = 1024
GENERATION_MAX_LENGTH = 256


def marian_unsupported(config: ModelConfig) -> str | None:
    """Why MarianMT cannot express ``config`` (None if it can)."""
    if config.norm != "post":
        return f"model.norm={config.norm} (MarianMT is post-LN only)"
    if config.positions != "sinusoidal":
        return f"model.positions={config.positions} (MarianMT has sinusoidal positions only)"
    if config.sliding_window is not None:
        return f"model.sliding_window={config.sliding_window} (MarianMT attends to every position)"
    return None


def hidden_permutation(d_model: int) -> torch.Tensor:
    """Index that reorders our interleaved (sin, cos, sin, cos, …) features into Marian's (sin…, cos…) halves."""
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under MarianMTModel's names, with the hidden axis permuted (see the module docstring)."""
    config = model.config
    perm = hidden_permutation(config.d_model)
    ours = {name: tensor.detach().float().cpu() for name, tensor in model.state_dict().items()}

    def reads(w: torch.Tensor) -> torch.Tensor:  # Linear whose input is the residual stream: permute columns
        return w[:, perm].contiguous()

    def writes(t: torch.Tensor) -> torch.Tensor:  # weight rows / bias / LayerNorm entries on the residual stream
        return t[perm].contiguous()

    out: dict[str, torch.Tensor] = {}

    def attention(dst: str, q: tuple, k: tuple, v: tuple, o: tuple) -> None:
        for name, (w, b) in zip(("q_proj", "k_proj", "v_proj"), (q, k, v)):
            out[f"{dst}.{name}.weight"], out[f"{dst}.{name}.bias"] = reads(w), b.clone()
        out[f"{dst}.out_proj.weight"], out[f"{dst}.out_proj.bias"] = writes(o[0]), writes(o[1])

    def feed_forward(dst: str, src: str) -> None:
        out[f"{dst}.fc1.weight"] = reads(ours[f"{src}.ffn.up.weight"])
        out[f"{dst}.fc1.bias"] = ours[f"{src}.ffn.up.bias"]
        out[f"{dst}.fc2.weight"] = writes(ours[f"{src}.ffn.down.weight"])
        out[f"{dst}.fc2.bias"] = writes(ours[f"{src}.ffn.down.bias"])

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = writes(ours[f"{src}.weight"]), writes(ours[f"{src}.bias"])

    def split(prefix: str, parts: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        weights = ours[f"{prefix}.weight"].chunk(parts, dim=0)
        biases = ours[f"{prefix}.bias"].chunk(parts, dim=0)
        return list(zip(weights, biases))

    for i in range(config.n_encoder_layers):
        src, dst = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        q, k, v = split(f"{src}.self_attn.qkv_proj", 3)
        o = (ours[f"{src}.self_attn.out_proj.weight"], ours[f"{src}.self_attn.out_proj.bias"])
        attention(f"{dst}.self_attn", q, k, v, o)
        norm(f"{dst}.self_attn_layer_norm", f"{src}.attn_block.norm")
        feed_forward(dst, src)
        norm(f"{dst}.final_layer_norm", f"{src}.ffn_block.norm")

    for i in range(config.n_decoder_layers):
        src, dst = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        q, k, v = split(f"{src}.self_attn.qkv_proj", 3)
        o = (ours[f"{src}.self_attn.out_proj.weight"], ours[f"{src}.self_attn.out_proj.bias"])
        attention(f"{dst}.self_attn", q, k, v, o)
        norm(f"{dst}.self_attn_layer_norm", f"{src}.self_block.norm")
        (q,) = split(f"{src}.cross_attn.q_proj", 1)
        k, v = split(f"{src}.cross_attn.kv_proj", 2)
        o = (ours[f"{src}.cross_attn.out_proj.weight"], ours[f"{src}.cross_attn.out_proj.bias"])
        attention(f"{dst}.encoder_attn", q, k, v, o)
        norm(f"{dst}.encoder_attn_layer_norm", f"{src}.cross_block.norm")
        feed_forward(dst, src)
        norm(f"{dst}.final_layer_norm", f"{src}.ffn_block.norm")

    encoder_tokens = reads(ours["encoder.embed.tokens.weight"])
    decoder_tokens = reads(ours["decoder.embed.tokens.weight"])
    out["model.encoder.embed_tokens.weight"] = encoder_tokens
    out["model.decoder.embed_tokens.weight"] = decoder_tokens
    out["lm_head.weight"] = reads(ours["output.weight"])
    if config.tie_embeddings == "all-three":
        out["model.shared.weight"] = encoder_tokens
    out["final_logits_bias"] = torch.zeros(1, config.vocab_size)
    return out


def marian_config(config: ModelConfig, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> Any:
    """The ``MarianConfig`` of our architecture (raises VaswaniError for what Marian cannot express): what the
    export writes, and the MarianMT peer that ``vaswani bench train`` trains against ours."""
    from transformers import MarianConfig

    reason = marian_unsupported(config)
    if reason is not None:
        raise VaswaniError(f"MarianMT cannot express {reason}")
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.n_encoder_layers,
        decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads,
        decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function=config.activation,  # ACT2FN: "relu", and "gelu" = the exact erf GELU, as F.gelu
        # Ours drops the residual branches and, inside the feed-forward, the activation with model.dropout, and
        # the attention weights with model.attention_dropout; Marian has a rate for each.
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.dropout,
        max_position_embeddings=max(MAX_POSITIONS, config.max_len),
        scale_embedding=config.scale_embeddings,
        share_encoder_decoder_embeddings=config.tie_embeddings == "all-three",
        tie_word_embeddings=config.tie_embeddings != "none",
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
        decoder_start_token_id=bos_id,  # ours reads <s> first (Marian checkpoints usually read <pad>)
        forced_eos_token_id=eos_id,
        is_encoder_decoder=True,
    )


def to_marian(model: Transformer, tokenizer: Tokenizer) -> Any:
    """An in-memory ``MarianMTModel`` computing the same function as ``model`` (eval mode)."""
    from transformers import MarianMTModel

    hf_model = MarianMTModel(marian_config(model.config, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id))
    missing, unexpected = hf_model.load_state_dict(marian_state_dict(model), strict=False)
    # The position tables are computed, not loaded; everything else must have been filled.
    missing = [name for name in missing if not name.endswith("embed_positions.weight")]
    if missing or unexpected:
        raise VaswaniError(f"internal error: MarianMT weights missing {missing[:3]}, unexpected {unexpected[:3]}")
    hf_model.generation_config.update(
        decoder_start_token_id=tokenizer.bos_id,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.pad_id,
        forced_eos_token_id=tokenizer.eos_id,
        # Our default search is beam 4; its GNMT length penalty has no counterpart in `generate`, whose
        # length_penalty=1.0 divides by the length (our length_norm=average).
        num_beams=4,
        length_penalty=1.0,
        early_stopping=True,
        max_length=GENERATION_MAX_LENGTH,
    )
    return hf_model.eval()


def hf_tokenizer(tokenizer: Tokenizer, model_max_length: int = MAX_POSITIONS) -> Any:
    """A ``PreTrainedTokenizerFast`` over our tokenizer.json: same BPE, same NFKC normaliser, same special ids.

    Our batching appends ``</s>`` to every source sentence; the fast tokenizer does it with a post-processor, so
    ``tokenizer("Ein Hund.")`` gives exactly the ids our model is fed.
    """
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A $B {EOS}", special_tokens=[(EOS, tokenizer.eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
        # Text that contains "<s>" is ordinary text, as in our Tokenizer (encode_special_tokens).
        split_special_tokens=True,
    )


def export_hf(checkpoint: str | Path, out: str | Path) -> Path:
    """Write ``config.json``, ``generation_config.json``, ``model.safetensors`` and the tokenizer files to ``out``."""
    directory = resolve_checkpoint(checkpoint)
    model = load_model(directory).eval()
    reason = marian_unsupported(model.config)
    if reason is not None:  # before loading transformers: a fast, clear refusal
        raise VaswaniError(f"the Hugging Face (MarianMT) format cannot express {reason}; "
                           "export with --format ctranslate2 instead")
    if not (directory / TOKENIZER_FILE).is_file():
        raise VaswaniError(f"{directory}: no {TOKENIZER_FILE} beside the weights; the export needs it")
    tokenizer = Tokenizer.load(directory / TOKENIZER_FILE)
    out = Path(out)
    to_marian(model, tokenizer).save_pretrained(out)
    hf_tokenizer(tokenizer).save_pretrained(out)
    return out


__all__ = ["export_hf", "to_marian", "hf_tokenizer", "marian_config", "marian_state_dict", "marian_unsupported",
           "hidden_permutation"]
