"""Speed against the models a user would pick instead: `vaswani bench train | decode | runs`.

    train.py          `bench train`: training tokens/s against torch.nn.Transformer and MarianMT (train_batches.py,
                      train_peers.py, train_race.py, train_report.py)
    decode.py         `bench decode`: greedy and beam search, the KV cache, batching, compiled steps (decode_report.py)
    decode_peers.py   `bench decode --peer`: our search against MarianMT generate and CTranslate2
    runs.py           `bench runs`: tokens/s of real training runs from their metrics
    profiling.py      where the time goes: profiler operators summed by kind, and the ceiling they imply
"""
