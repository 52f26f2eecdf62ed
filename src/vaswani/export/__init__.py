"""Take a trained model elsewhere: Hugging Face ``transformers`` (MarianMT) and CTranslate2 formats.

Built on the core's public names only; the core never imports this package. The optional packages are imported
inside the functions that need them (``pip install -e '.[export]'``)."""
