"""The hand-written label-smoothed cross-entropy is F.cross_entropy: same loss, same gradient, with or without
padded rows to ignore; the loss over all positions of a bucket-padded batch is the loss over its gathered real
positions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vaswani.training.loss import smoothed_cross_entropy


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_matches_torch_cross_entropy_and_its_gradient(smoothing: float) -> None:
    torch.manual_seed(0)
    logits = (3 * torch.randn(37, 101)).requires_grad_()
    targets = torch.randint(0, 101, (37,))
    loss, nll, correct = smoothed_cross_entropy(logits, targets, smoothing)
    (grad,) = torch.autograd.grad(2.5 * loss, logits)

    reference_logits = logits.detach().clone().requires_grad_()
    reference = F.cross_entropy(reference_logits, targets, label_smoothing=smoothing, reduction="sum")
    (2.5 * reference).backward()
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(grad, reference_logits.grad)
    torch.testing.assert_close(nll, F.cross_entropy(logits.detach(), targets, reduction="sum"))
    assert torch.equal(correct, logits.argmax(-1) == targets) and not nll.requires_grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_ignored_rows_match_torch_cross_entropy_with_ignore_index(smoothing: float) -> None:
    """The loss over all positions: rows whose target is padding add nothing, to the loss or to the gradient."""
    torch.manual_seed(1)
    logits = (3 * torch.randn(41, 53)).requires_grad_()
    targets = torch.randint(0, 53, (41,))
    targets[::4] = 0  # padding
    loss, nll, hits = smoothed_cross_entropy(logits, targets, smoothing, ignore_index=0)
    (grad,) = torch.autograd.grad(1.5 * loss, logits)

    reference_logits = logits.detach().clone().requires_grad_()
    reference = F.cross_entropy(reference_logits, targets, ignore_index=0, label_smoothing=smoothing, reduction="sum")
    (1.5 * reference).backward()
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(grad, reference_logits.grad)
    torch.testing.assert_close(nll, F.cross_entropy(logits.detach(), targets, ignore_index=0, reduction="sum"))
    assert torch.equal(hits, (logits.argmax(-1) == targets) & (targets != 0))
    assert (grad[targets == 0] == 0).all()


def test_the_loss_over_all_positions_of_a_bucket_is_the_loss_over_the_gathered_real_positions() -> None:
    """The GPU path (the batch padded to its bucket's shape, with inert rows, and the loss over all positions) gives
    the CPU path's loss, NLL, accuracy and gradients (the real positions gathered from the batch as collated)."""
    from vaswani.config import ModelConfig
    from vaswani.data.batching import Batch
    from vaswani.data.buckets import pad_to_shape
    from vaswani.model import Transformer
    from vaswani.training.loss import TranslationLoss

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=50, dropout=0.0))
    src, tgt = torch.randint(3, 50, (5, 9)), torch.randint(3, 50, (5, 8))
    src[1, 6:] = 0
    tgt[2, 4:] = 0
    tgt[4, 6:] = 0
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], int((src != 0).sum()), int((tgt[:, 1:] != 0).sum()), torch.arange(5))
    bucket = pad_to_shape(batch, rows=8, length=12, pad_id=0)
    outputs = []
    for all_positions, b in ((False, batch), (True, bucket)):
        loss, nll, correct = TranslationLoss(model, 0.1, all_positions=all_positions)(b.src, b.tgt_in, b.tgt_out)
        loss.backward()
        outputs.append((loss.detach(), nll, correct, [p.grad.clone() for p in model.parameters()]))
        model.zero_grad()
    (loss, nll, correct, grads), (bucket_loss, bucket_nll, bucket_correct, bucket_grads) = outputs
    torch.testing.assert_close(bucket_loss, loss)
    torch.testing.assert_close(bucket_nll, nll)
    assert bucket_correct == correct
    for expected, got in zip(grads, bucket_grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_gradient_matches_finite_differences_in_double_precision() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 3, 6, 6, 2])
    (grad,) = torch.autograd.grad(smoothed_cross_entropy(logits, targets, 0.1)[0], logits)
    numeric = torch.zeros_like(grad)
    step = 1e-6
    for index in range(logits.numel()):
        offset = torch.zeros(logits.numel(), dtype=torch.float64)
        offset[index] = step
        offset = offset.view_as(logits)
        with torch.no_grad():
            plus = smoothed_cross_entropy(logits + offset, targets, 0.1)[0]
            minus = smoothed_cross_entropy(logits - offset, targets, 0.1)[0]
        numeric.view(-1)[index] = (plus - minus) / (2 * step)
    torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-8)


def test_a_second_backward_is_refused_not_wrong() -> None:
    """Backward turns the saved log-probs into the gradient in place, so it can run once per forward."""
    logits = torch.randn(3, 5, requires_grad=True)
    loss = smoothed_cross_entropy(logits, torch.tensor([0, 1, 2]), 0.1)[0]
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):
        loss.backward()


def test_no_rows_give_zero_loss() -> None:
    loss, nll, correct = smoothed_cross_entropy(torch.zeros(0, 9, requires_grad=True), torch.zeros(0, dtype=torch.long),
                                                0.1)
    assert loss.item() == 0.0 and nll.item() == 0.0 and correct.numel() == 0


@pytest.mark.slow
def test_compiled_and_eager_steps_agree() -> None:
    """train.compile is exact: torch.compile of the loss module gives the eager loss and gradients (fp32, CPU). One
    layer each side: every kind of block is compiled, in half the code generation of the tiny preset's two."""
    from vaswani.config import ModelConfig
    from vaswani.model import Transformer
    from vaswani.training.loss import TranslationLoss

    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=50, dropout=0.0, n_encoder_layers=1, n_decoder_layers=1)
    eager = TranslationLoss(Transformer(config), 0.1)
    compiled_model = TranslationLoss(Transformer(eager.model.config), 0.1)
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model)
    src, tgt = torch.randint(3, 50, (4, 9)), torch.randint(3, 50, (4, 8))
    src[1, 6:] = 0  # padding on both sides
    tgt[2, 5:] = 0
    outputs = []
    for module, parameters in ((eager, eager.parameters()), (compiled, compiled_model.parameters())):
        loss, nll, correct = module(src, tgt[:, :-1], tgt[:, 1:])
        loss.backward()
        outputs.append((loss.detach(), nll, correct, [p.grad for p in parameters]))
    (loss_e, nll_e, correct_e, grads_e), (loss_c, nll_c, correct_c, grads_c) = outputs
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll_c, nll_e, rtol=1e-5, atol=1e-5)
    assert correct_c == correct_e
    for g_c, g_e in zip(grads_c, grads_e):
        torch.testing.assert_close(g_c, g_e, rtol=1e-4, atol=1e-5)
