"""Harnesses that drive the library from outside, as a user or a machine would, and check what it did.

    faults.py      the fault loop: SIGKILL a training run at random points, resume it, compare bit for bit
                   (``python -m vaswani.tools.faults``)

Built on the core: a tool imports the core's public names and starts processes where the process is the point; the
core never imports a tool.
"""
