"""Attention backends, masks and the sliding window: numerical proofs, not smoke tests."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend

from vaswani.model import attention, kernels
from vaswani.model.attention import MultiHeadAttention, sdpa_attention, standard_attention
from vaswani.model.kernels import sdpa_backends
from vaswani.model.kv_cache import KVCache
from vaswani.model.masks import attended_keys, causal_mask, padding_mask, sliding_window_mask
from vaswani.model.window import window_block, windowed_attention

B, H, D = 3, 4, 16


def _qkv(q_len: int, k_len: int, device, dtype=torch.float32):
    shape_q, shape_k = (B, H, q_len, D), (B, H, k_len, D)
    return (torch.randn(shape_q, device=device, dtype=dtype), torch.randn(shape_k, device=device, dtype=dtype),
            torch.randn(shape_k, device=device, dtype=dtype))


def _ids_with_padding(length: int, lengths: list[int], device) -> torch.Tensor:
    ids = torch.randint(4, 100, (len(lengths), length), device=device)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return ids


def _assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    error = (actual - expected).abs().max() / expected.abs().max()
    assert error <= rel, f"relative error {error:.2e} > {rel:.0e}"


@pytest.mark.parametrize("kind", ["self", "causal", "cross"])
def test_standard_and_sdpa_backends_agree_fp32(kind: str, device) -> None:
    q_len, k_len = (9, 9) if kind != "cross" else (7, 11)
    q, k, v = _qkv(q_len, k_len, device)
    key_ids = _ids_with_padding(k_len, [k_len, 5, 2], device)
    mask = padding_mask(key_ids)
    causal = kind == "causal"
    expected = standard_attention(q, k, v, mask=mask, is_causal=causal)
    actual = sdpa_attention(q, k, v, mask=mask, is_causal=causal)
    _assert_rel_close(actual, expected, 1e-5)
    # and without any mask (the flash-eligible path for causal self-attention)
    _assert_rel_close(sdpa_attention(q, k, v, is_causal=causal), standard_attention(q, k, v, is_causal=causal), 1e-5)


def test_standard_attention_is_the_textbook_formula() -> None:
    q, k, v = _qkv(5, 6, "cpu", dtype=torch.float64)
    mask = padding_mask(_ids_with_padding(6, [6, 4, 1], "cpu"))
    expected = torch.empty_like(q)
    for b in range(B):
        for h in range(H):
            scores = q[b, h] @ k[b, h].T / D**0.5
            scores[:, ~mask[b, 0, 0]] = float("-inf")
            expected[b, h] = torch.softmax(scores, dim=-1) @ v[b, h]
    torch.testing.assert_close(standard_attention(q, k, v, mask=mask), expected.float().double(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ["standard", "sdpa"])
def test_padded_keys_get_exactly_zero_weight(backend: str) -> None:
    """Changing the values (and keys) at padded positions must not change any output."""
    q, k, v = _qkv(4, 8, "cpu")
    mask = padding_mask(_ids_with_padding(8, [8, 6, 3], "cpu"))
    attend = standard_attention if backend == "standard" else sdpa_attention
    before = attend(q, k, v, mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 6:] += 100.0
    v2[1, :, 6:] += 100.0
    k2[2, :, 3:] -= 50.0
    v2[2, :, 3:] *= -7.0
    torch.testing.assert_close(attend(q, k2, v2, mask=mask), before, rtol=0, atol=1e-6)


def test_causal_mask_blocks_the_future() -> None:
    mask = causal_mask(5)
    assert mask.shape == (1, 1, 5, 5)
    for i in range(5):
        for j in range(5):
            assert bool(mask[0, 0, i, j]) == (j <= i)
    # and in the backends: perturbing position t's key/value leaves queries < t unchanged
    for attend in (standard_attention, sdpa_attention):
        q, k, v = _qkv(6, 6, "cpu")
        before = attend(q, k, v, is_causal=True)
        k[:, :, 4] += 3.0
        v[:, :, 4] += 3.0
        after = attend(q, k, v, is_causal=True)
        torch.testing.assert_close(after[:, :, :4], before[:, :, :4], rtol=0, atol=0)
        assert not torch.allclose(after[:, :, 4:], before[:, :, 4:])


def test_combined_padding_and_causal_masks() -> None:
    ids = _ids_with_padding(5, [5, 3, 1], "cpu")
    mask = padding_mask(ids) & causal_mask(5)  # the convention: masks combine with &
    assert mask.shape == (3, 1, 5, 5)
    for b, n in enumerate([5, 3, 1]):
        for i in range(5):
            for j in range(5):
                assert bool(mask[b, 0, i, j]) == (j <= i and j < n)


@pytest.mark.parametrize("backend", ["standard", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fully_masked_rows_never_produce_nan_under_autocast(backend: str, dtype: torch.dtype, device) -> None:
    if dtype == torch.float16 and device.type == "cpu":
        pytest.skip("fp16 autocast is a GPU feature")
    attention = MultiHeadAttention(32, 4, 0.0, backend).to(device)
    x = torch.randn(2, 5, 32, device=device, requires_grad=True)
    ids = torch.tensor([[0, 0, 0, 0, 0], [7, 8, 9, 0, 0]], device=device)  # row 0 entirely padding
    with torch.autocast(device.type, dtype=dtype):
        out = attention(x, mask=padding_mask(ids))
    assert torch.isfinite(out).all()
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    # the real row is unaffected by the guard: it matches fp32 within low-precision tolerance
    reference = attention(x, mask=padding_mask(ids))
    torch.testing.assert_close(out[1].float(), reference[1], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("backend", ["standard", "sdpa"])
def test_masks_hold_under_bf16_autocast(backend: str, device) -> None:
    """Masked keys still get zero weight when scores are bf16 (the fill value follows the dtype)."""
    attention = MultiHeadAttention(32, 4, 0.0, backend).to(device)
    x = torch.randn(2, 6, 32, device=device)
    ids = _ids_with_padding(6, [6, 3], device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        before = attention(x, mask=padding_mask(ids))
        x2 = x.clone()
        x2[1, 3:] = 1e3 * torch.randn_like(x2[1, 3:])
        after = attention(x2, mask=padding_mask(ids))
    torch.testing.assert_close(after[1, :3], before[1, :3], rtol=0, atol=0)


# ---- sliding window ------------------------------------------------------------------------------------------


def _explicit_band(length: int, window: int, causal: bool) -> torch.Tensor:
    band = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(length):
            band[i, j] = (0 <= i - j < window) if causal else (abs(i - j) <= window // 2)
    return band[None, None]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("backend", [standard_attention, sdpa_attention])
def test_sliding_window_equals_standard_attention_with_an_explicit_band(causal: bool, backend) -> None:
    q, k, v = _qkv(12, 12, "cpu")
    window = sliding_window_mask(12, 12, 4, causal=causal)
    assert torch.equal(window, _explicit_band(12, 4, causal))
    torch.testing.assert_close(backend(q, k, v, mask=window),
                               standard_attention(q, k, v, mask=_explicit_band(12, 4, causal)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_window_at_least_the_length_is_full_attention(causal: bool) -> None:
    q, k, v = _qkv(10, 10, "cpu")
    window = sliding_window_mask(10, 10, 21, causal=causal)
    full = standard_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(standard_attention(q, k, v, mask=window), full, rtol=1e-6, atol=1e-6)


def test_a_token_cannot_see_beyond_its_window() -> None:
    q, k, v = _qkv(16, 16, "cpu")
    window = sliding_window_mask(16, 16, 5, causal=True)
    before = sdpa_attention(q, k, v, mask=window)
    k[:, :, 3] += 10.0
    v[:, :, 3] += 10.0  # key 3 is visible only to queries 3..7
    after = sdpa_attention(q, k, v, mask=window)
    changed = (after - before).abs().amax(dim=(0, 1, 3)) > 0
    assert changed.nonzero().flatten().tolist() == [3, 4, 5, 6, 7]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sdpa_dispatches_to_flash_in_bf16_and_matches_standard() -> None:
    q, k, v = _qkv(128, 128, "cuda", dtype=torch.bfloat16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        flash = sdpa_attention(q, k, v, is_causal=True)
    names = {event.key for event in profiler.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention" in names, sorted(n for n in names if "dot" in n)
    reference = standard_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(flash.float(), reference, rtol=2e-2, atol=2e-2)


def test_a_cpu_training_step_with_padding_runs_the_fused_sdpa_kernel_both_ways() -> None:
    """On the CPU the fused kernel takes the padding mask; a mask it could not take (or attention dropout) would
    send every layer to the unfused math path, which keeps the B·H·T² scores for backward."""
    from vaswani.config import ModelConfig
    from vaswani.model import Transformer
    from vaswani.training.loss import translation_loss

    model = Transformer(ModelConfig.preset("tiny", attention="sdpa"))
    src, tgt = _ids_with_padding(9, [9, 5, 2], "cpu"), _ids_with_padding(8, [8, 8, 3], "cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        translation_loss(model, src, tgt, tgt, label_smoothing=0.1).loss_sum.backward()
    names = {event.key for event in profiler.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names, sorted(n for n in names if "dot" in n)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in names
    assert "aten::_scaled_dot_product_attention_math" not in names


def test_kv_cache_writes_in_place_and_doubles_when_full() -> None:
    cache = KVCache.empty(capacity=3)
    steps = [torch.randn(2, 4, 1, 8) for _ in range(5)]
    for t, k in enumerate(steps):
        cache.append(k, -k)
        torch.testing.assert_close(cache.k, torch.cat(steps[: t + 1], dim=2), rtol=0, atol=0)
        torch.testing.assert_close(cache.v, -cache.k, rtol=0, atol=0)
    assert cache._k.size(2) == 8  # the 3 slots asked for plus a spare one, then doubled once
    buffer = cache._k.data_ptr()
    cache.append(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8))
    assert cache._k.data_ptr() == buffer  # the sixth position was written in place
    reordered = cache.reorder(torch.tensor([1, 1, 0]))
    torch.testing.assert_close(reordered.k, cache.k[[1, 1, 0]], rtol=0, atol=0)
    assert reordered.length == 6


def test_a_preallocated_kv_cache_is_never_full() -> None:
    """The spare slot keeps the keys a strict slice of the buffer up to the capacity: one memory layout."""
    cache = KVCache.empty(capacity=3)
    steps = [torch.randn(2, 4, 1, 8) for _ in range(3)]
    cache.append(steps[0], -steps[0])
    buffer = cache._k.data_ptr()
    for t, k in enumerate(steps[1:], start=1):
        cache.append(k, -k)
        torch.testing.assert_close(cache.k, torch.cat(steps[: t + 1], dim=2), rtol=0, atol=0)
        assert not cache.k.is_contiguous()  # the last step included
    assert cache._k.data_ptr() == buffer and cache._k.size(2) == 4


def test_windowed_kv_cache_keeps_the_last_window_keys_as_a_ring() -> None:
    cache = KVCache.empty(capacity=10, window=3)
    steps = [torch.full((1, 1, 1, 2), float(t)) for t in range(7)]
    for k in steps:
        cache.append(k, k)
    assert cache.k.size(2) == 3 and sorted(cache.k[0, 0, :, 0].tolist()) == [4.0, 5.0, 6.0]


# ---- which SDPA kernel: the rule, and that the model applies it -------------------------------------------------
@pytest.mark.parametrize("device_type,dtype,head_dim,masked,first", [
    ("cuda", torch.bfloat16, 64, False, SDPBackend.FLASH_ATTENTION),  # decoder self-attention: is_causal, no mask
    ("cuda", torch.float16, 128, False, SDPBackend.FLASH_ATTENTION),
    ("cuda", torch.bfloat16, 64, True, SDPBackend.EFFICIENT_ATTENTION),  # padding mask: flash takes none
    ("cuda", torch.float32, 64, False, SDPBackend.EFFICIENT_ATTENTION),  # flash computes in half precision only
    ("cuda", torch.bfloat16, 512, False, SDPBackend.EFFICIENT_ATTENTION),  # a head too wide for flash
    ("cuda", torch.bfloat16, 12, False, SDPBackend.EFFICIENT_ATTENTION),  # not a multiple of 8
], ids=["bf16-unmasked", "fp16-unmasked", "bf16-masked", "fp32", "head-512", "head-12"])
def test_on_cuda_sdpa_takes_flash_where_it_applies_else_memory_efficient_never_cudnn(
        device_type: str, dtype: torch.dtype, head_dim: int, masked: bool, first: SDPBackend) -> None:
    backends = sdpa_backends(device_type, dtype, head_dim, masked)
    assert backends[0] == first and backends[-1] == SDPBackend.MATH  # math only where no fused kernel fits
    assert SDPBackend.CUDNN_ATTENTION not in backends  # a new execution plan for every new sequence length


def test_on_the_cpu_pytorch_chooses_the_sdpa_kernel() -> None:
    assert sdpa_backends("cpu", torch.float32, 64, masked=True) is None
    assert sdpa_backends("cpu", torch.bfloat16, 64, masked=False) is None


def test_the_model_runs_the_kernels_the_rule_allows(monkeypatch) -> None:
    """The rule is applied at the model's SDPA call: restricted to the math path, the call runs the math path."""
    q, k, v = _qkv(9, 9, "cpu")

    def kernels_run() -> set[str]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            sdpa_attention(q, k, v, is_causal=True)
        return {event.key for event in profiler.key_averages() if "dot_product" in event.key}

    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels_run()
    monkeypatch.setattr(kernels, "sdpa_backends", lambda *args, **kwargs: [SDPBackend.MATH])
    assert "aten::_scaled_dot_product_attention_math" in kernels_run()
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in kernels_run()


# ---- the sliding window in O(T·k) memory ---------------------------------------------------------------------
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length,window", [(7, 4), (50, 5), (97, 8), (130, 40), (64, 1), (45, 64)],
                         ids=["short", "blocks", "ragged-last-block", "wide-window", "window-1", "window-over-T"])
@pytest.mark.parametrize("backend", ["standard", "sdpa"])
def test_windowed_attention_equals_the_full_band_mask_forward_and_backward(causal: bool, length: int, window: int,
                                                                           backend: str) -> None:
    """Blocks of queries over the keys their window reaches compute exactly what the (T, T) band mask allows, on
    every query with a key to attend to (rows of padding with none are never used: their outputs may differ)."""
    generator = torch.Generator().manual_seed(length * window)
    q, k, v = (torch.randn(2, 3, length, 8, generator=generator, requires_grad=True) for _ in range(3))
    lengths = [length, max(1, length - 9)]  # the second sequence ends in padding
    key_padding = padding_mask(_ids_with_padding(length, lengths, "cpu"))
    queries = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # (B, T) real positions
    grad = torch.randn(2, 3, length, 8, generator=generator) * queries[:, None, :, None]

    def run(compute):
        out = compute()
        out.backward(grad)
        result = [out.detach() * queries[:, None, :, None], *(t.grad.clone() for t in (q, k, v))]
        for t in (q, k, v):
            t.grad = None
        return result

    band = sliding_window_mask(length, length, window, causal) & key_padding
    expected = run(lambda: standard_attention(q, k, v, mask=band))
    actual = run(lambda: windowed_attention(q, k, v, window, causal, key_padding, attend=attention.BACKENDS[backend]))
    for name, got, want in zip(("output", "dq", "dk", "dv"), actual, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)  # fp32 rounding


def _saved_for_backward(compute) -> int:
    """Bytes autograd keeps for backward while ``compute`` runs, each storage counted once."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        compute()
    return sum(storages.values())


@pytest.mark.parametrize("backend", ["standard", "sdpa"])
def test_windowed_attention_keeps_memory_linear_in_the_length(backend: str) -> None:
    """What autograd keeps grows with T·k: doubling T doubles it, while the band mask's (T, T) scores quadruple."""
    attend = attention.BACKENDS[backend]

    def saved(length: int, windowed: bool) -> int:
        q, k, v = (torch.randn(1, 2, length, 8, requires_grad=True) for _ in range(3))
        if windowed:
            return _saved_for_backward(lambda: windowed_attention(q, k, v, 16, causal=False, attend=attend))
        band = sliding_window_mask(length, length, 16, causal=False)
        return _saved_for_backward(lambda: standard_attention(q, k, v, mask=band))

    assert saved(2048, True) < 2.2 * saved(1024, True)
    assert saved(2048, False) > 3.8 * saved(1024, False)
    assert saved(2048, True) < saved(2048, False) / 10


@pytest.mark.parametrize("length", [20, 64, 70], ids=["one-span", "whole-blocks", "ragged-last-block"])
def test_a_module_with_a_window_attends_in_blocks_in_full_passes_and_through_its_cache_when_decoding(
        length: int) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, 0.0, "sdpa", window=6).eval()
    x = torch.randn(2, length, 32)
    full = layer(x, is_causal=True)
    layer.window = None  # the same weights with the band as an explicit mask
    band = layer(x, mask=sliding_window_mask(length, length, 6, causal=True))
    torch.testing.assert_close(full, band, rtol=1e-5, atol=1e-6)
    layer.window = 6
    cache = KVCache.empty(window=6)
    steps = [layer(x[:, t : t + 1], is_causal=True, cache=cache, position_offset=t) for t in range(length)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)
    assert window_block(6) >= 6 and window_block(500) == 500


@pytest.mark.parametrize("kind", ["encoder", "causal", "windowed-encoder", "windowed-causal", "cross"])
def test_a_modules_attention_weights_times_its_values_give_its_output(kind: str) -> None:
    """What ``attention_weights`` returns is what ``forward`` attends with (fp32, CPU): the window and causality
    included, and padded keys weighted 0."""
    torch.manual_seed(0)
    cross, window, causal = kind == "cross", 4 if kind.startswith("windowed") else None, kind.endswith("causal")
    layer = MultiHeadAttention(32, 4, 0.0, "sdpa", cross=cross, window=window).eval()
    x, memory = torch.randn(3, 40, 32), torch.randn(3, 11, 32)
    mask = padding_mask(_ids_with_padding(11 if cross else 40, [11, 5, 2] if cross else [40, 33, 2], "cpu"))
    context = memory if cross else None
    with torch.no_grad():
        weights = layer.attention_weights(x, context=context, mask=None if causal else mask, is_causal=causal)
        values = layer.project_context(memory).v if cross else layer.qkv_proj(x).chunk(3, dim=-1)[2]
        values = values if cross else values.unflatten(-1, (4, 8)).transpose(1, 2)
        rebuilt = layer.out_proj((weights @ values).transpose(1, 2).flatten(-2))
        expected = layer(x, context=context, mask=None if causal else mask, is_causal=causal)
    assert weights.shape == (3, 4, 40, 11 if cross else 40)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 40))
    if causal:
        assert weights[..., 0, 1:].abs().max() == 0  # the first query sees only itself
    if window is not None:
        assert weights[0, :, 20, 25:].abs().max() == 0  # keys outside the window weigh nothing
    # Padded queries are never used (a windowed one may have no key to attend to); the source has none.
    queries = torch.ones(3, 40, dtype=torch.bool) if cross else torch.arange(40) < torch.tensor([[40], [33], [2]])
    torch.testing.assert_close(rebuilt[queries], expected[queries], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [1, 2, 7, 40])
@pytest.mark.parametrize("window", [None, 1, 2, 5, 64])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_attended_keys_count_what_the_masks_allow(length: int, window: int | None, causal: bool) -> None:
    if window is None:
        mask = causal_mask(length) if causal else torch.ones(1, 1, length, length, dtype=torch.bool)
    else:
        mask = sliding_window_mask(length, length, window, causal)
        if causal:
            mask = mask & causal_mask(length)
    assert attended_keys(length, causal, window).tolist() == mask[0, 0].sum(-1).tolist()
