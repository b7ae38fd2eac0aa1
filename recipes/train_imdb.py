"""Train a transformer encoder classifier on real IMDB reviews and save it.

    python -m recipes.train_imdb                                 # bundled 5k/2k sample
    KERAS_BACKEND=jax python -m recipes.train_imdb --epochs 3
    python -m recipes.train_imdb --data-dir ../shared/data      # the full 25k/25k splits
    python -m recipes.train_imdb --epochs 1 --max-examples 256  # quick smoke run

Writes `<output-dir>/<preset>/<version>/` (a new integer version each
run, written atomically): `model.keras`, `vocabulary.txt`, `config.json` and
`metrics.json` with the test accuracy. SavedModel export for TF Serving
arrives with the export module.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from kformer import models  # noqa: E402
from kformer.data import imdb  # noqa: E402
from recipes.common import write_new_version  # noqa: E402


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="use at most this many train and test reviews")
    p.add_argument("--data-dir", default=None,
                   help="directory holding imdb/{train,test}.jsonl.gz (default: bundled sample)")
    p.add_argument("--output-dir", default="saved_models")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--preset", default="imdb_small",
                   help="a kformer.models.imdb_classifier preset (imdb_tiny, imdb_small)")
    p.add_argument("--vocabulary-size", type=positive_int, default=20000)
    p.add_argument("--sequence-length", type=positive_int, default=200)
    args = p.parse_args(argv)
    if not args.learning_rate > 0:
        p.error(f"--learning-rate must be > 0, got {args.learning_rate}")
    known = [n for n in models.list_models()
             if models.get_preset(n)["builder"] == "imdb_classifier"]
    if args.preset not in known:
        p.error(f"--preset {args.preset!r} is not an IMDB classifier preset; expected one of {known}")
    if args.data_dir is not None and not os.path.isdir(args.data_dir):
        p.error(f"--data-dir {args.data_dir!r} is not a directory")
    return args


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    print(f"backend={keras.backend.backend()} {vars(args)}", flush=True)
    try:
        texts, labels = imdb.load_split("train", args.data_dir, args.max_examples)
        test_texts, test_labels = imdb.load_split("test", args.data_dir, args.max_examples)
    except ValueError as err:
        sys.exit(f"error: {err}")
    (train_texts, train_labels), (val_texts, val_labels) = imdb.train_validation_split(
        texts, labels, seed=args.seed)

    vectorizer = keras.layers.TextVectorization(
        max_tokens=args.vocabulary_size, output_sequence_length=args.sequence_length)
    vectorizer.adapt(train_texts)  # vocabulary from the training split only
    vocabulary = vectorizer.get_vocabulary()

    def encode(batch):
        return np.asarray(keras.ops.convert_to_numpy(vectorizer(batch)), "int32")

    train_ds = imdb.make_dataset(encode(train_texts), train_labels, args.batch_size,
                                 shuffle=True, seed=args.seed)
    val_ds = imdb.make_dataset(encode(val_texts), val_labels, args.batch_size)
    test_ds = imdb.make_dataset(encode(test_texts), test_labels, args.batch_size)

    overrides = {"vocabulary_size": len(vocabulary), "sequence_length": args.sequence_length}
    config = {"preset": args.preset, **models.get_preset(args.preset), **overrides}
    model = models.build(args.preset, **overrides)
    model.compile(keras.optimizers.AdamW(args.learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start = time.time()
    model.fit(train_ds, validation_data=val_ds, epochs=args.epochs, shuffle=False, verbose=2)
    train_seconds = time.time() - start
    _, test_accuracy = model.evaluate(test_ds, verbose=0)
    metrics = {
        "test_accuracy": float(test_accuracy), "test_examples": len(test_labels),
        "train_examples": len(train_labels), "epochs": args.epochs,
        "train_seconds": round(train_seconds, 1), "backend": keras.backend.backend(),
    }

    def write(tmp_dir):
        model.save(tmp_dir / "model.keras")
        (tmp_dir / "vocabulary.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
        (tmp_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")

    run_dir = write_new_version(os.path.join(args.output_dir, args.preset), write)
    print(f"test accuracy: {test_accuracy:.4f} on {len(test_labels)} reviews")
    print(f"saved: {run_dir}")
    return run_dir


if __name__ == "__main__":
    main()
