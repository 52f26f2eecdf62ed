"""The CPU dropout is dropout: the drop rate asked for, unbiased, the gradient of the mask it applied, seeded."""

from __future__ import annotations

import pytest
import torch

from vaswani.model.dropout import Dropout, dropout


def test_drops_the_asked_fraction_in_every_16_bit_lane_and_scales_the_rest() -> None:
    torch.manual_seed(0)
    x = torch.rand(1_000_000) + 0.5  # no exact zeros: a zero in the output means dropped
    y = dropout(x, 0.1)
    dropped = y == 0
    # 1e6 Bernoulli(0.1) draws: standard deviation 3e-4, so 2e-3 is > 6 sigma.
    assert abs(dropped.float().mean().item() - 0.1) < 2e-3
    # Every 64-bit draw feeds four consecutive elements: each lane must drop at the same rate (the sign bit of
    # a plain random_() is always 0, which would keep every element of one lane).
    lanes = dropped.view(-1, 4).float().mean(0)
    assert torch.all((lanes - 0.1).abs() < 4e-3), lanes
    scale = 65536 / (65536 - round(0.1 * 65536))  # 1 / the actual keep probability
    assert torch.equal(y[~dropped], x[~dropped] * scale)


def test_expected_output_is_the_input() -> None:
    torch.manual_seed(1)
    x = torch.full((4_000_000,), 3.0)
    assert abs(dropout(x, 0.3).mean().item() - 3.0) < 0.01


def test_gradient_is_the_applied_mask_times_the_scale() -> None:
    torch.manual_seed(2)
    x = (torch.rand(64, 33) + 0.5).requires_grad_()
    y = dropout(x, 0.25)
    weights = torch.randn_like(y)
    (y * weights).sum().backward()
    torch.testing.assert_close(x.grad, weights * (y.detach() / x.detach()))


def test_seeded_like_torch_and_fresh_masks_each_call() -> None:
    x = torch.ones(10_000)
    torch.manual_seed(3)
    first, second = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5), first)
    assert not torch.equal(first, second)


def test_off_in_eval_mode_and_at_zero_and_all_dropped_at_one() -> None:
    x = torch.randn(5, 7)
    module = Dropout(0.4).eval()
    assert module(x) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_keeps_the_input_dtype_and_shape() -> None:
    x = torch.randn(3, 5, 8, dtype=torch.bfloat16)
    y = dropout(x, 0.1)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
