"""What ``POST /v1/attention`` answers: a sentence's translation and the decoder's cross-attention while producing
it, and a bound, known before the search, on how many bytes of JSON that answer can take."""

from __future__ import annotations

from typing import Any

from vaswani.decoding import SearchConfig, Translator
from vaswani.decoding.engine import CTRANSLATE2, TORCH, output_limits


def display_tokens(translator: Translator, ids: list[int]) -> list[str]:
    """Each subword as text (byte-level BPE: a leading space marks the start of a word)."""
    return [translator.tokenizer.decode([i]) if i != translator.config.eos_id else "</s>" for i in ids]


def attention_of(translator: Translator, text: str, config: SearchConfig, source: str = "engine") -> dict[str, Any]:
    """On the model thread: translate one sentence, then the decoder's cross-attention while producing it.

    Row t of the weights is the attention while predicting target token t (the decoder reads <s> y1 … y_{t-1}),
    so rows are the output tokens y1 … yn </s> and columns the source tokens x1 … xm </s>. ``source`` "engine":
    what the serving engine gives (CTranslate2: the last layer, averaged over its heads; torch: every layer and
    head); "torch": the torch model's, every layer and head, for the translation the serving engine made.
    """
    ids = translator.encode([text])[0]
    engine = translator.engine
    if source == "engine" and engine.name == CTRANSLATE2:
        best, rows = engine.attention(ids, config)
        weights, mean_over_heads = [[]], [[[round(weight, 4) for weight in row] for row in rows]]
        layers, came_from = [translator.model_config.n_decoder_layers], CTRANSLATE2  # the last layer, heads averaged
    else:
        import torch

        best = engine.search([ids], config)[0][0]
        model = translator.model
        device = next(model.parameters()).device
        src = torch.tensor([ids], device=device)
        tgt_in = torch.tensor([[config.bos_id, *best.tokens]], device=device)
        with torch.inference_mode():
            # (L, H, T, S), in float64: a float32 rounded to four decimals is 0.03449999913573265 in JSON
            all_heads = model.cross_attention_weights(src, tgt_in)[:, 0].double().cpu()
        weights = all_heads.round(decimals=4).tolist()
        mean_over_heads = all_heads.mean(dim=1).round(decimals=4).tolist()
        layers, came_from = list(range(1, all_heads.size(0) + 1)), TORCH
    return {
        "translation": " ".join(translator.tokenizer.decode(best.tokens).splitlines()),
        "score": best.score,
        "source_tokens": display_tokens(translator, ids),
        "target_tokens": display_tokens(translator, [*best.tokens, config.eos_id]),
        "weights": weights,
        "mean_over_heads": mean_over_heads,
        "layer_numbers": layers,  # which decoder layers (1 = the first) the rows of weights are
        "heads": len(weights[0]),  # per layer; 0: only their average (mean_over_heads) is known
        "attention_from": came_from,
    }


# The JSON of one attention weight at most: four decimals ("0.1234") and a separator; of a row, its brackets.
ATTENTION_WEIGHT_BYTES = 7
ATTENTION_ROW_BYTES = 3
ATTENTION_OTHER_BYTES = 1024  # the translation's score, the names of the layers, the model, the time


def attention_bytes(translator: Translator, source_tokens: int, config: SearchConfig, source: str) -> int:
    """The most bytes a /v1/attention answer can take: each of the rows (the longest output the search may
    give this source, its </s> included) holds a weight per source token, for every layer and head
    (CTranslate2's engine: the last layer's average only) and their average over the heads; each token is
    shown once as text (at most 6 bytes of JSON per byte of the token) and the translation once more."""
    rows = output_limits([source_tokens], config, translator.model_config)[0]
    model = translator.model_config
    matrices = 1 if source == "engine" and translator.engine.name == CTRANSLATE2 else (
        model.n_decoder_layers * (model.n_heads + 1))
    weights = matrices * rows * (source_tokens * ATTENTION_WEIGHT_BYTES + ATTENTION_ROW_BYTES)
    token_bytes = 6 * translator.tokenizer.longest_token_bytes + 3
    return weights + (source_tokens + 2 * rows) * token_bytes + ATTENTION_OTHER_BYTES


def attention_size_problem(translator: Translator, source_tokens: int, config: SearchConfig, source: str,
                           limit: int) -> str | None:
    """Why an attention answer for a source of ``source_tokens`` could be larger than ``limit`` bytes (None when
    it cannot), in words that say what to send instead."""
    most = attention_bytes(translator, source_tokens, config, source)
    if most <= limit:
        return None
    rows = output_limits([source_tokens], config, translator.model_config)[0]
    return (f"{source_tokens:,} source tokens and a translation of up to {rows:,} tokens make an attention "
            f"answer of up to {most:,} bytes; at most {limit:,} (the server's max_attention_bytes): send a "
            "shorter text or a lower max_len_a/max_len_b")
