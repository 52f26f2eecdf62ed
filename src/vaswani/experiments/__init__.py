"""Experiments that explain the design choices: each is `vaswani experiment NAME` and writes its results folder.

    attention.py          ``attention``: standard vs SDPA vs sliding-window attention (time, memory, FLOPs,
                          training comparison)
    memory.py             ``memory``: training memory estimated (memory_estimate.py) vs measured, the largest
                          batch for a budget; memory_report.py writes its table and plot
    device_comparison.py  ``devices``: CPU vs GPU training step, phase by phase
    ablation.py           ``ablation``: post-LN vs pre-LN, warmup, ReLU vs GELU, sinusoidal vs RoPE vs learned,
                          against seed noise
    robustness.py         ``robustness``: the position encodings under shuffled, dropped and repeated source
                          tokens (perturb.py)
    recipe.py             ``recipe``: what buys BLEU per CPU-minute for the CPU preset
    final_models.py       ``final-models``: one table of finished runs' final models
    variants.py           the training runs a study compares (RunVariant), trained or reused
    measurement.py        how every experiment measures: synchronised timing, peak memory, a training step
    reporting.py          how every experiment writes down what it found: results.json, table.md, plots
    commands.py           `vaswani experiment NAME`

They are built on the core's public API (``vaswani.training.run.train`` and the Trainer's callbacks,
``vaswani.training.step.train_step``, ``vaswani.training.scoring``'s scores); the core never imports them.
"""
