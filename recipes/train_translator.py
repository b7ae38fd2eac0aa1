"""Train an encoder-decoder Transformer translator (English->Spanish or German->English), score BLEU, export.

    python -m recipes.train_translator                        # Tatoeba en-es, bundled 4k-pair sample
    python -m recipes.train_translator --data-dir DATA --epochs 10
    python -m recipes.train_translator --dataset multi30k --data-dir DATA
    python -m recipes.train_translator --epochs 1 --max-examples 256  # quick smoke run
    python -m recipes.train_translator --data-dir DATA --split-by source --num-beams 1   # greedy

The paper's recipe: warmup then inverse-square-root learning rate (peak
`--learning-rate` after `--warmup-steps`), label smoothing 0.1, Adam(0.9,
0.98, 1e-9). One WordPiece vocabulary per language, learned from the training
split. The test set is translated with beam search (4 beams, no repeated
3-gram, at most 1.5 x source length + 10 tokens: `--num-beams`,
`--no-repeat-ngram-size`, `--max-length-ratio`, `--max-length-offset`). Test BLEU and chrF come
from sacrebleu on detokenized text; the vocabularies are lower-cased, so
BLEU is case-insensitive (`lowercase=True`);
BLEU is also reported on the test pairs whose English sentence is not in
train (Tatoeba repeats sentences; `--split-by source` removes all of them).
Writes `<output-dir>/<preset>_<dataset>/<version>/`: the TF Serving SavedModel
(`text` in, `translation` out; greedy by default, `translate_beam`; both
with the no-repeat rule; `--serving-xla` adds `translate_xla`),
`model.keras` (the `Translator` with both vocabularies:
`kformer.models.load(version_dir).translate(["How are you?"])`), `config.json`,
`metrics.json` (with sample translations) and the training logs.
"""

import math
import pathlib
import time

import keras

from kformer import models, viz
from kformer.data import translation
from kformer.data.preprocessors import TranslatorPreprocessor
from recipes import common

LIMITS = ["Short, everyday sentences (Tatoeba / Multi30k); long or technical text translates poorly.",
          "Inputs are cut to --sequence-length tokens; outputs stop at the same length, or sooner with "
          "--max-length-ratio (the default: 1.5 x the source's tokens + 10).",
          "BLEU on the bundled sample is low; see docs/RESULTS.md for full-data runs."]


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="translator", preset="transformer_small", epochs=10,
                           batch_size=64, learning_rate=1e-3)
    p.add_argument("--dataset", choices=translation.DATASETS, default="spa-eng")
    p.add_argument("--vocabulary-size", type=common.VOCABULARY_SIZE, default=8000,
                   help="per language")
    p.add_argument("--sequence-length", type=common.bounded(int, 4), default=40)
    p.add_argument("--warmup-steps", type=common.positive_int, default=None,
                   help="default: 4000, or 10%% of the training steps if that is fewer")
    p.add_argument("--num-beams", type=common.bounded(int, 1, 64), default=4,
                   help="beam width for the test translations (1 = greedy; 4 scored 1.7 BLEU above greedy "
                        "on the en-es source split, in 3.5x the decoding time: docs/RESULTS.md)")
    p.add_argument("--no-repeat-ngram-size", type=common.bounded(int, 0, 16), default=3,
                   help="never repeat an n-gram in a translation (test and export; 0 = off)")
    p.add_argument("--max-length-ratio", type=common.bounded(float, 0), default=1.5,
                   help="a translation stops after RATIO x its source's tokens + --max-length-offset "
                        "(test and export; 0 = off, --sequence-length only); it would cut 0.003%% of the "
                        "en-es training references, and cuts beam search over the test split by 40%% "
                        "(docs/RESULTS.md)")
    p.add_argument("--max-length-offset", type=common.bounded(int, 0), default=10,
                   help="see --max-length-ratio")
    p.add_argument("--serving-xla", action="store_true",
                   help="also export `translate_xla`: greedy decoding compiled by XLA, about 5x faster for one "
                        "request on a CPU; TF Serving needs --xla_cpu_compilation_enabled=true for it "
                        "(docs/BENCHMARKS.md)")
    p.add_argument("--split-by", choices=translation.SPLIT_BY, default="pair",
                   help="spa-eng: split the pairs, or the distinct English sentences (full file only)")
    p.add_argument("--max-test-examples", type=common.positive_int, default=None)
    args = common.parse_args(p, argv)
    if args.split_by == "source":
        full = pathlib.Path(args.data_dir or translation.BUNDLED_DATA_DIR) / "spa-eng" / "spa.txt.gz"
        if args.dataset != "spa-eng" or not full.is_file():
            p.error(f"--split-by source needs --dataset spa-eng and the full {full} (the bundled "
                    "sample follows the pair split); pass --data-dir")
    return args


def attention_example(sources, words=8):
    """The index of a test sentence of about `words` words, for the cross-attention figure."""
    return min(range(min(len(sources), 200)), key=lambda i: (abs(len(sources[i].split()) - words), sources[i]))


@common.entry_point
def main(argv=None):
    args = parse_args(argv)
    scope = common.setup(args)
    try:
        sources, targets = translation.load_split("train", args.dataset, args.data_dir, args.max_examples,
                                                  args.split_by)
        val = translation.load_split("validation", args.dataset, args.data_dir, args.max_examples, args.split_by)
        test_sources, test_targets = translation.load_split(
            "test", args.dataset, args.data_dir, args.max_test_examples or args.max_examples, args.split_by)
    except ValueError as err:
        common.fail(err)
    name = f"{args.preset}_{args.dataset}"
    work_dir = common.training_dir(args, name)
    source_tokenizer = common.learn_or_load_tokenizer(args, name, work_dir / "source_vocabulary.txt", sources)
    target_tokenizer = common.learn_or_load_tokenizer(args, name, work_dir / "target_vocabulary.txt", targets)
    preprocessor = TranslatorPreprocessor(source_tokenizer, target_tokenizer, args.sequence_length)
    train_ds = preprocessor.dataset(sources, targets, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    val_ds = preprocessor.dataset(*val, batch_size=args.batch_size)

    overrides = {"encoder_vocabulary_size": source_tokenizer.vocabulary_size,
                 "decoder_vocabulary_size": target_tokenizer.vocabulary_size,
                 "sequence_length": max(args.sequence_length, models.get_preset(args.preset)["sequence_length"])}
    steps = args.epochs * int(train_ds.cardinality())
    warmup = args.warmup_steps or max(1, min(4000, steps // 10))
    config = {"preset": args.preset, **models.get_preset(args.preset), **overrides,
              "dataset": args.dataset, "warmup_steps": warmup}
    with scope:
        model = models.build(args.preset, preprocessor=preprocessor, **overrides)
        hidden = model.hidden_dim
        scale = args.learning_rate / (hidden ** -0.5 * warmup ** -0.5)  # peak = --learning-rate
        optimizer = keras.optimizers.Adam(models.TransformerSchedule(hidden, warmup, scale),
                                          beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        model.compile(optimizer, models.LabelSmoothedCrossEntropy(0.1), jit_compile=args.jit_compile)
    start = time.time()
    common.fit(model, train_ds, val_ds, args, args.epochs, work_dir, "val_loss")
    train_seconds = time.time() - start

    import sacrebleu

    start = time.time()
    limit = {"max_length_ratio": args.max_length_ratio or None, "max_length_offset": args.max_length_offset}
    hypotheses = model.translate(test_sources, strategy="beam" if args.num_beams > 1 else "greedy",
                                 num_beams=args.num_beams, no_repeat_ngram_size=args.no_repeat_ngram_size, **limit)
    example = attention_example(test_sources)  # its figure shows the translation decoded here
    bleu = sacrebleu.corpus_bleu(hypotheses, [test_targets], lowercase=True)
    chrf = sacrebleu.corpus_chrf(hypotheses, [[t.lower() for t in test_targets]])
    seen = set(sources)
    unseen = [i for i, s in enumerate(test_sources) if s not in seen]  # test sentences never trained on
    unseen_bleu = round(sacrebleu.corpus_bleu([hypotheses[i] for i in unseen], [[test_targets[i] for i in unseen]],
                                              lowercase=True).score, 2) if unseen else None
    metrics = {
        "test_bleu": round(bleu.score, 2), "test_chrf": round(chrf.score, 2),
        "test_bleu_unseen_sources": unseen_bleu, "test_unseen_sources": len(unseen),
        "split_by": args.split_by, "no_repeat_ngram_size": args.no_repeat_ngram_size, **limit,
        "bleu_signature": str(bleu.format(signature=True)).split(" = ")[0] + " (lowercase)",
        "test_examples": len(test_sources), "train_examples": len(sources), "epochs": args.epochs,
        "num_beams": args.num_beams, "train_seconds": round(train_seconds, 1),
        "translate_seconds": round(time.time() - start, 1), "backend": keras.backend.backend(),
        "samples": [{"source": s, "reference": r, "translation": h}
                    for s, r, h in list(zip(test_sources, test_targets, hypotheses))[:8]],
    }
    if not all(math.isfinite(v) for v in (bleu.score, chrf.score)) or not math.isfinite(unseen_bleu or 0):
        common.fail(f"non-finite scores: {metrics}")

    card = dict(recipe="train_translator", dataset=args.dataset, limits=LIMITS)
    run_dir = common.finish(args, name, work_dir, common.version_writer(
        model, args, name=name, config=config, metrics=metrics, card=card,
        export_options={"num_beams": max(4, args.num_beams), "no_repeat_ngram_size": args.no_repeat_ngram_size,
                        "xla": args.serving_xla, **limit},
        log=work_dir / "training_log.csv",
        attention=lambda: viz.plot_attention(model, [test_sources[example]], targets=[hypotheses[example]],
                                             layer=-1, attention="cross")))
    for sample in metrics["samples"][:3]:
        print(f"  {sample['source']!r} -> {sample['translation']!r} (reference {sample['reference']!r})")
    print(f"test BLEU {bleu.score:.2f}, chrF {chrf.score:.2f} on {len(test_sources)} pairs "
          f"(BLEU {unseen_bleu} on the {len(unseen)} whose English sentence is not in train)")
    print(f"saved: {run_dir}")
    return run_dir


if __name__ == "__main__":
    main()
