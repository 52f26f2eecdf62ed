"""Experiments that explain the design choices: each is `vaswani experiment NAME` and writes results/<name>/.

- ``attention``: standard vs SDPA vs sliding-window attention (time, memory, FLOPs, training comparison);
- ``memory``: training memory estimated from first principles vs measured, largest batch for a budget;
- ``devices``: CPU vs GPU training step, phase by phase;
- ``ablation``: post-LN vs pre-LN, warmup, ReLU vs GELU, sinusoidal vs RoPE vs learned, against seed noise;
- ``robustness``: the position encodings under shuffled, dropped and repeated source tokens.

They are built on the core's public API (``vaswani.training.trainer.train`` and its callbacks,
``vaswani.training.step.train_step``, ``vaswani.training.scoring``'s scores); the core never imports them.
"""
