"""Write the bundled `imdb/unsup.jsonl.gz`: a fixed-seed sample of IMDB's unlabeled reviews.

    python data/make_unsup_sample.py /path/to/full/imdb/unsup.jsonl.gz

Reads the complete 50,000-review file (gzip JSON Lines, one
`{"id", "label", "rating", "text"}` object a line), keeps `--count` lines
chosen with `random.Random(--seed)`, in the sampled (shuffled) order, and writes
them unchanged next to this script. The gzip header carries no file name or
time, so the output bytes depend only on the input and the arguments.
"""

import argparse
import gzip
import hashlib
import pathlib
import random

OUTPUT = pathlib.Path(__file__).resolve().parent / "imdb" / "unsup.jsonl.gz"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=pathlib.Path, help="the full unsup.jsonl.gz")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=pathlib.Path, default=OUTPUT)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with gzip.open(args.source, "rt", encoding="utf-8", newline="\n") as f:
        lines = [line.rstrip("\n") for line in f]  # not splitlines(): texts hold U+2028 etc.
    picked = random.Random(args.seed).sample(range(len(lines)), args.count)
    payload = "".join(lines[i] + "\n" for i in picked).encode("utf-8")
    with open(args.output, "wb") as raw, gzip.GzipFile(
        filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0
    ) as f:
        f.write(payload)
    digest = hashlib.sha256(args.output.read_bytes()).hexdigest()
    print(f"{args.output}: {args.count} of {len(lines)} reviews, seed {args.seed}, "
          f"{args.output.stat().st_size:,} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
