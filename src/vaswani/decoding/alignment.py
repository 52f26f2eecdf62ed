"""Word alignments from the decoder's cross-attention, in the Pharaoh format (``i-j``: source word i, target
word j, both counted from 0), for markup transfer and terminology checks.

Each target subword is aligned to the source subword it attends to most (``</s>`` excluded on both sides) in
:data:`ALIGNMENT_LAYER` averaged over its heads: the penultimate decoder layer, the one Garg et al. (2019)
found to align best (fairseq's ``--print-alignment`` reads the same layer); a one-layer decoder uses its only
layer. Two words are aligned when any of their subwords are. Words are the text's whitespace-separated words:
a subword that starts with whitespace starts a word.
"""

from __future__ import annotations

from typing import Sequence

import torch

from vaswani.model.transformer import Transformer

ALIGNMENT_LAYER = -2  # the penultimate decoder layer (the only one of a one-layer decoder)


def word_indices(pieces: Sequence[str]) -> list[int]:
    """The word (from 0) each subword belongs to; ``pieces``: the subwords as text."""
    words, word, started = [], -1, False
    for piece in pieces:
        if word < 0 or (piece[:1].isspace() and started):
            word += 1
            started = False
        started = started or bool(piece.strip())
        words.append(word)
    return words


def pharaoh(attention: torch.Tensor, source_words: Sequence[int], target_words: Sequence[int],
            target_count: int | None = None) -> str:
    """``attention`` (target subwords, source subwords), without </s> rows or columns -> ``"i-j ..."``,
    sorted by target word then source word; ``target_count``: the words of the target's text (pairs of
    later words are left out)."""
    if attention.numel() == 0:
        return ""
    best = attention.argmax(dim=-1).tolist()
    count = len(target_words) if target_count is None else target_count
    pairs = sorted({(target_words[t], source_words[s])
                    for t, s in enumerate(best) if target_words[t] < count})
    return " ".join(f"{i}-{j}" for j, i in pairs)


@torch.no_grad()
def subword_attention(model: Transformer, sources: Sequence[list[int]], targets: Sequence[list[int]],
                      bos_id: int, pad_id: int) -> list[torch.Tensor]:
    """Per pair, the alignment layer's cross-attention averaged over heads, (|target|, |source| - 1): target
    subwords (no </s>) by source subwords (no </s>). ``sources`` end in </s>; ``targets`` do not."""
    device = next(model.parameters()).device
    src = torch.full((len(sources), max(map(len, sources))), pad_id, dtype=torch.long)
    tgt_in = torch.full((len(targets), 1 + max(map(len, targets))), pad_id, dtype=torch.long)
    for row, (source, target) in enumerate(zip(sources, targets)):
        src[row, : len(source)] = torch.tensor(source)
        tgt_in[row, : len(target) + 1] = torch.tensor([bos_id, *target])
    weights = model.cross_attention_weights(src.to(device), tgt_in.to(device))  # (L, B, H, T, S)
    layer = weights[ALIGNMENT_LAYER if weights.size(0) > 1 else 0].float().mean(dim=1).cpu()  # (B, T, S)
    return [layer[row, : len(target), : len(source) - 1] for row, (source, target) in
            enumerate(zip(sources, targets))]
