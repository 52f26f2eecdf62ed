"""Harnesses: programs that drive vaswani's commands from outside, as a user or an operator would (load tests,
fault loops), and report what they saw. Built on the core and the server; the core never imports them."""
