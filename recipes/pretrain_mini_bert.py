"""Pretrain mini-BERT (masked LM + next sentence) on IMDB reviews, then fine-tune it on IMDB sentiment.

    python -m recipes.pretrain_mini_bert                             # bundled samples
    python -m recipes.pretrain_mini_bert --data-dir DATA   # 50k unlabeled + 25k train reviews
    python -m recipes.pretrain_mini_bert --tfds                      # the same, from TFDS (online)
    python -m recipes.pretrain_mini_bert --compare-scratch           # also train from scratch, same budget
    python -m recipes.pretrain_mini_bert --data-dir DATA --pretrain-steps 6000 --epochs 4 --compare-scratch  # 32 min
    python -m recipes.pretrain_mini_bert --objective mlm --pretrain-dropout 0   # Cramming's choices
    python -m recipes.pretrain_mini_bert --data-dir DATA --epochs 30 --batch-size 256 --finetune-batch-size 32 \\
        --compare-scratch --objective mlm --pretrain-dropout 0    # a GPU's budget: +3 points (docs/RESULTS.md)
    python -m recipes.pretrain_mini_bert --epochs 1 --finetune-epochs 1 --max-examples 256

Pretraining text: the unlabeled reviews plus the training reviews (never the
test split). 15% of tokens are selected (80% [MASK] / 10% random / 10% kept),
re-masked every batch; sentence pairs are 50% true continuations; 5% of the
pairs (or rows) are held out for masked-token accuracy. Both stages warm up
over 10% of their steps, then decay (cosine). `--pretrain-steps` sets the
pretraining length in optimizer steps (split over `--epochs`); by default it
is `--epochs` passes over the pairs (or rows). `--compare-scratch` fine-tunes
a randomly initialized backbone with the same total number of optimizer steps
(pretraining plus fine-tuning, each about as costly), stopping early on
validation accuracy. `--objective mlm` drops the next-sentence loss and
`--pretrain-dropout 0` pretrains without dropout (Geiping & Goldstein 2022,
"Cramming"); fine-tuning always uses the preset's dropout. With `--objective
mlm`, `--pretraining-text packed` pretrains on contiguous text instead of the
pairs (`[CLS] ... [SEP]` rows cut across reviews, RoBERTa's "full
sentences"); at 6,000 steps here it learned the masked tokens more slowly
(docs/RESULTS.md), so pairs stay the default. Writes
`<output-dir>/<preset>_mlm/<version>/` (SavedModel with a `fill_mask`
signature, `model.keras` (with its vocabulary), `metrics.json` with masked-token
accuracy) and `<output-dir>/<preset>_imdb/<version>/` (the fine-tuned classifier:
raw text in, `label` / `probabilities` out, with its test accuracy).
"""

import json
import os
import pathlib
import time

import keras

from kformer import models, viz
from kformer.data import mlm
from recipes import common, prepared
from recipes.train_imdb import OOD, short_text_accuracies

CLASS_NAMES = ["negative", "positive"]
ATTENTION_EXAMPLES = {"pretrain": "This movie was [MASK], and the acting was great.",
                      "finetune": "A wonderful, moving film, though the ending drags a little."}
LIMITS = ["Pretrained on IMDB reviews only (not Wikipedia/BooksCorpus as BERT): a movie-review vocabulary.",
          "With a short pretraining budget it may not beat training from scratch (docs/RESULTS.md).",
          "Inputs are cut to --sequence-length tokens."]


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="bert", preset="bert_tiny", epochs=3, batch_size=32, learning_rate=1e-3,
                           tfds=True, quantize=False)  # the classifier shares the pretrained backbone
    p.add_argument("--pretrain-steps", type=common.positive_int, default=None,
                   help="pretraining optimizer steps, split over --epochs (default: --epochs passes over the pairs)")
    p.add_argument("--finetune-epochs", type=common.positive_int, default=3)
    p.add_argument("--finetune-learning-rate", type=common.positive_float, default=5e-4)
    p.add_argument("--finetune-batch-size", type=common.positive_int, default=None,
                   help="batch of fine-tuning and the --compare-scratch run (default: --batch-size)")
    p.add_argument("--scratch-learning-rate", type=common.positive_float, default=1e-3,
                   help="peak learning rate of the --compare-scratch run")
    p.add_argument("--vocabulary-size", type=common.VOCABULARY_SIZE, default=8000)
    p.add_argument("--sequence-length", type=common.bounded(int, 8), default=128)
    p.add_argument("--objective", choices=["mlm_nsp", "mlm"], default="mlm_nsp",
                   help="pretraining losses: masked LM and next sentence (BERT), or masked LM only")
    p.add_argument("--pretraining-text", choices=["pairs", "packed"], default="pairs",
                   help="masked-LM rows: next-sentence pairs, or contiguous text packed across reviews "
                        "(RoBERTa; needs --objective mlm)")
    p.add_argument("--pretrain-dropout", type=common.bounded(float, 0.0, 0.99), default=None,
                   help="dropout while pretraining (default: the preset's)")
    p.add_argument("--compare-scratch", action="store_true",
                   help="also fine-tune a randomly initialized backbone with the same budget")
    args = common.parse_args(p, argv)
    if args.pretraining_text == "packed" and args.objective != "mlm":
        p.error(f"--pretraining-text packed needs --objective mlm (packed rows have no next-sentence labels), "
                f"got --objective {args.objective}")
    args.finetune_batch_size = args.finetune_batch_size or args.batch_size
    return args


def build_backbone(args, vocabulary_size, **overrides):
    return models.build(args.preset, vocabulary_size=vocabulary_size, sequence_length=args.sequence_length,
                        **overrides)


def finetuning_backbone(args, backbone):
    """`backbone`, or its weights in a copy with the preset's dropout if it was pretrained with another.

    The pooler, frozen in pretraining without NSP, trains here.
    """
    backbone.pooler.trainable = True
    if args.pretrain_dropout is None:
        return backbone
    copy = build_backbone(args, backbone.vocabulary_size)
    if copy.dropout == backbone.dropout:
        return backbone
    copy.set_weights(backbone.get_weights())
    return copy


def pretrain(args, tokenizer, texts, work_dir, scope, pretrained_path):
    """Pretrain (or, on a rerun after pretraining finished, reload) -> model, backbone, metrics."""
    cache = prepared.cache_dir(args.output_dir, f"{args.preset}_mlm")
    verbose = common.progress_verbosity(args)
    nsp = args.objective == "mlm_nsp"
    if args.pretraining_text == "pairs":
        rows = prepared.nsp_pairs(cache, texts, tokenizer, args.sequence_length, args.seed, verbose=verbose)
    else:  # contiguous text: no padding but the last row's
        rows = prepared.mlm_sequences(cache, texts, tokenizer, args.sequence_length, verbose=verbose)
    cut = len(rows["token_ids"]) - max(1, len(rows["token_ids"]) // 20)  # 5% held out
    train = {k: v[:cut] for k, v in rows.items()}
    held_out = {k: v[cut:] for k, v in rows.items()}
    masking = mlm.masking_args(tokenizer)
    train_ds = mlm.make_pretraining_dataset(train, args.batch_size, shuffle=True, seed=args.seed, **masking)
    steps_per_epoch = None
    if args.pretrain_steps:  # a fixed budget: `--epochs` chunks of the repeated pairs
        steps_per_epoch = -(-args.pretrain_steps // args.epochs)
        train_ds = train_ds.repeat()
    steps = args.epochs * (steps_per_epoch or -(-cut // args.batch_size))
    val_ds = mlm.make_pretraining_dataset(held_out, args.batch_size, dynamic_masking=False, **masking)
    from kformer.data.preprocessors import BertPreprocessor  # TensorFlow: imported where used

    dropout = {} if args.pretrain_dropout is None else {"dropout": args.pretrain_dropout}
    with scope:
        backbone = build_backbone(args, tokenizer.vocabulary_size, **dropout)
        model = models.bert_pretrainer(
            backbone, preprocessor=BertPreprocessor(tokenizer, args.sequence_length, mask_positions=True))
        compile_pretraining(model, args.objective, common.accumulated(args, common.adamw(args.learning_rate, steps)),
                            args.jit_compile)
    start = time.time()
    if pretrained_path.is_file():
        model.load_weights(pretrained_path)
    else:
        common.fit(model, train_ds, val_ds, args, args.epochs, work_dir / "pretrain", "val_loss",
                   steps_per_epoch=steps_per_epoch)
        tmp = pretrained_path.with_name(".tmp-" + pretrained_path.name)  # a kill mid-write must not
        model.save_weights(tmp)                                            # leave a truncated file
        os.replace(tmp, pretrained_path)
    results = model.evaluate(val_ds, verbose=0, return_dict=True)
    metrics = {"masked_token_accuracy": float(results["mlm_logits_sparse_categorical_accuracy"]),
               "next_sentence_accuracy": float(results["nsp_logits_sparse_categorical_accuracy"]) if nsp else None,
               "objective": args.objective, "pretrain_dropout": backbone.dropout,
               "pretraining_text": args.pretraining_text,
               "pretraining_sequences": cut, "held_out_sequences": len(held_out["token_ids"]),
               "pretraining_texts": len(texts), "epochs": args.epochs, "pretraining_steps": steps,
               "train_seconds": round(time.time() - start, 1), "backend": keras.backend.backend()}
    return model, backbone, metrics


def compile_pretraining(model, objective, optimizer, jit_compile="auto"):
    """Compile a `bert_pretrainer` model for `objective` ("mlm_nsp" or "mlm"): `models.compile_bert_pretrainer`."""
    models.compile_bert_pretrainer(model, optimizer, objective=objective, jit_compile=jit_compile)


def finetune(args, backbone, preprocessor, datasets, work_dir, scope, epochs, learning_rate, steps_per_epoch):
    steps = epochs * steps_per_epoch
    with scope:
        model = models.bert_text_classifier(backbone, len(CLASS_NAMES), class_names=CLASS_NAMES,
                                            preprocessor=preprocessor)
        model.compile(common.accumulated(args, common.adamw(learning_rate, steps)),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], jit_compile=args.jit_compile)
    start = time.time()
    common.fit(model, datasets["train"], datasets["validation"], args, epochs, work_dir, "val_accuracy")
    _, accuracy = model.evaluate(datasets["test"], verbose=0)
    return model, float(accuracy), round(time.time() - start, 1)


@common.entry_point
def main(argv=None):
    args = parse_args(argv)
    scope = common.setup(args)
    splits = common.load_imdb(args, unlabeled=True)
    unlabeled, _ = splits["unsup"]
    (train_texts, train_labels), (val_texts, val_labels), (test_texts, test_labels) = (
        splits["train"], splits["validation"], splits["test"])
    work_dir = common.training_dir(args, f"{args.preset}_mlm")
    corpus = unlabeled + train_texts  # never the validation or test reviews
    tokenizer = common.learn_or_load_tokenizer(args, f"{args.preset}_mlm", work_dir / "vocabulary.txt",
                                             corpus)

    pretrained_path = work_dir / "pretrained.weights.h5"
    mlm_model, backbone, mlm_metrics = pretrain(args, tokenizer, corpus, work_dir, scope, pretrained_path)
    print(f"masked-token accuracy: {mlm_metrics['masked_token_accuracy']:.4f}", flush=True)

    from kformer.data.preprocessors import BertPreprocessor

    preprocessor = BertPreprocessor(tokenizer, args.sequence_length)
    batch = args.finetune_batch_size
    datasets = {"train": preprocessor.dataset(train_texts, train_labels, batch_size=batch,
                                              shuffle=True, seed=args.seed),
                "validation": preprocessor.dataset(val_texts, val_labels, batch_size=batch),
                "test": preprocessor.dataset(test_texts, test_labels, batch_size=batch)}
    steps_per_epoch = -(-len(train_labels) // batch)
    with scope:
        backbone = finetuning_backbone(args, backbone)
    classifier, accuracy, seconds = finetune(args, backbone, preprocessor, datasets, work_dir / "finetune", scope,
                                             args.finetune_epochs, args.finetune_learning_rate, steps_per_epoch)
    short = short_text_accuracies(classifier, preprocessor, test_texts, test_labels, batch)
    clf_metrics = {"test_accuracy": accuracy, **short, "test_examples": len(test_labels),
                   "train_examples": len(train_labels), "finetune_epochs": args.finetune_epochs,
                   "finetune_batch_size": batch,
                   "finetune_seconds": seconds, "pretrained": True, "backend": keras.backend.backend()}
    if args.compare_scratch:  # the same optimizer steps in all, pretraining's included
        total = mlm_metrics["pretraining_steps"] + args.finetune_epochs * steps_per_epoch
        scratch_epochs = -(-total // steps_per_epoch)
        keras.utils.set_random_seed(args.seed)
        with scope:
            scratch_backbone = build_backbone(args, tokenizer.vocabulary_size)
        _, scratch, scratch_seconds = finetune(args, scratch_backbone, preprocessor, datasets, work_dir / "scratch",
                                               scope, scratch_epochs, args.scratch_learning_rate, steps_per_epoch)
        clf_metrics.update(scratch_test_accuracy=scratch, scratch_epochs=scratch_epochs,
                           scratch_seconds=scratch_seconds)
    print(f"fine-tuned IMDB test accuracy: {accuracy:.4f}"
          + (f" (from scratch: {clf_metrics['scratch_test_accuracy']:.4f})" if args.compare_scratch else "")
          + f"; on first sentences {short['ood_first_sentence_accuracy']:.4f}, "
            f"on 10-30-word crops {short['ood_crop_10_30_accuracy']:.4f}")

    config = {"preset": args.preset, **models.get_preset(args.preset),
              "vocabulary_size": tokenizer.vocabulary_size, "sequence_length": args.sequence_length,
              "class_names": CLASS_NAMES}

    def writer(model, metrics, name, stage):
        card = dict(recipe="pretrain_mini_bert", dataset="IMDB reviews", limits=LIMITS,
                    ood=OOD if stage == "finetune" else None)
        return common.version_writer(
            model, args, name=name, config=config, metrics=metrics, card=card,
            log=work_dir / stage / "training_log.csv",
            attention=lambda: viz.plot_attention(model, [ATTENTION_EXAMPLES[stage]], layer=-1))

    written = work_dir / "mlm_version.json"  # a rerun after a kill past this point reuses the version
    mlm_dir = pathlib.Path(json.loads(written.read_text())["path"]) if written.is_file() else None
    if mlm_dir is None or not mlm_dir.is_dir():
        mlm_dir = common.write_new_version(
            f"{args.output_dir}/{args.preset}_mlm",
            writer(mlm_model, mlm_metrics, f"{args.preset}_mlm", "pretrain"))
        common.write_json(written, {"path": str(mlm_dir)})
    clf_dir = common.finish(args, f"{args.preset}_imdb", work_dir,
                            writer(classifier, clf_metrics, f"{args.preset}_imdb", "finetune"))
    print(f"saved: {mlm_dir} (fill_mask) and {clf_dir} (classifier)")
    return mlm_dir, clf_dir


if __name__ == "__main__":
    main()
