"""Train a GPT-style causal language model on the IMDB unlabeled reviews, evaluate, save and export it.

    python -m recipes.train_gpt                                  # gpt_tiny, bundled 3k reviews
    python -m recipes.train_gpt --data-dir DATA        # all 50k unlabeled reviews
    python -m recipes.train_gpt --epochs 1 --max-examples 256    # quick smoke run
    python -m recipes.train_gpt --num-experts 8                  # = --preset gpt_moe_tiny: top-2 of 8 experts

A WordPiece vocabulary is learned from the training reviews; the reviews are
packed into windows of `--sequence-length + 1` tokens (no padding) and a
seeded 5 % of them is held out for validation. Reports the validation
perplexity (exp of the mean next-token cross-entropy), the same perplexity on
English text of another domain (`ood_tatoeba_english_perplexity`: the English
side of the bundled Tatoeba spa-eng test pairs, whatever `--data-dir`, packed
and scored the same way) and sampled continuations of a few prompts. Writes
`<output-dir>/<preset>/<version>/`: the TF Serving SavedModel (`prompt`
string in, `completion` and `text` out; greedy by default, `generate_sample`
with a `seed`), `model.keras` (the
`CausalLM` with its preprocessor: `kformer.models.load(dir).generate(["The
movie was"])`), `config.json` and `metrics.json`, plus the training logs.

`--num-experts N` (or `--preset gpt_moe_tiny`) makes every `--moe-every`-th
feed-forward a top-`--top-k` mixture of N experts, each `intermediate_dim //
top_k` wide unless the preset says otherwise (the dense model's FLOPs per
token). The training log then has `moe_balancing_loss` (1 = balanced),
`moe_dropped_tokens` and `moe_dropped_fraction` (token choices over
capacity), and the version folder `expert_load.png`: each expert layer's load
on the last training batch (a collapsed router is one tall bar). The folder
is named `<preset>_<N>experts` when `--num-experts` changes the preset.
"""

import math
import time

import keras
import numpy as np

from kformer import models, viz
from kformer.data import lm
from kformer.data.preprocessors import CausalLMPreprocessor
from recipes import common, prepared

LIMITS = ["A tiny language model of movie reviews: fluent-looking but often meaningless text.",
          "It repeats what reviews say, biases included; do not use it for anything that matters.",
          "The context is --sequence-length tokens; prompts are cut to fit before generating."]
PROMPTS = ["The movie was", "I watched this film because", "The acting in this", "My favorite scene"]
OOD_SENTENCES = 500  # the English side of the bundled spa-eng test split (all its 500 pairs)
OOD = {"ood_tatoeba_english_perplexity":
       f"perplexity on the English side of the first {OOD_SENTENCES} bundled Tatoeba spa-eng test pairs "
       "(short everyday sentences, not reviews), packed and scored as the validation text; the WordPiece "
       "vocabulary learned on IMDB splits its unseen words into more pieces"}


def continuations(model, length, **options):
    """PROMPTS continued to `length` tokens, prompt included: a prompt longer than `length - 1` tokens keeps
    its first ones, for room to generate (`generate` of strings refuses such a prompt; these are fixed)."""
    preprocessor = model.preprocessor
    ids = preprocessor.prompt_ids(PROMPTS, max_tokens=max(1, length - 1))
    return preprocessor.detokenize(model.generate(ids, max_length=length, stop_token_ids=preprocessor.end_token_id,
                                                  **options))


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="causal_lm", preset="gpt_tiny", epochs=3,
                           batch_size=32, learning_rate=1e-3)
    p.add_argument("--vocabulary-size", type=common.VOCABULARY_SIZE, default=8000)
    p.add_argument("--sequence-length", type=common.positive_int, default=128)
    p.add_argument("--num-experts", type=common.bounded(int, 0), default=None,
                   help="experts in every --moe-every-th feed-forward (0: dense; default: the preset's)")
    p.add_argument("--top-k", type=common.positive_int, default=None, help="experts per token (default 2)")
    p.add_argument("--moe-every", type=common.positive_int, default=None, help="default 2: every other block")
    p.add_argument("--capacity-factor", type=common.positive_float, default=None,
                   help="expert capacity over an even split (default 1.25)")
    p.add_argument("--sample-length", type=common.positive_int, default=40,
                   help="tokens (prompt included) of each sampled continuation in metrics.json")
    args = common.parse_args(p, argv)
    limit = models.get_preset(args.preset)["sequence_length"]
    if args.sequence_length > limit or args.sequence_length < 2:
        p.error(f"--sequence-length must be in [2, {limit}] for --preset {args.preset}, "
                f"got {args.sequence_length}")
    if args.sample_length > args.sequence_length:
        p.error(f"--sample-length must be at most --sequence-length={args.sequence_length}, "
                f"got {args.sample_length}")
    experts = expert_overrides(args)
    if experts.get("num_experts") and experts.get("top_k", 2) > experts["num_experts"]:
        p.error(f"--top-k must be at most --num-experts={experts['num_experts']}, got {experts['top_k']}")
    if not experts.get("num_experts") and any(
            getattr(args, flag) is not None for flag in ("top_k", "moe_every", "capacity_factor")):
        p.error(f"--top-k, --moe-every and --capacity-factor need experts (--num-experts > 0 or a preset with "
                f"experts); --preset {args.preset} has none")
    return args


def expert_overrides(args):
    """The preset's mixture-of-experts settings replaced by the flags (`{}` for a dense run)."""
    preset = models.get_preset(args.preset)
    flags = {"num_experts": args.num_experts, "top_k": args.top_k, "moe_every": args.moe_every,
             "capacity_factor": args.capacity_factor}
    overrides = {key: value for key, value in flags.items() if value is not None}
    if overrides.get("num_experts", preset.get("num_experts", 0)) and "expert_intermediate_dim" not in preset:
        top_k = overrides.get("top_k", preset.get("top_k", 2))  # the dense feed-forward's FLOPs per token
        overrides["expert_intermediate_dim"] = max(1, preset["intermediate_dim"] // top_k)
    return overrides


def run_name(args):
    """The preset's name, or `<preset>_<N>experts` when `--num-experts` changes its experts."""
    if args.num_experts is None or args.num_experts == models.get_preset(args.preset).get("num_experts", 0):
        return args.preset
    return f"{args.preset}_{args.num_experts}experts"


def tatoeba_english(count=OOD_SENTENCES):
    """The English sentences of the first `count` bundled Tatoeba spa-eng test pairs (out-of-domain text)."""
    from kformer.data import translation

    sources, _ = translation.load_split("test", "spa-eng", max_examples=count)  # English -> Spanish
    return sources


def split_reviews(texts, seed, validation_fraction=0.05):
    """(train, validation) lists of reviews: a seeded, fixed share held out."""
    order = np.random.default_rng(seed).permutation(len(texts))
    held = max(1, int(len(texts) * validation_fraction))
    return [texts[i] for i in order[held:]], [texts[i] for i in order[:held]]


def expert_metrics(model, history):
    """The last epoch's `moe_*` means (balancing loss, dropped token choices) from `history`."""
    if not model.experts:
        return {}
    return {key: float(values[-1]) for key, values in history.history.items() if key.startswith("moe_")}


@common.entry_point
def main(argv=None):
    args = parse_args(argv)
    scope = common.setup(args)
    from kformer.data import imdb

    try:
        texts, _ = imdb.load_split("unsup", args.data_dir, args.max_examples)
    except ValueError as err:
        common.fail(err)
    train_texts, val_texts = split_reviews(texts, args.seed)
    name = run_name(args)
    work_dir = common.training_dir(args, name)
    tokenizer = common.learn_or_load_tokenizer(args, name, work_dir / "vocabulary.txt", train_texts)
    preprocessor = CausalLMPreprocessor(tokenizer, args.sequence_length)
    cache, verbose = prepared.cache_dir(args.output_dir, name), common.progress_verbosity(args)
    try:
        train_ds = lm.windows_dataset(prepared.lm_windows(cache, train_texts, preprocessor, verbose),
                                      args.batch_size, shuffle=True, seed=args.seed)
        val_ds = lm.windows_dataset(prepared.lm_windows(cache, val_texts, preprocessor, verbose), args.batch_size)
    except ValueError as err:  # too little text for one window
        common.fail(err)
    steps = int(train_ds.cardinality()) * args.epochs

    overrides = {"vocabulary_size": tokenizer.vocabulary_size, **expert_overrides(args)}
    config = {"preset": args.preset, **models.get_preset(args.preset), **overrides,
              "training_sequence_length": args.sequence_length}
    with scope:
        model = models.build(args.preset, preprocessor=preprocessor, **overrides)
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=max(1, steps - steps // 10), warmup_target=args.learning_rate,
            warmup_steps=steps // 10, alpha=0.1)  # linear warmup, cosine decay to 10 %
        model.compile(common.accumulated(args, keras.optimizers.AdamW(schedule, weight_decay=0.1, beta_2=0.95,
                                                                     clipnorm=1.0)),
                      models.SparseCrossEntropy(),  # Keras's numbers, no one-hot or argmax over 8,000 on JAX
                      metrics=[models.SparseAccuracy()], jit_compile=args.jit_compile)
    start = time.time()
    history = common.fit(model, train_ds, val_ds, args, args.epochs, work_dir, "val_loss")
    common.quantize(args, model)
    train_seconds = time.time() - start
    val_loss, val_accuracy = model.evaluate(val_ds, verbose=0)
    ood_windows = lm.packed_windows(preprocessor, tatoeba_english())  # as the validation windows, not cached
    ood_loss, _ = model.evaluate(lm.windows_dataset(ood_windows, args.batch_size), verbose=0)
    greedy = continuations(model, args.sample_length)  # one batch: one compiled loop
    sampled = continuations(model, args.sample_length, sampler=models.TopPSampler(p=0.9), seed=args.seed)
    samples = [{"prompt": p, "greedy": g, "top_p": s} for p, g, s in zip(PROMPTS, greedy, sampled)]
    metrics = {
        "validation_perplexity": round(math.exp(val_loss), 2), "validation_loss": float(val_loss),
        "validation_token_accuracy": float(val_accuracy),
        "ood_tatoeba_english_perplexity": round(math.exp(ood_loss), 2), "train_reviews": len(train_texts),
        "validation_reviews": len(val_texts), "train_batches_per_epoch": int(train_ds.cardinality()),
        "epochs": args.epochs, "train_seconds": round(train_seconds, 1),
        "backend": keras.backend.backend(), "samples": samples,
    }
    metrics.update(expert_metrics(model, history))

    card = dict(recipe="train_gpt", dataset="IMDB unlabeled reviews", limits=LIMITS, ood=OOD)
    run_dir = common.finish(args, name, work_dir, common.version_writer(
        model, args, name=name, config=config, metrics=metrics, card=card,
        export_options={"generation": model.generation_config.replace(max_length=args.sample_length)}, log=work_dir / "training_log.csv",
        attention=lambda: viz.plot_attention(model, [greedy[0]], layer=-1),
        expert_load=(lambda: viz.plot_expert_load(model)) if model.experts else None))
    print(f"validation perplexity: {metrics['validation_perplexity']} on {len(val_texts)} reviews; "
          f"{metrics['ood_tatoeba_english_perplexity']} on {OOD_SENTENCES} Tatoeba English sentences "
          f"({ood_windows.size} tokens)")
    if model.experts:
        print(f"experts: balancing loss {metrics['moe_balancing_loss']:.3f} (1 = balanced), "
              f"{100 * metrics['moe_dropped_fraction']:.2f} % of token choices dropped over capacity "
              f"in the last epoch; per-expert load in expert_load.png")
    for sample in samples:
        print(f"  {sample['prompt']!r} -> {sample['top_p']!r}")
    print(f"saved: {run_dir}" + ("" if args.no_export else " (TF Serving SavedModel + model.keras)"))
    return run_dir


if __name__ == "__main__":
    main()
