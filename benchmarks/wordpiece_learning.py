"""Learning a WordPiece vocabulary: kformer vs keras-hub vs tensorflow-text's learner, one run.

    python -m benchmarks.wordpiece_learning                            # the bundled 5,000 IMDB reviews
    python -m benchmarks.wordpiece_learning --data-dir DATA --vocabulary-size 8000,20000

Three timed calls per vocabulary size, on the same reviews:
- kformer: `WordPieceTokenizer.learn(texts, size)` (word counts, then the
  numpy learner over the 30,000 most frequent words);
- tensorflow-text: its `wordpiece_tokenizer_learner_lib.learn` on kformer's
  word counts with kformer's arguments: the same input, so the two
  vocabularies must be equal (printed);
- keras-hub: `keras_hub.tokenizers.compute_word_piece_vocabulary` on the
  texts as a `tf.data` dataset, with its own defaults (its pre-tokenization,
  every word, tokens seen at least 10 times): what a keras-hub user calls.

Appends one row per vocabulary size to benchmarks/results/wordpiece_learning.csv
(`--results`), each with the command, commit, date, machine and backend.
"""

import argparse
import pathlib
import sys
import time

from benchmarks import provenance

HEADER = ["reviews", "vocabulary", "kformer_s", "tensorflow_text_s", "equal", "keras_hub_s"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="full IMDB (default: the bundled sample)")
    p.add_argument("--max-examples", type=int, default=None, help="the first N train reviews (default: all)")
    p.add_argument("--vocabulary-size", default="8000", help="comma-separated sizes, one row each")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("wordpiece_learning.csv"),
                   help="the CSV the rows are appended to")
    args = p.parse_args(argv)
    try:
        sizes = [int(v) for v in args.vocabulary_size.split(",")]
    except ValueError:
        p.error(f"--vocabulary-size: expected comma-separated ints. Received: {args.vocabulary_size!r}")
    if min(sizes) <= 7:
        p.error(f"--vocabulary-size: each size must be above the 7 special tokens. Received: {sizes}")

    import keras_hub
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as tf_text

    from kformer.data import imdb
    from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer, count_words

    texts = imdb.load_split("train", data_dir=args.data_dir, max_examples=args.max_examples)[0]
    counts = count_words(texts)
    words = dict(list(counts.items())[:30000])  # what WordPieceTokenizer.learn learns from
    print(f"{len(texts)} reviews, {len(counts)} distinct words, the {len(words)} most frequent learned from")
    print("| vocabulary | kformer s | tensorflow-text s (same words) | equal | keras-hub s | "
          "tensorflow-text / kformer | keras-hub / kformer |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for size in sizes:
        start = time.perf_counter()
        ours = WordPieceTokenizer.learn(texts, size).vocabulary
        kformer_s = time.perf_counter() - start
        start = time.perf_counter()
        reference = tf_text.learn(words, size, list(SPECIAL_TOKENS), max_input_tokens=30000, lower_thresh=1)[:size]
        tf_text_s = time.perf_counter() - start
        start = time.perf_counter()
        keras_hub.tokenizers.compute_word_piece_vocabulary(tf.data.Dataset.from_tensor_slices(texts).batch(2000),
                                                           size, reserved_tokens=list(SPECIAL_TOKENS))
        hub_s = time.perf_counter() - start
        print(f"| {size} | {kformer_s:.2f} | {tf_text_s:.1f} | {ours == reference} | {hub_s:.1f} | "
              f"{tf_text_s / kformer_s:.0f}x | {hub_s / kformer_s:.0f}x |", flush=True)
        rows.append((len(texts), size, f"{kformer_s:.3f}", f"{tf_text_s:.3f}", ours == reference, f"{hub_s:.3f}"))
    provenance.write_csv(args.results, HEADER, rows, backend="tensorflow", append=True)  # all three run on TF
    print(f"appended {len(rows)} rows to {args.results}", file=sys.stderr)  # stdout ends with the table


if __name__ == "__main__":
    main()
