"""Harnesses built on the core: they drive vaswani as a user does, to measure it or to break it on purpose."""
