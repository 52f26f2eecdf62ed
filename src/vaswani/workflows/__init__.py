"""What practitioners chain on the core: back-translation and distillation (a model and a text file make a
synthetic corpus, :mod:`vaswani.workflows.synthetic`), composed of the core's public API as a user's script
would be."""
