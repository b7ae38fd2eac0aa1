"""mini-BERT's data preparation, first run vs rerun from the `_prepared` cache.

    python -m benchmarks.data_preparation --data-dir DATA          # 50k unlabeled + 25k train reviews
    python -m benchmarks.data_preparation --max-examples 2000      # bundled samples, quick

Times what `recipes/pretrain_mini_bert.py` does before its first step: load
the reviews, learn the WordPiece vocabulary (8000 tokens) and build the
next-sentence pairs (128 tokens, seed 1337), through `recipes.prepared` into
a fresh cache folder; then the same calls again, served from the cache.
Prints seconds per step and the speed-up of the cached rerun.
"""

import argparse
import tempfile
import time

from recipes import prepared


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None, help="full IMDB (default: the bundled sample)")
    p.add_argument("--max-examples", type=int, default=None)
    p.add_argument("--vocabulary-size", type=int, default=8000)
    p.add_argument("--sequence-length", type=int, default=128)
    args = p.parse_args()
    from kformer.data import imdb

    start = time.time()
    texts = [t for split in ("unsup", "train")
             for t in imdb.load_split(split, data_dir=args.data_dir, max_examples=args.max_examples)[0]]
    print(f"loaded {len(texts)} reviews in {time.time() - start:.1f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for run in ("first", "cached"):
            times = {}
            start = time.time()
            tok = prepared.tokenizer(tmp, "vocabulary", texts, args.vocabulary_size, f"{tmp}/{run}/vocabulary.txt",
                                     verbose=2)
            times["vocabulary"] = time.time() - start
            start = time.time()
            pairs = prepared.nsp_pairs(tmp, texts, tok, args.sequence_length, 1337, verbose=2)
            times["nsp_pairs"] = time.time() - start
            runs.append(times)
            print(f"{run}: vocabulary {times['vocabulary']:.1f} s, {len(pairs['nsp_labels'])} next-sentence "
                  f"pairs {times['nsp_pairs']:.1f} s", flush=True)
        first, cached = (sum(r.values()) for r in runs)
        print(f"preparation: first {first:.1f} s, cached {cached:.1f} s ({first / cached:.0f}x faster)")


if __name__ == "__main__":
    main()
