"""A bare CTranslate2 translation script: what a user would write around a converted model, with nothing of vaswani.

    python bare_ctranslate2.py MODEL_DIR TOKENIZER_JSON INPUT OUTPUT --beam 5 --length-penalty 1.0 --threads 2

Reads one German sentence per line, tokenizes with ``tokenizers`` (the model's own tokenizer.json), translates
everything in one ``translate_batch`` call (CTranslate2 sorts by length and batches by ``--batch-size`` itself; with
``--in-order``, one call per ``--batch-size`` lines as they come),
detokenizes and writes one line per translation. ``vaswani bench engines`` times it against ``vaswani translate``
on the same converted model: the difference is vaswani's overhead. It imports only ctranslate2 and tokenizers.
"""

from __future__ import annotations

import argparse
import unicodedata

import ctranslate2
import tokenizers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("tokenizer")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--max-len-a", type=float, default=1.5)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="threads per batch (intra_threads)")
    parser.add_argument("--inter-threads", type=int, default=1, help="batches translated at once")
    parser.add_argument("--compute-type", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--in-order", action="store_true",
                        help="batches of --batch-size in input order, not sorted by length (what a server gets from "
                        "that many concurrent clients)")
    args = parser.parse_args()

    tokenizer = tokenizers.Tokenizer.from_file(args.tokenizer)
    with open(args.input, encoding="utf-8") as handle:
        lines = [unicodedata.normalize("NFKC", line.rstrip("\n").strip()) for line in handle]
    sources = [encoding.tokens for encoding in tokenizer.encode_batch(lines, add_special_tokens=False)]
    longest = max((len(source) + 1 for source in sources), default=1)
    translator = ctranslate2.Translator(args.model, device=args.device, compute_type=args.compute_type,
                                        intra_threads=args.threads, inter_threads=args.inter_threads)
    options = dict(beam_size=args.beam, length_penalty=args.length_penalty, min_decoding_length=0,
                   max_decoding_length=int(args.max_len_a * longest + args.max_len_b), max_input_length=0)
    if args.in_order:  # one call per batch, all queued at once: --inter-threads of them are translated side by side
        pending = [translator.translate_batch(sources[start:start + args.batch_size], asynchronous=True, **options)
                   for start in range(0, len(sources), args.batch_size)]
        results = [result.result() for batch in pending for result in batch]
    else:
        results = translator.translate_batch(sources, max_batch_size=args.batch_size, **options)
    texts = tokenizer.decode_batch([[tokenizer.token_to_id(token) for token in result.hypotheses[0]]
                                    for result in results])
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.writelines(" ".join(text.splitlines()) + "\n" for text in texts)


if __name__ == "__main__":
    main()
