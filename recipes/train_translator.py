"""Train an encoder-decoder Transformer translator (English->Spanish or German->English), score BLEU, export.

    python -m recipes.train_translator                        # Tatoeba en-es, bundled 4k-pair sample
    python -m recipes.train_translator --data-dir DATA --epochs 10
    python -m recipes.train_translator --dataset multi30k --data-dir DATA
    python -m recipes.train_translator --epochs 1 --max-examples 256  # quick smoke run
    python -m recipes.train_translator --data-dir DATA --split-by source --num-beams 1   # greedy
    python -m recipes.train_translator --shared-vocabulary --average-last 5   # paper 3.4 and 6.1
    python -m recipes.train_translator --from-pretrained hf://Helsinki-NLP/opus-mt-en-es   # fine-tune Marian

The paper's recipe: warmup then inverse-square-root learning rate (peak
`--learning-rate` after `--warmup-steps`), label smoothing 0.1, Adam(0.9,
0.98, 1e-9). One WordPiece vocabulary per language, learned from the training
split; `--shared-vocabulary` learns one from both sides instead (paper 3.4:
one embedding table for encoder, decoder and the pre-softmax projection, so
digits, names and punctuation can be copied), `--vocabulary-size` tokens in
all (default 16,000: the two 8,000-token tables' rows). `--average-last N`
makes the final weights the mean of the last N epochs' (paper 6.1 averages
the last 5 checkpoints; `recipes.common.AverageLastEpochs`): it replaces the
best epoch's weights that early stopping restores; `final_val_loss` in
`metrics.json` is the validation loss of the weights kept. The test set is
translated with beam search (4 beams, no repeated 3-gram, at most 1.5 x
source length + 10 tokens: `--num-beams`, `--no-repeat-ngram-size`,
`--max-length-ratio`, `--max-length-offset`). Test BLEU and chrF come
from sacrebleu on detokenized text; the vocabularies are lower-cased, so
BLEU is case-insensitive (`lowercase=True`);
numbers are copied from the source (`TranslatorPreprocessor(copy_numbers=True)`:
each one is a slot in the token sequences, filled with the source's numbers
in order; `--no-copy-numbers` spells them as word pieces);
BLEU is also reported on the test pairs whose English sentence is not in
train (Tatoeba repeats sentences; `--split-by source` removes all of them).
Out of distribution (`kformer.data.translation.ood_splits`): two sets are held
out of the training split and translated as the test set is:
`ood_length_bleu` on the pairs whose source has more than `--ood-max-words`
words (12 for spa-eng, 20 for Multi30k; the model trains on the shorter ones),
`ood_rare_word_bleu` on pairs whose source holds a word seen in fewer than
`--ood-min-count` (2) training pairs (so none), at most 4% of the training split.
That takes 1,250 of the bundled 20,000 training pairs (18,750 left) and 6,347 of the
full 107,067 (100,720 left); validation and test are unchanged
(`ood_splits` in `metrics.json`; 0 turns a set off). The first
`--max-ood-examples` (1,000) pairs of each set are translated. Two checks of the test
translations: `long_word_rate`, the share whose longest word has more than 3x
the letters of the source's longest (invented sub-word chains), and
`digit_copy_rate`, the share of those with digits in the source that carry
every digit string unchanged (`all_digit_copy_rate`: test and OOD sets).
`--from-pretrained SOURCE` fine-tunes a Marian (OPUS-MT) checkpoint instead (a Hugging Face folder
or an `hf://` handle; `models.from_pretrained`): its SentencePiece vocabulary and sizes, the same
schedule peaking at 5e-5 unless `--learning-rate`, the same scores, decoded with the checkpoint's
generation config wherever a decoding flag is not given (not the 4 / 3 / 1.5 above); its SavedModel takes
`source_ids` (the client tokenizes: docs/pretrained.md). The checkpoint must translate from the
`--dataset`'s source language (English for spa-eng, German for multi30k) to its target.
Writes `<output-dir>/<preset>_<dataset>/<version>/` (`<checkpoint name>_<dataset>` when fine-tuning): the TF Serving SavedModel
(`text` in, `translation` out; greedy by default, `translate_beam`; both
with the no-repeat rule; `--serving-xla` adds `translate_xla`),
`model.keras` (the `Translator` with both vocabularies:
`kformer.models.load(version_dir).translate(["How are you?"])`), `config.json`,
`metrics.json` (with sample translations) and the training logs.
"""

import math
import pathlib
import re
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


SCRATCH_DECODING = {"num_beams": 4, "no_repeat_ngram_size": 3, "max_length_ratio": 1.5}  # a --preset's defaults


def decoding(args, model):
    """The test translations' and the export's `GenerationConfig`: the flags given (all of them with a
    --preset) on the model's own (with --from-pretrained, the checkpoint's generation config) -> (config,
    the effective settings for metrics and the model card)."""
    given = {name: getattr(args, name) for name in SCRATCH_DECODING if getattr(args, name) is not None}
    if "max_length_ratio" in given:
        given["max_length_ratio"] = given["max_length_ratio"] or None  # 0: off
        given["max_length_offset"] = args.max_length_offset
    beams = given.pop("num_beams", None)
    if beams is not None:
        given["sampler"] = models.BeamSampler(num_beams=beams) if beams > 1 else models.GreedySampler()
    config = model.generation_config.replace(**given)
    effective = {"num_beams": getattr(config.sampler, "num_beams", 1),
                 "no_repeat_ngram_size": config.no_repeat_ngram_size, "max_length_ratio": config.max_length_ratio,
                 "max_length_offset": config.max_length_offset}
    return config, effective


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="translator", preset="transformer_small", epochs=10,
                           batch_size=64, learning_rate=1e-3, pretrained=("Marian (OPUS-MT)", 5e-5))
    p.add_argument("--dataset", choices=translation.DATASETS, default="spa-eng")
    p.add_argument("--vocabulary-size", type=common.VOCABULARY_SIZE, default=None,
                   help="per language (default 8000), or in all with --shared-vocabulary (default 16000)")
    p.add_argument("--shared-vocabulary", action="store_true",
                   help="one WordPiece vocabulary learned from both sides and one embedding table for encoder, "
                        "decoder and output (paper 3.4): digits and names can be copied")
    p.add_argument("--no-copy-numbers", dest="copy_numbers", action="store_false",
                   help="spell numbers as word pieces instead of copying them from the source "
                        "(TranslatorPreprocessor's copy_numbers; default: copied)")
    p.add_argument("--average-last", type=common.bounded(int, 0), default=0, metavar="N",
                   help="final weights = the mean of the last N epochs' (paper 6.1: 5; 0 = off, the best epoch's); "
                        "early stopping before the last N epochs leaves the best epoch's")
    p.add_argument("--ood-max-words", type=common.bounded(int, 0), default=None, metavar="N",
                   help="hold the training pairs whose source has more than N words out of training and report "
                        "their BLEU as ood_length_bleu (default: 12 for spa-eng, 20 for multi30k; 0 = off)")
    p.add_argument("--ood-min-count", type=common.bounded(int, 0), default=translation.OOD_MIN_COUNT, metavar="K",
                   help="hold training pairs whose source holds a word found in fewer than K training pairs out "
                        "of training (at most 4%%) and report their BLEU as ood_rare_word_bleu (0 = off)")
    p.add_argument("--max-ood-examples", type=common.positive_int, default=1000,
                   help="translate at most this many pairs of each held-out set, the first in split order (all "
                        "are kept out of training): on the full en-es data, 2,000 beside the 5,949 test pairs")
    p.add_argument("--sequence-length", type=common.bounded(int, 4), default=40)
    p.add_argument("--warmup-steps", type=common.positive_int, default=None,
                   help="default: 4000, or 10%% of the training steps if that is fewer")
    # The decoding flags default to SCRATCH_DECODING with a --preset, and to the checkpoint's generation config
    # (`translate`'s defaults) with --from-pretrained: None here means "not given".
    p.add_argument("--num-beams", type=common.bounded(int, 1, 64), default=None,
                   help="beam width for the test translations (1 = greedy; default 4, or the checkpoint's with "
                        "--from-pretrained; 4 scored 1.7 BLEU above greedy on the en-es source split, in 3.5x the "
                        "decoding time: docs/RESULTS.md)")
    p.add_argument("--no-repeat-ngram-size", type=common.bounded(int, 0, 16), default=None,
                   help="never repeat an n-gram in a translation (test and export; 0 = off; default 3, or the "
                        "checkpoint's with --from-pretrained)")
    p.add_argument("--max-length-ratio", type=common.bounded(float, 0), default=None,
                   help="a translation stops after RATIO x its source's tokens + --max-length-offset "
                        "(test and export; 0 = off, --sequence-length only; default 1.5, off with "
                        "--from-pretrained); it would cut 0.003%% of the en-es training references, and cuts "
                        "beam search over the test split by 40%% (docs/RESULTS.md)")
    p.add_argument("--max-length-offset", type=common.bounded(int, 0), default=10,
                   help="see --max-length-ratio")
    p.add_argument("--serving-xla", action="store_true",
                   help="also export `translate_xla`: greedy decoding compiled by XLA, faster for one request "
                        "on a CPU; TF Serving needs --xla_cpu_compilation_enabled=true for it "
                        "(docs/decisions.md#translate-xla-opt-in)")
    p.add_argument("--split-by", choices=translation.SPLIT_BY, default="pair",
                   help="spa-eng: split the pairs, or the distinct English sentences (full file only)")
    p.add_argument("--max-test-examples", type=common.positive_int, default=None)
    args = common.parse_args(p, argv)
    if args.from_pretrained is None:
        for name, value in SCRATCH_DECODING.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
    if args.from_pretrained is not None:
        shaping = [flag for flag, given in (("--vocabulary-size", args.vocabulary_size is not None),
                                            ("--shared-vocabulary", args.shared_vocabulary),
                                            ("--no-copy-numbers", not args.copy_numbers)) if given]
        if shaping:
            p.error(f"{', '.join(shaping)} shape a --preset's vocabulary, not --from-pretrained's (the checkpoint's "
                    "SentencePiece vocabulary)")
        if args.serving_xla:
            p.error("--serving-xla takes text; a --from-pretrained translator's SavedModel takes source_ids")
    if args.vocabulary_size is None:
        args.vocabulary_size = 16000 if args.shared_vocabulary else 8000
    if args.ood_max_words is None:
        args.ood_max_words = translation.OOD_MAX_WORDS[args.dataset]
    if args.split_by == "source":
        full = pathlib.Path(args.data_dir or translation.BUNDLED_DATA_DIR) / "spa-eng" / "spa.txt.gz"
        if args.dataset != "spa-eng" or not full.is_file():
            p.error(f"--split-by source needs --dataset spa-eng and the full {full} (the bundled "
                    "sample follows the pair split); pass --data-dir")
    return args


def longest_word(text):
    return max(map(len, translation.words(text)), default=0)


def long_word_rate(sources, translations, ratio=3):
    """The share of translations whose longest word has more than `ratio` x the letters of the source's longest."""
    flagged = [longest_word(h) > ratio * longest_word(s) for s, h in zip(sources, translations)]
    return round(sum(flagged) / len(flagged), 4) if flagged else None


def digit_copies(sources, translations):
    """(share, count) of the pairs with a digit string in the source: the share whose translation has every one."""
    copied = [set(re.findall(r"\d+", s)) <= set(re.findall(r"\d+", h))
              for s, h in zip(sources, translations) if re.search(r"\d", s)]
    return (round(sum(copied) / len(copied), 4) if copied else None), len(copied)


def attention_example(sources, words=8):
    """The index of a test sentence of about `words` words, for the cross-attention figure."""
    return min(range(min(len(sources), 200)), key=lambda i: (abs(len(sources[i].split()) - words), sources[i]))


def scratch_preprocessor(args, name, work_dir, sources, targets):
    """A `TranslatorPreprocessor` with WordPiece vocabularies learned from the training pairs (or read back)."""
    if args.shared_vocabulary:  # one tokenizer object: TranslatorPreprocessor and the builder share its table
        source_tokenizer = target_tokenizer = common.learn_or_load_tokenizer(
            args, name, work_dir / "shared_vocabulary.txt", sources + targets)
    else:
        source_tokenizer = common.learn_or_load_tokenizer(args, name, work_dir / "source_vocabulary.txt", sources)
        target_tokenizer = common.learn_or_load_tokenizer(args, name, work_dir / "target_vocabulary.txt", targets)
    return TranslatorPreprocessor(source_tokenizer, target_tokenizer, args.sequence_length,
                                  copy_numbers=args.copy_numbers)


def pretrained_marian(args):
    """`--from-pretrained`: the checkpoint as a `Translator` with its `MarianPreprocessor` at
    `--sequence-length`, and the run's config."""
    model, checkpoint = common.load_pretrained(args.from_pretrained, sequence_length=args.sequence_length)
    if checkpoint.get("model_type") != "marian" or getattr(model, "preprocessor", None) is None:
        common.fail(f"--from-pretrained {args.from_pretrained} is a {checkpoint.get('model_type')!r} checkpoint"
                    f"{'' if checkpoint.get('model_type') != 'marian' else ' without its tokenizer files'}; this "
                    "recipe fine-tunes Marian (OPUS-MT) translators with their SentencePiece models")
    config = {"from_pretrained": args.from_pretrained, "model_type": "marian", "dataset": args.dataset,
              **{k: checkpoint.get(k) for k in ("vocab_size", "d_model", "encoder_layers", "decoder_layers",
                                                "encoder_attention_heads", "encoder_ffn_dim")},
              "sequence_length": args.sequence_length, **({"lora_rank": args.lora_rank, "lora_targets": list(args.lora_targets)} if args.lora_rank else {})}
    common.lora(args, model)
    return model, config


@common.entry_point
def main(argv=None):
    args = parse_args(argv)
    scope = common.setup(args)
    try:
        held = translation.ood_splits(*translation.load_split("train", args.dataset, args.data_dir, None,
                                                              args.split_by),
                                      args.ood_max_words or None, args.ood_min_count)
        val = translation.load_split("validation", args.dataset, args.data_dir, args.max_examples, args.split_by)
        test_sources, test_targets = translation.load_split(
            "test", args.dataset, args.data_dir, args.max_test_examples or args.max_examples, args.split_by)
    except ValueError as err:
        common.fail(err)
    train_before = len(held["train"][0]) + sum(len(held[k][0]) for k in translation.OOD_SPLITS)
    sources, targets = (side[:args.max_examples] for side in held["train"])
    scored = min(args.max_ood_examples, args.max_test_examples or args.max_examples or args.max_ood_examples)
    ood = {k: tuple(side[:scored] for side in held[k]) for k in translation.OOD_SPLITS if held[k][0]}
    pretrained = args.from_pretrained is not None
    name = f"{common.pretrained_name(args.from_pretrained) if pretrained else args.preset}_{args.dataset}"
    work_dir = common.training_dir(args, name)
    if pretrained:
        with scope:
            model, config = pretrained_marian(args)
        preprocessor = model.preprocessor
    else:
        preprocessor = scratch_preprocessor(args, name, work_dir, sources, targets)
    train_ds = preprocessor.dataset(sources, targets, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    val_ds = preprocessor.dataset(*val, batch_size=args.batch_size)
    steps = args.epochs * int(train_ds.cardinality())
    warmup = args.warmup_steps or max(1, min(4000, steps // 10))
    if not pretrained:
        source_tokenizer, target_tokenizer = preprocessor.source_tokenizer, preprocessor.target_tokenizer
        overrides = ({"vocabulary_size": source_tokenizer.vocabulary_size} if args.shared_vocabulary else
                     {"encoder_vocabulary_size": source_tokenizer.vocabulary_size,
                      "decoder_vocabulary_size": target_tokenizer.vocabulary_size})
        overrides["sequence_length"] = max(args.sequence_length, models.get_preset(args.preset)["sequence_length"])
        config = {"preset": args.preset, **models.get_preset(args.preset), **overrides, "dataset": args.dataset,
                  "copy_numbers": args.copy_numbers}
    config["warmup_steps"] = warmup
    with scope:
        if not pretrained:
            model = models.build(args.preset, preprocessor=preprocessor, **overrides)
        hidden = model.hidden_dim
        scale = args.learning_rate / (hidden ** -0.5 * warmup ** -0.5)  # peak = --learning-rate
        optimizer = common.accumulated(args, keras.optimizers.Adam(models.TransformerSchedule(hidden, warmup, scale),
                                                                   beta_1=0.9, beta_2=0.98, epsilon=1e-9))
        # padding never counts: id 0 for a translator trained here, `<pad>` for a Marian checkpoint
        model.compile(optimizer, models.LabelSmoothedCrossEntropy(0.1, ignore_id=model.padding_id),
                      jit_compile=args.jit_compile)
    start = time.time()
    average = [common.AverageLastEpochs(args.average_last, args.epochs, work_dir / "average_last.npz")
               ] if args.average_last else []
    common.fit(model, train_ds, val_ds, args, args.epochs, work_dir, "val_loss", extra_callbacks=average)
    common.quantize(args, model)
    train_seconds = time.time() - start
    final_val_loss = model.evaluate(val_ds, verbose=0, return_dict=True)["loss"]  # best epoch's, or the average

    import sacrebleu

    start = time.time()
    generation, effective = decoding(args, model)
    everything = test_sources + [s for k in ood for s in ood[k][0]]  # one call: batched by length together
    translated = model.translate(everything, generation)
    hypotheses, ood_hypotheses, offset = translated[:len(test_sources)], {}, len(test_sources)
    for k in ood:
        ood_hypotheses[k], offset = translated[offset:offset + len(ood[k][0])], offset + len(ood[k][0])
    example = attention_example(test_sources)  # its figure shows the translation decoded here
    bleu = sacrebleu.corpus_bleu(hypotheses, [test_targets], lowercase=True)
    ood_bleu = {f"ood_{k}_bleu": round(sacrebleu.corpus_bleu(ood_hypotheses[k], [ood[k][1]], lowercase=True).score, 2)
                for k in ood}
    digit_rate, digit_sources = digit_copies(test_sources, hypotheses)
    all_digit_rate, all_digit_sources = digit_copies(everything, translated)
    chrf = sacrebleu.corpus_chrf(hypotheses, [[t.lower() for t in test_targets]])
    seen = set(sources)
    unseen = [i for i, s in enumerate(test_sources) if s not in seen]  # test sentences never trained on
    unseen_bleu = round(sacrebleu.corpus_bleu([hypotheses[i] for i in unseen], [[test_targets[i] for i in unseen]],
                                              lowercase=True).score, 2) if unseen else None
    metrics = {
        "test_bleu": round(bleu.score, 2), "test_chrf": round(chrf.score, 2),
        "test_bleu_unseen_sources": unseen_bleu, "test_unseen_sources": len(unseen),
        **ood_bleu, "ood_splits": {
            "max_words": args.ood_max_words or None, "min_count": args.ood_min_count or None,
            "max_fraction": translation.OOD_MAX_FRACTION, "train_pairs_before": train_before,
            "held_out": {k: len(held[k][0]) for k in translation.OOD_SPLITS},
            "scored": {k: len(ood[k][0]) for k in ood}},
        "long_word_rate": long_word_rate(test_sources, hypotheses),
        "digit_copy_rate": digit_rate, "digit_sources": digit_sources,
        "all_digit_copy_rate": all_digit_rate, "all_digit_sources": all_digit_sources,
        "final_val_loss": round(final_val_loss, 4), "shared_vocabulary": args.shared_vocabulary,
        "averaged_epochs": average[0].averaged_epochs if average else None,
        "split_by": args.split_by, "no_repeat_ngram_size": effective["no_repeat_ngram_size"],
        "max_length_ratio": effective["max_length_ratio"],
        "max_length_offset": effective.get("max_length_offset") if effective["max_length_ratio"] else None,
        "bleu_signature": str(bleu.format(signature=True)).split(" = ")[0] + " (lowercase)",
        "test_examples": len(test_sources), "train_examples": len(sources), "epochs": args.epochs,
        "num_beams": effective["num_beams"], "train_seconds": round(train_seconds, 1),
        **({"learning_rate": args.learning_rate, "from_pretrained": args.from_pretrained} if pretrained else {}),
        "translate_seconds": round(time.time() - start, 1), "backend": keras.backend.backend(),
        "samples": [{"source": s, "reference": r, "translation": h}
                    for s, r, h in list(zip(test_sources, test_targets, hypotheses))[:8]],
    }
    if not all(math.isfinite(v) for v in (bleu.score, chrf.score, *ood_bleu.values())) or \
            not math.isfinite(unseen_bleu or 0):
        common.fail(f"non-finite scores: {metrics}")

    side = "English" if args.dataset == "spa-eng" else "German"
    of = lambda k: f"{len(ood[k][0]):,} of the {len(held[k][0]):,}" if k in ood else "the 0"  # noqa: E731
    card = dict(recipe="train_translator", dataset=args.dataset, limits=LIMITS, ood={
        "ood_length_bleu": f"{of('length')} training pairs whose {side} side has more than "
                           f"{args.ood_max_words} words, held out of training (trained on the shorter ones)",
        "ood_rare_word_bleu": f"{of('rare_word')} training pairs whose {side} side holds a word found "
                              f"in fewer than {args.ood_min_count} training pairs, held out of training"})
    run_dir = common.finish(args, name, work_dir, common.version_writer(
        model, args, name=name, config=config, metrics=metrics, card=card,
        export_options={"generation": generation.replace(sampler=models.BeamSampler(
                            num_beams=max(4, effective["num_beams"]),
                            length_penalty=getattr(generation.sampler, "length_penalty", 0.6))),
                        "xla": args.serving_xla},
        log=work_dir / "training_log.csv",
        attention=lambda: viz.plot_attention(model, [test_sources[example]], targets=[hypotheses[example]],
                                             layer=-1, attention="cross")))
    for sample in metrics["samples"][:3]:
        print(f"  {sample['source']!r} -> {sample['translation']!r} (reference {sample['reference']!r})")
    print(f"test BLEU {bleu.score:.2f}, chrF {chrf.score:.2f} on {len(test_sources)} pairs "
          f"(BLEU {unseen_bleu} on the {len(unseen)} whose English sentence is not in train)")
    print("out of distribution: " + ", ".join(f"{k} BLEU {ood_bleu[f'ood_{k}_bleu']} on {len(ood[k][0])} pairs"
                                              for k in ood) +
          f"; digit copy rate {digit_rate} ({digit_sources} test sources with digits), "
          f"long-word rate {metrics['long_word_rate']}")
    print(f"saved: {run_dir}")
    return run_dir


if __name__ == "__main__":
    main()
