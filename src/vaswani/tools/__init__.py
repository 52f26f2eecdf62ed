"""Harnesses that drive the library from outside, as a user or a machine would, and check what it did.

    faults.py          the fault loop: SIGKILL a training run at random points, resume it, compare bit for bit
                       (``python -m vaswani.tools.faults``)
    faults_report.py   what the fault loop records of each kill and of the whole loop
    data_benchmark.py  preparing a synthetic corpus of N pairs and starting to train on it: time and peak memory
                       against N (``vaswani bench data``)
    data_benchmark_report.py  what it measures and writes to results.json (a row per corpus size and machine),
                       and its table
    serve_load.py      ``vaswani serve-bench``: real servers under closed-loop load
    serve_layouts.py   the thread layouts it compares (workers × parallel batches × threads per batch)
    serve_ceilings.py  what the served rate is measured against in the same run: the model alone, a bare script
    serve_report.py    what serve_load measured, as results.json, table.md, README.md and a plot

Built on the core: a tool imports the core's public names and starts processes where the process is the point; the
core never imports a tool.
"""
