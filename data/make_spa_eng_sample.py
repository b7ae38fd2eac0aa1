"""Draw the bundled spa-eng sample from the full file's fixed splits.

    python data/make_spa_eng_sample.py --source DATA --output data

Writes `<output>/spa-eng/{train,validation,test}.tsv.gz` (20,000 / 500 / 500
`English<TAB>Spanish` lines from the splits of
`kformer.data.translation.load_split`, kept in split order) and copies
`_about.txt`. `numpy.random.default_rng(1)` draws 4,000 / 500 / 500 (the
sample's first version); `default_rng(2)` then adds 16,000 more training
pairs from the rest of the train split, so the first version's pairs stay in
and validation and test are unchanged. gzip level 9 with mtime 0, so reruns
give identical bytes.
"""

import argparse
import gzip
import hashlib
import pathlib
import shutil

import numpy as np

from kformer.data import translation

SAMPLE_SIZES = {"train": 4000, "validation": 500, "test": 500}  # default_rng(1), as first bundled
EXTRA_TRAIN = 16000  # default_rng(2): the quickstart's translator needs more than 4,000 pairs to translate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="directory holding spa-eng/spa.txt.gz")
    parser.add_argument("--output", default=str(translation.BUNDLED_DATA_DIR))
    args = parser.parse_args(argv)
    source, output = pathlib.Path(args.source) / "spa-eng", pathlib.Path(args.output) / "spa-eng"
    if not (source / "spa.txt.gz").is_file():
        raise SystemExit(f"Full file not found: {source / 'spa.txt.gz'}")
    output.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for split, size in SAMPLE_SIZES.items():
        english, spanish = translation.load_split(split, "spa-eng", data_dir=args.source)
        keep = np.sort(rng.choice(len(english), size, replace=False))
        if split == "train":
            rest = np.setdiff1d(np.arange(len(english)), keep)
            keep = np.sort(np.concatenate([keep, np.random.default_rng(2).choice(rest, EXTRA_TRAIN, replace=False)]))
        text = "".join(f"{english[i]}\t{spanish[i]}\n" for i in keep)
        path = output / f"{split}.tsv.gz"
        path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{path}: {len(keep)} of {len(english)} pairs, sha256 {digest}")
    shutil.copyfile(source / "_about.txt", output / "_about.txt")


if __name__ == "__main__":
    main()
