"""Training a translation model: the loop, what one update does, and what a run leaves behind.

    step.py        train_step: one optimizer update (forward, backward, clipping, the optimizer and schedule)
    trainer.py     Trainer: epochs of updates, evaluation, checkpoints, callbacks
    callbacks.py   the hooks, and what a run reports through them: throughput and MFU, progress bar, metrics, lines
    resume.py      what a checkpoint holds to continue bit-exactly (progress, RNG), and the checks before a resume
    signals.py     SIGINT/SIGTERM: finish the update, save, exit; a further signal waits for a save in progress
    run.py         train(): what `vaswani train` does around the loop (lock, checks, final model, summary.json)
    summary.py     RunSummary, why a run stopped, and the plan that fitted its model to the clock
    budget.py      fit_to_budget: the largest model of train.scale_up_models that completes its epochs in time
    loss.py        the label-smoothed cross-entropy over real target tokens
    optim.py       AdamW (or the paper's Adam + L2) with weight decay on matrices only
    schedule.py    learning-rate schedules (the paper's inverse square root, linear, cosine, constant), and when
                   an evaluation counts towards early stopping
    scoring.py     teacher-forced loss and accuracy, greedy BLEU: validation and the studies score through it
    finalize.py    the final model: weights and search chosen on validation data, then the test sets scored
    checkpoint.py  checkpoints written whole (safetensors + trainer state), found again after a crash
    rundir.py      one owner per run directory, and what is already in it
    data.py        what the trainer needs from the data pipeline, and the config settled with its vocabulary
    distributed.py data parallelism through torchrun: each rank's share of an update
    device_choices.py  what depends on the device: host reads, compilation, the module a step calls
    metrics.py     metrics.jsonl, TensorBoard and the plots
    flops.py       model FLOPs of a step and the device's peak, for MFU
    config.py      the run's settings: model, data and train sections, presets, --set
    commands.py    `vaswani train`, `vaswani finalize`
"""
