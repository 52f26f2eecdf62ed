"""A run's corpus as the command line names it: the user's own files, written into the config's data section
before the run starts (``vaswani train --src/--tgt/--tsv``, and the test sets ``vaswani finalize`` adds)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from vaswani.data.languages import corpus_languages
from vaswani.errors import ConfigError
from vaswani.training.config import RunConfig

if TYPE_CHECKING:
    from vaswani.data.commands import CorpusArguments


def with_corpus(config: RunConfig, corpus: CorpusArguments, replace: bool = True) -> RunConfig:
    """``config`` training on the files the command line named (``replace``: they are the whole corpus, whatever
    the preset's dataset), or with their test sets added to the run's own (``vaswani finalize``). The test sets are
    then the ones the final model is scored on."""
    data, train = config.data, config.train
    tests = {name: tuple(map(str, part)) for name, part in corpus.tests.items()}
    if replace:
        if not corpus.train:
            raise ConfigError("your own corpus needs training files: --src and --tgt, or --tsv")
        aligned = next((part for part in [*corpus.train, *corpus.tests.values()] if len(part) == 2), ())
        languages = corpus_languages(aligned, corpus.src_lang, corpus.tgt_lang)
        data = dataclasses.replace(data, dataset="local", direction=languages.direction,
                                   train_files=tuple(tuple(map(str, part)) for part in corpus.train),
                                   valid_files=tuple(map(str, corpus.valid)), test_files=tests)
        train = dataclasses.replace(train, final_test_splits=tuple(tests))
    else:
        if corpus.train or corpus.valid or corpus.src_lang or corpus.tgt_lang:
            raise ConfigError("a run keeps the corpus it was trained on: only test sets (--test-src/--test-tgt, "
                              "--test-tsv) can be added now")
        if data.dataset != "local":
            raise ConfigError(f"this run trained on {data.dataset}: score other test files with vaswani evaluate "
                              "--src FILE --ref FILE")
        data = dataclasses.replace(data, test_files={**data.test_files, **tests})
        train = dataclasses.replace(train, final_test_splits=tuple(dict.fromkeys([*train.final_test_splits,
                                                                                  *tests])))
    return RunConfig(model=config.model, data=data, train=train)


def with_weights_and_tags(config: RunConfig, weights: list[float] | None, tags: list[str] | None) -> RunConfig:
    """``config`` drawing each training part as often as its weight says and tagging its sources (``--weight``,
    ``--tag``, one per part in their order); unchanged where neither is given."""
    data = config.data
    if weights:
        data = dataclasses.replace(data, train_weights=tuple(weights))
    if tags:
        data = dataclasses.replace(data, train_tags=tuple(tags))
    return config if data is config.data else RunConfig(config.model, data, config.train)


__all__ = ["with_corpus", "with_weights_and_tags"]
