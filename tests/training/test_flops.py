"""The FLOPs behind MFU: the formula counts the matrix products the model runs, with attention counted by the
keys the model's masks allow (padding, causality, the sliding window)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from vaswani.config import ModelConfig
from vaswani.model import Transformer
from vaswani.model.masks import causal_mask, padding_mask, sliding_window_mask
from vaswani.training.flops import attended_pairs, forward_flops, self_attention_flops, training_flops


def _counted(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        model(src, tgt)
    return counter.get_total_flops()


@pytest.mark.parametrize("changes", [dict(), dict(n_decoder_layers=3, d_ff=200), dict(tie_embeddings="none")],
                         ids=["tiny", "deeper-decoder", "untied"])
@pytest.mark.parametrize("lengths", [(7, 5), (4, 9)], ids=["longer-source", "longer-target"])
def test_forward_flops_match_torchs_count_of_the_models_matrix_products(changes: dict, lengths: tuple) -> None:
    config = ModelConfig.preset("tiny", attention="standard", dropout=0.0, **changes)
    model = Transformer(config).eval()
    batch, (src_len, tgt_len) = 3, lengths
    src = torch.randint(4, config.vocab_size, (batch, src_len))
    tgt = torch.randint(4, config.vocab_size, (batch, tgt_len))
    # Written-out attention computes every decoder self-attention score and then masks those the causal mask
    # forbids; the formula counts only the allowed ones.
    forbidden = tgt_len * tgt_len - int(causal_mask(tgt_len).sum())
    masked = config.n_decoder_layers * 2 * 2 * config.d_model * forbidden * batch
    assert forward_flops(config, [src_len] * batch, [tgt_len] * batch) + masked == _counted(model, src, tgt)


def test_padding_counts_only_the_real_tokens_of_each_sentence() -> None:
    """A padded batch costs what its sentences cost one by one: the count is per sentence, at its real length."""
    config = ModelConfig.preset("tiny", attention="standard", dropout=0.0)
    model = Transformer(config).eval()
    lengths = [(6, 4), (3, 7), (5, 5)]
    alone = 0
    for src_len, tgt_len in lengths:
        src = torch.randint(4, config.vocab_size, (1, src_len))
        tgt = torch.randint(4, config.vocab_size, (1, tgt_len))
        forbidden = tgt_len * tgt_len - int(causal_mask(tgt_len).sum())
        alone += _counted(model, src, tgt) - config.n_decoder_layers * 4 * config.d_model * forbidden
    sources, targets = zip(*lengths)
    assert forward_flops(config, list(sources), list(targets)) == alone
    assert training_flops(config, list(sources), list(targets)) == 3 * alone


@pytest.mark.parametrize("window", [None, 1, 4, 9, 100])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_attention_is_counted_by_the_pairs_the_models_masks_allow(window: int | None, causal: bool) -> None:
    length, d_model = 23, 16
    if window is None:
        allowed = causal_mask(length) if causal else padding_mask(torch.ones(1, length, dtype=torch.long))
    else:
        allowed = sliding_window_mask(length, length, window, causal)
    pairs = int(allowed.expand(1, 1, length, length).sum())
    assert attended_pairs(length, causal, window) == pairs
    assert self_attention_flops(d_model, length, causal, window) == 8 * d_model**2 * length + 4 * d_model * pairs


def test_a_window_lowers_the_count_only_where_it_binds() -> None:
    full, windowed = ModelConfig.preset("tiny"), ModelConfig.preset("tiny", sliding_window=16)
    assert forward_flops(windowed, [8], [8]) == forward_flops(full, [8], [8])  # |i - j| <= 8 covers 8 tokens
    assert forward_flops(windowed, [200], [200]) < forward_flops(full, [200], [200])
