"""The whole model: agreement with torch.nn.Transformer, causality, padding invariance, incremental decoding,
positions and the parameter count."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.model import RotaryEmbedding, Transformer, sinusoidal_table

VARIANTS = [
    dict(),
    dict(positions="learned"),
    dict(positions="rope", norm="pre", activation="gelu"),
    dict(positions="none", tie_embeddings="none"),
    dict(attention="standard", sliding_window=3),
    dict(attention="sdpa", sliding_window=3, positions="rope", tie_embeddings="decoder-output"),
]


def _model(device, **overrides) -> Transformer:
    config = ModelConfig.preset("tiny", dropout=0.0, vocab_size=50, **overrides)
    return Transformer(config).to(device).eval()


def _batch(device, src_lengths=(9, 6, 3), tgt_lengths=(7, 7, 4)):
    src = torch.randint(4, 50, (len(src_lengths), max(src_lengths)), device=device)
    tgt = torch.randint(4, 50, (len(tgt_lengths), max(tgt_lengths)), device=device)
    for row, n in enumerate(src_lengths):
        src[row, n:] = 0
    for row, n in enumerate(tgt_lengths):
        tgt[row, n:] = 0
    return src, tgt


def _assert_close(actual, expected, tol=1e-5) -> None:
    error = ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-12)).item()
    assert error <= tol, f"relative error {error:.2e} > {tol:.0e}"


# ---- equivalence with the PyTorch reference -------------------------------------------------------------------


def _copy_into_reference(model: Transformer) -> nn.Transformer:
    c = model.config
    reference = nn.Transformer(c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff, dropout=0.0,
                               activation="relu", batch_first=True, norm_first=False)
    # nn.Transformer always adds a final LayerNorm; the post-LN paper model has none.
    reference.encoder.norm = nn.Identity()
    reference.encoder.enable_nested_tensor = False  # keep the reference on its plain (non-fast-path) math
    reference.decoder.norm = nn.Identity()

    def copy_linear(target: nn.Module, weight: torch.Tensor, bias: torch.Tensor) -> None:
        target.weight.data.copy_(weight)
        target.bias.data.copy_(bias)

    def copy_norm(target: nn.LayerNorm, source: nn.LayerNorm) -> None:
        target.weight.data.copy_(source.weight)
        target.bias.data.copy_(source.bias)

    for ours, theirs in zip(model.encoder.layers, reference.encoder.layers):
        theirs.self_attn.in_proj_weight.data.copy_(ours.self_attn.qkv_proj.weight)
        theirs.self_attn.in_proj_bias.data.copy_(ours.self_attn.qkv_proj.bias)
        copy_linear(theirs.self_attn.out_proj, ours.self_attn.out_proj.weight, ours.self_attn.out_proj.bias)
        copy_linear(theirs.linear1, ours.ffn.up.weight, ours.ffn.up.bias)
        copy_linear(theirs.linear2, ours.ffn.down.weight, ours.ffn.down.bias)
        copy_norm(theirs.norm1, ours.attn_block.norm)
        copy_norm(theirs.norm2, ours.ffn_block.norm)
    for ours, theirs in zip(model.decoder.layers, reference.decoder.layers):
        theirs.self_attn.in_proj_weight.data.copy_(ours.self_attn.qkv_proj.weight)
        theirs.self_attn.in_proj_bias.data.copy_(ours.self_attn.qkv_proj.bias)
        copy_linear(theirs.self_attn.out_proj, ours.self_attn.out_proj.weight, ours.self_attn.out_proj.bias)
        cross = ours.cross_attn
        theirs.multihead_attn.in_proj_weight.data.copy_(torch.cat([cross.q_proj.weight, cross.kv_proj.weight]))
        theirs.multihead_attn.in_proj_bias.data.copy_(torch.cat([cross.q_proj.bias, cross.kv_proj.bias]))
        copy_linear(theirs.multihead_attn.out_proj, cross.out_proj.weight, cross.out_proj.bias)
        copy_linear(theirs.linear1, ours.ffn.up.weight, ours.ffn.up.bias)
        copy_linear(theirs.linear2, ours.ffn.down.weight, ours.ffn.down.bias)
        copy_norm(theirs.norm1, ours.self_block.norm)
        copy_norm(theirs.norm2, ours.cross_block.norm)
        copy_norm(theirs.norm3, ours.ffn_block.norm)
    return reference.eval()


@pytest.mark.parametrize("attention", ["standard", "sdpa"])
def test_matches_torch_nn_transformer_with_copied_weights(attention: str) -> None:
    model = _model("cpu", attention=attention, positions="sinusoidal", norm="post", activation="relu")
    reference = _copy_into_reference(model)
    src, tgt = _batch("cpu")
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        ours = model.decode(tgt, memory, memory_mask)
        theirs = reference(
            model.encoder.embed(src),
            model.decoder.embed(tgt),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.size(1)),
            src_key_padding_mask=src == 0,
            memory_key_padding_mask=src == 0,
        )
    real = tgt != 0  # nn.Transformer leaves padded target rows alone too; compare the real positions
    _assert_close(ours[real], theirs[real], 1e-5)


# ---- structural properties, for every variant -----------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_decoder_is_causal(variant: dict, device) -> None:
    model = _model(device, **variant)
    src, tgt = _batch(device, tgt_lengths=(7, 7, 7))
    with torch.no_grad():
        before = model(src, tgt)
        for t in range(tgt.size(1) - 1):
            changed = tgt.clone()
            changed[:, t + 1 :] = torch.randint(4, 50, changed[:, t + 1 :].shape, device=device)
            after = model(src, changed)
            torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_appended_padding_changes_nothing(variant: dict, device) -> None:
    model = _model(device, **variant)
    src, tgt = _batch(device)
    with torch.no_grad():
        before = model(src, tgt)
        padded_src = torch.cat([src, torch.zeros(3, 5, dtype=src.dtype, device=device)], dim=1)
        padded_tgt = torch.cat([tgt, torch.zeros(3, 4, dtype=tgt.dtype, device=device)], dim=1)
        after = model(padded_src, padded_tgt)[:, : tgt.size(1)]
    real = tgt != 0
    torch.testing.assert_close(after[real], before[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_incremental_decoding_equals_the_full_pass(variant: dict, device) -> None:
    model = _model(device, **variant)
    src, tgt = _batch(device, tgt_lengths=(8, 8, 8))
    with torch.no_grad():
        full = model(src, tgt)
        state = model.start_decoding(src)
        steps = torch.stack([model.decode_step(tgt[:, t], state) for t in range(tgt.size(1))], dim=1)
    _assert_close(steps, full, 1e-5)
    assert state.step == tgt.size(1)


def test_decoder_state_reorder_selects_rows() -> None:
    model = _model("cpu")
    src, tgt = _batch("cpu", tgt_lengths=(5, 5, 5))
    with torch.no_grad():
        state = model.start_decoding(src)
        for t in range(3):
            model.decode_step(tgt[:, t], state)
        index = torch.tensor([2, 2, 0])
        reordered = state.reorder(index)
        expected = model(src[index], tgt[index])[:, 3]
        _assert_close(model.decode_step(tgt[index, 3], reordered), expected, 1e-5)


def test_sliding_window_decoding_keeps_a_bounded_cache() -> None:
    model = _model("cpu", sliding_window=3)
    src, tgt = _batch("cpu", tgt_lengths=(8, 8, 8))
    with torch.no_grad():
        state = model.start_decoding(src)
        for t in range(8):
            model.decode_step(tgt[:, t], state)
    assert all(kv.k.size(2) == 3 for kv in state.self_kv)


def test_full_and_windowed_models_differ_only_when_the_window_binds() -> None:
    full = _model("cpu")
    windowed = _model("cpu", sliding_window=64)
    windowed.load_state_dict(full.state_dict())
    src, tgt = _batch("cpu")
    with torch.no_grad():
        torch.testing.assert_close(windowed(src, tgt), full(src, tgt), rtol=1e-5, atol=1e-5)
        windowed.config.sliding_window = 2
        narrow = Transformer(windowed.config).eval()
        narrow.load_state_dict(full.state_dict())
        assert not torch.allclose(narrow(src, tgt), full(src, tgt), atol=1e-3)


def test_no_nan_for_fully_padded_source_under_bf16(device) -> None:
    model = _model(device)
    model.train()  # dropout is 0; we want gradients
    src, tgt = _batch(device)
    src[2] = 0  # one source entirely padding
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    logits.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ---- positions ------------------------------------------------------------------------------------------------


def test_sinusoidal_table_is_the_papers_formula() -> None:
    table = sinusoidal_table(50, 16)
    for pos, i in itertools.product([0, 1, 7, 49], range(8)):
        angle = pos / 10_000 ** (2 * i / 16)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_shift_is_the_same_rotation_for_every_position() -> None:
    d, k = 32, 5
    table = sinusoidal_table(100, d).double()
    omega = 1.0 / 10_000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    rotation = torch.zeros(d, d, dtype=torch.float64)  # block-diagonal, depends on k only
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    shifted = table[:-k] @ rotation  # rows: PE(pos) -> PE(pos + k)
    torch.testing.assert_close(shifted, table[k:], rtol=0, atol=1e-5)


def test_rope_scores_depend_only_on_the_offset() -> None:
    rope = RotaryEmbedding(head_dim=16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m: int, n: int) -> float:
        return (rope(q, offset=m) * rope(k, offset=n)).sum().item()

    for offset in [0, 1, 5, -3]:
        reference = score(20 + offset, 20)
        for shift in [-15, -7, 0, 13, 100]:
            assert score(20 + offset + shift, 20 + shift) == pytest.approx(reference, rel=1e-4, abs=1e-4)
    assert score(25, 20) != pytest.approx(score(21, 20), rel=1e-3)  # ...and it does depend on the offset


def test_rope_preserves_norms() -> None:
    rope = RotaryEmbedding(head_dim=8)
    x = torch.randn(2, 3, 10, 8)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))


def test_learned_positions_refuse_lengths_they_cannot_represent() -> None:
    model = _model("cpu", positions="learned", max_len=8)
    with pytest.raises(ValueError, match="learned positions cover 8"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_sinusoidal_and_rope_extend_beyond_max_len() -> None:
    for positions in ("sinusoidal", "rope"):
        model = _model("cpu", positions=positions, max_len=8)
        logits = model(torch.ones(1, 20, dtype=torch.long), torch.ones(1, 20, dtype=torch.long))
        assert torch.isfinite(logits).all()


# ---- parameters, tying, configuration -------------------------------------------------------------------------


def test_base_parameter_count_matches_the_closed_form() -> None:
    c = ModelConfig.preset("base")
    assert (c.vocab_size, c.d_model, c.n_heads, c.d_ff, c.max_len) == (50_000, 512, 8, 2048, 64)
    v, d, f = c.vocab_size, c.d_model, c.d_ff
    attention = 4 * d * d + 4 * d  # W_q, W_k, W_v, W_o with biases
    ffn = d * f + f + f * d + d
    layer_norm = 2 * d
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    embedding = v * d  # all-three tying: one matrix for encoder, decoder and pre-softmax projection
    expected = embedding + 6 * encoder_layer + 6 * decoder_layer
    assert expected == 69_738_496
    assert Transformer(c).num_parameters() == expected
    pre_ln = Transformer(ModelConfig.preset("base", norm="pre", positions="learned"))
    assert pre_ln.num_parameters() == expected + 2 * layer_norm + 2 * c.max_len * d


@pytest.mark.parametrize("tying,distinct", [("all-three", 1), ("decoder-output", 2), ("none", 3)])
def test_embedding_tying(tying: str, distinct: int) -> None:
    model = _model("cpu", tie_embeddings=tying)
    matrices = {id(model.encoder.embed.tokens.weight), id(model.decoder.embed.tokens.weight), id(model.output.weight)}
    assert len(matrices) == distinct
    c = model.config
    assert model.num_parameters() == Transformer(ModelConfig.preset("tiny", vocab_size=50)).num_parameters() + (
        distinct - 1
    ) * c.vocab_size * c.d_model


def test_config_rejects_bad_values_with_the_field_name() -> None:
    with pytest.raises(ConfigError, match="model.positions='absolute'"):
        ModelConfig(positions="absolute")
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        ModelConfig.preset("huge")
    with pytest.raises(ConfigError, match="d_model=100 must be divisible"):
        ModelConfig(d_model=100, n_heads=8)
    with pytest.raises(ConfigError, match="unknown model setting"):
        ModelConfig.from_dict({"d_modle": 3})


def test_presets_are_reachable_from_python() -> None:
    import vaswani

    assert set(vaswani.MODEL_PRESETS) >= {"base", "small", "tiny"}
    assert isinstance(vaswani.Transformer(vaswani.ModelConfig.preset("tiny")), torch.nn.Module)


def test_attention_dropout_is_its_own_setting() -> None:
    """Residual dropout 0 with attention dropout > 0 still randomises training passes; both 0 do not."""
    src, tgt = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 5))
    for attention_dropout, stochastic in ((0.0, False), (0.5, True)):
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset("tiny", vocab_size=50, dropout=0.0,
                                               attention_dropout=attention_dropout)).train()
        assert (not torch.equal(model(src, tgt), model(src, tgt))) == stochastic
    with pytest.raises(ConfigError, match="attention_dropout"):
        ModelConfig(attention_dropout=1.0)
