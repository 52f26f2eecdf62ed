"""What only a CUDA device exercises: fused AdamW, bf16 autocast over fp32 master weights, the fp16 gradient
scaler, the out-of-memory message, MFU in metrics.jsonl, which SDPA kernel a training step runs, and that the real
CUDA path follows the device rules the CPU tests check (tests/test_devices.py, tests/model/test_attention.py).

Skipped without a GPU. On a lent one: ``python -m pytest -m gpu`` (``scripts/gpu-session.sh headline`` runs them
first; its ``suite`` part runs the rest of the suite on the GPU, through the ``device`` fixture).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend

from vaswani.config import ModelConfig
from vaswani.devices import resolve_device
from vaswani.errors import EnvironmentFault, VaswaniError
from vaswani.model import Transformer
from vaswani.model.attention import standard_attention
from vaswani.model.kernels import sdpa_backends
from vaswani.model.masks import sliding_window_mask
from vaswani.model.window import windowed_attention
from vaswani.precision import choose_precision, resolve_precision
from vaswani.training.loss import TranslationLoss
from vaswani.training.optim import build_optimizer
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.run import train
from vaswani.training.step import train_step

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CUDA = torch.device("cuda")
SHORT_RUN = ["train.max_epochs=null", "train.eval_every_steps=null", "train.bleu_subset=0", "train.progress=false",
             "train.patience=null", "train.log_every_steps=5", "train.max_steps=40", "train.final_model=false"]


class Batch:
    def __init__(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor):
        self.src, self.tgt_in, self.tgt_out = src, tgt_in, tgt_out


def fixed_batch(vocab_size: int, sentences: int = 16, length: int = 12, padded: bool = False) -> Batch:
    """Random ids (no padding unless ``padded``: then the second half of the sentences is 4 tokens shorter)."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab_size, (sentences, length), generator=generator)
    tgt = torch.randint(4, vocab_size, (sentences, length + 1), generator=generator)
    if padded:
        src[sentences // 2 :, -4:] = 0
        tgt[sentences // 2 :, -4:] = 0
    return Batch(src.to(CUDA), tgt[:, :-1].to(CUDA), tgt[:, 1:].to(CUDA))


def loss_model(**changes) -> TranslationLoss:
    torch.manual_seed(0)
    return TranslationLoss(Transformer(ModelConfig.preset("tiny", **changes)), label_smoothing=0.1).to(CUDA)


def test_training_on_cuda_uses_fused_adamw_and_it_matches_the_for_each_update() -> None:
    fused_model = loss_model(dropout=0.0)
    reference_model = copy.deepcopy(fused_model)
    config = load_preset("smoke").train
    fused = build_optimizer(fused_model, config, CUDA)
    assert fused.defaults["fused"] is True
    for_each = torch.optim.AdamW(reference_model.parameters(), lr=1.0, betas=config.betas, eps=config.eps,
                                 weight_decay=0.0, foreach=True)
    for optimizer in (fused, for_each):
        for group in optimizer.param_groups:
            group["lr"], group["weight_decay"] = 1e-3, 0.0
    batch = fixed_batch(fused_model.model.config.vocab_size)
    for _ in range(3):
        # The same gradients for both (copied): the keys' bias gets a gradient of rounding noise only (it shifts
        # every score of a query alike), which Adam would blow up into updates of either sign.
        loss_sum, _, _ = fused_model(batch.src, batch.tgt_in, batch.tgt_out)
        loss_sum.backward()
        for got, expected in zip(fused_model.parameters(), reference_model.parameters()):
            expected.grad = got.grad.clone()
        fused.step()
        for_each.step()
        fused.zero_grad()
        for_each.zero_grad()
    for (name, got), expected in zip(fused_model.named_parameters(), reference_model.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_bf16_autocast_computes_in_bf16_keeps_fp32_weights_and_learns() -> None:
    model = loss_model(dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    batch = fixed_batch(model.model.config.vocab_size)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model.model(batch.src, batch.tgt_in)
    assert logits.dtype == torch.bfloat16
    losses = [train_step(model, optimizer, [batch], batch.tgt_out.numel(), precision="bf16").loss for _ in range(40)]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0], losses[::8]


def test_the_fp16_scaler_skips_an_overflowing_update_then_trains() -> None:
    model = loss_model(dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)  # fp16 gradients overflow at this scale
    batch = fixed_batch(model.model.config.vocab_size)
    before = [p.detach().clone() for p in model.parameters()]
    first = train_step(model, optimizer, [batch], batch.tgt_out.numel(), precision="fp16", clip_grad_norm=1.0,
                       scaler=scaler)
    assert not first.finite
    assert scaler.get_scale() < 2.0**40
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))  # the update was skipped
    results = [train_step(model, optimizer, [batch], batch.tgt_out.numel(), precision="fp16", clip_grad_norm=1.0,
                          scaler=scaler) for _ in range(60)]
    assert results[-1].finite
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_running_out_of_gpu_memory_is_one_line_that_names_max_tokens(tmp_path: Path, data_dir: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    config = apply_settings(load_preset("smoke"), [*SHORT_RUN, "train.max_tokens=200000", "data.max_len=64",
                                                   "train.device=cuda"])
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    # Leave the process about 300 MiB: the tiny model fits, a 200,000-token batch's activations do not.
    torch.cuda.set_per_process_memory_fraction(
        (torch.cuda.memory_allocated() + 300 * 2**20) / torch.cuda.get_device_properties(0).total_memory)
    try:
        with pytest.raises(VaswaniError) as error:
            train(config, tmp_path / "run")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    message = str(error.value)
    assert "out of GPU memory" in message and "train.max_tokens=200000" in message and "\n" not in message
    assert free > 300 * 2**20


def test_a_short_gpu_run_logs_mfu_and_its_loss_falls(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    config = apply_settings(load_preset("smoke"), [*SHORT_RUN, "train.device=cuda", "train.precision=bf16"])
    train(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row["kind"] == "train" and "loss" in row]
    assert len(steps) >= 4, rows[:3]
    assert all(0.0 < row["mfu"] < 1.0 for row in steps), steps
    assert steps[-1]["loss"] < steps[0]["loss"]


def _kernels_of_one_step(model: TranslationLoss, batch: Batch) -> set[str]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train_step(model, optimizer, [batch], batch.tgt_out.numel(), precision="bf16")  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as profiler:
        train_step(model, optimizer, [batch], batch.tgt_out.numel(), precision="bf16")
        torch.cuda.synchronize()
    return {event.key for event in profiler.key_averages()}


FUSED = {"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
         "aten::_scaled_dot_product_cudnn_attention"}
KERNEL = {SDPBackend.FLASH_ATTENTION: "aten::_scaled_dot_product_flash_attention",
          SDPBackend.EFFICIENT_ATTENTION: "aten::_scaled_dot_product_efficient_attention"}
MATH = "aten::_scaled_dot_product_attention_math"


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_a_bf16_training_step_runs_fused_attention_kernels_never_the_math_path(padded: bool) -> None:
    """Whatever fused kernel a GPU and torch version offer (flash, memory-efficient, cuDNN), forward and backward:
    never the math path that materialises the B·H·T² scores."""
    model = loss_model(attention="sdpa", dropout=0.0)
    names = _kernels_of_one_step(model, fixed_batch(model.model.config.vocab_size, padded=padded))
    attention = sorted(name for name in names if "dot_product" in name)
    fused = names & FUSED
    assert fused and all(name + "_backward" in names for name in fused), attention
    assert MATH not in names, attention


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_each_attention_call_runs_the_kernel_the_rule_chooses(padded: bool) -> None:
    """``sdpa_backends`` on the real device: decoder self-attention (``is_causal``, no mask) FlashAttention;
    encoder self-attention and cross-attention (the padding mask) the memory-efficient kernel; never cuDNN."""
    model = loss_model(attention="sdpa", dropout=0.0)
    names = _kernels_of_one_step(model, fixed_batch(model.model.config.vocab_size, padded=padded))
    head_dim = model.model.config.head_dim
    expected = {KERNEL[sdpa_backends("cuda", torch.bfloat16, head_dim, masked)[0]] for masked in (False, True)}
    assert expected == {KERNEL[SDPBackend.FLASH_ATTENTION], KERNEL[SDPBackend.EFFICIENT_ATTENTION]}
    assert expected <= names and all(name + "_backward" in names for name in expected), sorted(names & FUSED)
    assert "aten::_scaled_dot_product_cudnn_attention" not in names and MATH not in names


def test_the_device_and_precision_rules_hold_on_this_machine() -> None:
    gpus = torch.cuda.device_count()
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda", local_rank=gpus - 1, local_ranks=gpus) == torch.device("cuda", gpus - 1)
    with pytest.raises(EnvironmentFault, match=f"{gpus + 1} processes on this machine but {gpus} CUDA device"):
        resolve_device("cuda", local_rank=0, local_ranks=gpus + 1)
    assert resolve_device("cpu", local_rank=1, local_ranks=gpus + 1) == torch.device("cpu")  # gloo, when asked
    assert resolve_precision("auto", CUDA) == choose_precision("auto", "cuda", torch.cuda.is_bf16_supported())


def test_a_sliding_window_keeps_gpu_memory_linear_in_the_length() -> None:
    """Forward + backward of the window in blocks: peak memory grows with T·k, the full band mask's with T²."""

    def peak(length: int, windowed: bool) -> int:
        q, k, v = (torch.randn(1, 8, length, 64, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        if windowed:
            out = windowed_attention(q, k, v, 64, causal=False, attend=standard_attention)
        else:
            out = standard_attention(q, k, v, mask=sliding_window_mask(length, length, 64, causal=False, device=CUDA))
        out.sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start

    assert peak(8192, True) < 2.5 * peak(4096, True)
    assert peak(8192, False) > 3.5 * peak(4096, False)
    assert peak(8192, True) < peak(8192, False) / 10
