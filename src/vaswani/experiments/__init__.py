"""Experiments that explain the design choices: each is `vaswani experiment NAME` and writes results/<name>/.

- ``attention``: standard vs SDPA vs sliding-window attention (time, memory, FLOPs, training comparison);
- ``memory``: training memory estimated from first principles vs measured, largest batch for a budget;
- ``devices``: CPU vs GPU training step, phase by phase.
"""
