"""The FLOPs behind MFU: the formula counts the matrix products the model really runs."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from vaswani.config import ModelConfig
from vaswani.model import Transformer
from vaswani.training.flops import forward_flops


@pytest.mark.parametrize("changes", [dict(), dict(n_decoder_layers=3, d_ff=200), dict(tie_embeddings="none")],
                         ids=["tiny", "deeper-decoder", "untied"])
@pytest.mark.parametrize("lengths", [(7, 5), (4, 9)], ids=["longer-source", "longer-target"])
def test_forward_flops_match_torchs_count_of_the_models_matrix_products(changes: dict, lengths: tuple) -> None:
    config = ModelConfig.preset("tiny", attention="standard", dropout=0.0, **changes)
    model = Transformer(config).eval()
    batch, (src_len, tgt_len) = 3, lengths
    src = torch.randint(4, config.vocab_size, (batch, src_len))
    tgt = torch.randint(4, config.vocab_size, (batch, tgt_len))
    with FlopCounterMode(display=False) as counter:
        model(src, tgt)
    # Written-out attention computes every causal score and then masks half of them; the formula counts the
    # half a causal kernel needs.
    masked_half = config.n_decoder_layers * 2 * tgt_len * config.d_model * batch * tgt_len
    assert forward_flops(config, batch * src_len, batch * tgt_len, src_len, tgt_len) + masked_half == (
        counter.get_total_flops())

