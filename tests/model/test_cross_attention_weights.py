"""Transformer.cross_attention_weights: the weights the real pass multiplies the values by, rows summing to 1."""

from __future__ import annotations

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.model import Transformer

VARIANTS = [dict(attention="standard"), dict(attention="sdpa"), dict(norm="pre", positions="rope")]


def _model(device, **overrides) -> Transformer:
    return Transformer(ModelConfig.preset("tiny", dropout=0.1, vocab_size=50, **overrides)).to(device)


def _batch(device) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(3, 50, (2, 7), device=device)
    src[1, 4:] = 0  # second sentence: 4 real tokens, 3 padding
    tgt_in = torch.randint(3, 50, (2, 5), device=device)
    tgt_in[:, 0] = 1
    return src, tgt_in


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_weights_times_values_give_the_cross_attention_output_of_the_real_pass(overrides, device) -> None:
    model = _model(device, **overrides).eval()
    src, tgt_in = _batch(device)
    seen = []  # (queries, memory, mask, output) of every cross-attention call in an ordinary forward pass
    handles = [
        layer.cross_attn.register_forward_hook(
            lambda module, args, kwargs, out: seen.append((args[0], kwargs["context"], kwargs["mask"], out)),
            with_kwargs=True,
        )
        for layer in model.decoder.layers
    ]
    with torch.no_grad():
        model(src, tgt_in)
    for handle in handles:
        handle.remove()

    weights = model.cross_attention_weights(src, tgt_in)
    layers, heads = model.config.n_decoder_layers, model.config.n_heads
    assert weights.shape == (layers, 2, heads, 5, 7)
    for layer, w, (_, memory, _, output) in zip(model.decoder.layers, weights, seen):
        attn = layer.cross_attn
        values = attn.project_context(memory).v  # (B, H, S, d)
        rebuilt = attn.out_proj((w @ values).transpose(1, 2).flatten(-2))
        torch.testing.assert_close(rebuilt, output, atol=1e-5, rtol=1e-4)


def test_rows_sum_to_one_over_real_source_tokens_and_padding_gets_nothing(device) -> None:
    model = _model(device).train()  # the method must switch dropout off by itself and restore the mode
    src, tgt_in = _batch(device)
    weights = model.cross_attention_weights(src, tgt_in)
    assert model.training
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    assert weights[:, 1, :, :, 4:].abs().max() < 1e-12  # padded source columns
    alone = model.cross_attention_weights(src[1:, :4], tgt_in[1:])
    torch.testing.assert_close(weights[:, 1:, :, :, :4], alone, atol=1e-5, rtol=1e-4)  # padding changes nothing
    assert not torch.equal(weights[0], weights[-1])  # layers differ: not one layer's weights copied
