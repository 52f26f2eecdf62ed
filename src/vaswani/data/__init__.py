"""Data pipeline: corpora -> shared BPE tokenizer -> encoded, cached splits -> token-budget batches.

How the trainer uses it (``training/data.py``)::

    from vaswani.data import prepare_dataset, TokenBudgetSampler, collate

    data = prepare_dataset("multi30k", data_dir=..., vocab_size=8000, max_len=64)
    # or the user's own files, any language pair: prepare_dataset(files=local_corpus([("train.fr", "train.en")]))
    train, tokenizer = data.splits["train"], data.tokenizer
    sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, max_tokens=4096, seed=0)
    for epoch in range(n_epochs):
        for indices in sampler.batches(epoch):
            batch = collate([train[i] for i in indices], tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
            ...   # batch.src, batch.tgt_in, batch.tgt_out, batch.n_tgt_tokens

Names are imported lazily so that ``vaswani --help`` (which imports ``vaswani.data.commands``) does not pay
for torch, numpy or tokenizers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # corpora.py
    "DATASETS": "registry",
    "DatasetSpec": "registry",
    "ParallelCorpus": "corpora",
    "SplitSpec": "registry",
    "CorpusInfo": "corpora",
    "corpus_from_hub": "corpora",
    "get_dataset": "registry",
    "load_corpus": "corpora",
    "load_parallel_files": "corpora",
    "load_tsv": "corpora",
    "load_wmt17_train": "corpora",
    # files.py: the user's own corpus
    "FileCorpus": "files",
    "FilePart": "files",
    "FileSplit": "files",
    "fingerprint": "fingerprints",
    # languages.py
    "LanguagePair": "languages",
    "parse_direction": "languages",
    "recorded_languages": "languages",
    # download.py
    "RemoteFile": "download",
    "download_file": "download",
    "resolve_file": "download",
    # corpus_encoder.py
    "CorpusEncoder": "corpus_encoder",
    # tokenizer.py
    "Tokenizer": "tokenizer",
    "SPECIAL_TOKENS": "tokenizer",
    # preprocess.py
    "EncodedCorpus": "cache",
    "PrepareStats": "cache",
    "load_encoded": "cache",
    "prepare": "preprocess",
    "prepare_files": "preprocess",
    # batching.py
    "Batch": "batching",
    "TokenBudgetSampler": "batching",
    "collate": "batching",
    "pad_sources": "batching",
    # pipeline.py
    "PreparedData": "pipeline",
    "local_corpus": "files",
    "prepare_dataset": "pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"vaswani.data.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vaswani.data' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
