"""Text classification with the project's Transformer encoder, one concept per module:

    data.py            CSV -> texts + labels (validated), stratified train/validation split
    word_tokenizer.py  the simple lowercase-words tokenizer (the BPE one is vaswani.data.tokenizer)
    encoding.py        texts -> <s> tokens </s> ids -> padded batches, for either tokenizer
    settings.py        TrainSettings: every choice of a run, and the command line's defaults
    train.py           one training run: AdamW, warmup + linear decay, clipping, early stopping on macro-F1
    checkpoint.py      model.safetensors + classifier.json + tokenizer file, written atomically
    predict.py         class probabilities for texts or a whole CSV, in input order
    metrics.py         accuracy, macro-F1, confusion matrix
    baseline.py        TF-IDF + logistic regression on the same split
    report.py          markdown tables, PNG figures, provenance (command, commit, hardware)
    experiment.py      several seeds, Transformer vs baseline -> results/classifier/
    results.py         ExperimentResults: an experiment's record, written to results.json, read back checked
    summary.py         one README over several experiments, worded from their numbers
    commands.py        `vaswani classify train | predict | experiment | summary`

The model itself is vaswani.classification.model.TransformerClassifier: our Encoder plus a pooling head.
"""
