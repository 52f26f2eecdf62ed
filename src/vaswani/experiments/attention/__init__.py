"""`vaswani experiment attention`: what the attention backend and the sliding window cost, and that the exact
computations agree.

Four variants of one ``MultiHeadAttention`` layer (self-attention, the encoder's form by default):

- ``standard``: softmax(QKᵀ/√d)V written out; it materialises the B·H·T² scores;
- ``sdpa``: ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU, a fused kernel on CPU);
- ``standard+window`` and ``sdpa+window``: the same two with a sliding window of k keys, computed in blocks of
  queries over the keys the window reaches (``model.window.windowed_attention``): T·2k scores, not T².

Measured per variant, batch size and sequence length: forward+backward time and peak memory, next to the FLOPs of
the project's one count (``training.flops``). Then memory against the window k at one length, a whole-model
training step per variant, and (``--train-steps N``) the same training run with each variant.

``settings`` says what is measured, ``measure`` measures it into the records of ``results``, ``report`` writes
them down, ``command`` is the CLI.
"""

from vaswani.experiments.attention.command import add_arguments, run

__all__ = ["add_arguments", "run"]
