"""Scoring translations and managing checkpoints for evaluation.

    metrics.py    sacreBLEU corpus BLEU/chrF with signatures, sentence-BLEU
    report.py     best/worst sentences of a seeded random sample (report.md)
    evaluate.py   translate a test set, score it, time it, write results.json + hypotheses.txt + report.md
    compare.py    several evaluations side by side (`vaswani compare`)
    average.py    checkpoint averaging
    commands.py   `vaswani evaluate`, `vaswani average`, `vaswani compare`

Where a number was measured (command, commit, hardware) is ``vaswani.provenance``'s job.
"""
