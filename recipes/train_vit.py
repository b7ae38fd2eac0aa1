"""Train a Vision Transformer on CIFAR-10 or MNIST, evaluate top-1/top-5, save and export it.

    python -m recipes.train_vit                                   # MNIST, bundled sample
    python -m recipes.train_vit --dataset cifar10                 # vit_hybrid_cifar
    python -m recipes.train_vit --dataset cifar10 --data-dir DATA --epochs 24 --patience 6  # 79.9 %, 22 min
    python -m recipes.train_vit --dataset cifar10 --preset vit_small_cifar --tfds  # TFDS (online)
    python -m recipes.train_vit --epochs 1 --max-examples 256      # quick smoke run
    python -m recipes.train_vit --from-pretrained hf://google/vit-base-patch16-224 --epochs 2  # fine-tune

The preset defaults to `vit_tiny` on MNIST and `vit_hybrid_cifar` on CIFAR-10
(a hybrid ViT: three stride-2 convolutions, the stem of Xiao et al. 2021, to a
4x4 map whose cells are the tokens, as the hybrid of Dosovitskiy et al. 2021).

Training uses AdamW with warmup + cosine decay and random shifts (plus flips
on CIFAR-10). Besides the test split's top-1/top-5 it reports the top-1 on the
same test images under four seeded shifts (`SHIFTS`, `kformer.data.shifts`:
moved, turned, noisy, low contrast) as `ood_shift_*_accuracy`. Writes
`<output-dir>/<preset>_<dataset>/<version>/`: the TF Serving SavedModel
(`image_bytes` JPEG/PNG or `images` uint8 in; `label`, `label_id`,
`probabilities` out), `model.keras`, `config.json`, `metrics.json`, training logs.

`--from-pretrained SOURCE` fine-tunes a ViT image classifier checkpoint instead (a Hugging Face
folder or an `hf://org/name` handle): a new head for the data set's classes (unless it has as
many), images resized to the checkpoint's `image_size` and grayscale made RGB as its
preprocessor does, learning rate 3e-5 unless `--learning-rate` is given. It writes
`<output-dir>/<checkpoint name>_<dataset>/<version>/`.
"""

import time

import keras

from kformer import models, viz
from kformer.data import images, shifts
from kformer.data.augmentation import augmentation
from recipes import common

DEFAULT_PRESETS = {"mnist": "vit_tiny", "cifar10": "vit_hybrid_cifar"}
LIMITS = ["Trained from scratch on small images (MNIST 28x28 or CIFAR-10 32x32); other images are resized "
          "to that size and are out of domain.",
          "ViTs need much data; without pretraining, accuracy stays below a CNN of the same cost."]
SHIFT_SEED = 0  # the shifted test images are the same whatever --seed
SHIFTS = {  # metrics.json key: (shift of the uint8 test images, what the model card says it changed)
    "ood_shift_translate_accuracy": (
        lambda x: shifts.translate(x, pixels=3, seed=SHIFT_SEED),
        "top-1 on the test images moved 3 px up or down and 3 px left or right (seeded directions), black "
        "fill; training shifts by up to 2 px (MNIST) or 4 px (CIFAR-10)"),
    "ood_shift_rotate_accuracy": (
        lambda x: shifts.rotate(x, degrees=15, seed=SHIFT_SEED),
        "top-1 on the test images turned 15 degrees (seeded direction) about the centre, bilinear, black corners"),
    "ood_shift_noise_accuracy": (
        lambda x: shifts.gaussian_noise(x, std=0.1, seed=SHIFT_SEED),
        "top-1 on the test images plus seeded Gaussian noise of standard deviation 25.5 grey levels "
        "(0.1 of the range), clipped to 0..255"),
    "ood_shift_contrast_accuracy": (
        lambda x: shifts.reduce_contrast(x, factor=0.5),
        "top-1 on the test images with contrast halved (every pixel pulled halfway to its image's "
        "per-channel mean)"),
}


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="vit", preset=None, epochs=5, batch_size=128,
                           learning_rate=1e-3, tfds=True, pretrained=("ViT image classifier", 3e-5))
    p.add_argument("--dataset", choices=images.DATASETS, default="mnist")
    p.add_argument("--weight-decay", type=common.bounded(float, 0.0, 1.0), default=0.05)
    args = common.parse_args(p, argv, default_preset=lambda a: DEFAULT_PRESETS[a.dataset])
    if args.from_pretrained is not None:
        return args
    shape = images.IMAGE_SHAPES[args.dataset]
    preset = models.get_preset(args.preset)
    if (preset["image_size"], preset["image_size"], preset["channels"]) != shape:
        p.error(f"--preset {args.preset} takes {preset['image_size']}x{preset['image_size']}x"
                f"{preset['channels']} images but --dataset {args.dataset} has {shape}; "
                "use vit_tiny for mnist and vit_hybrid_cifar, vit_conv_stem_cifar or vit_small_cifar for cifar10")
    return args


def compile_model(model, args, train_examples, jit_compile=None):
    """The recipe's AdamW (`--weight-decay`, warmup + cosine decay over `--epochs`), loss and
    top-1 / top-5 metrics; `jit_compile` defaults to `--jit-compile`."""
    steps = args.epochs * -(-train_examples // args.batch_size)
    model.compile(common.accumulated(args, models.adamw(args.learning_rate, steps, weight_decay=args.weight_decay)),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                           keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")],
                  jit_compile=args.jit_compile if jit_compile is None else jit_compile)


def pretrained_vit(args, class_names):
    """`--from-pretrained`: the checkpoint as a `ViTImageClassifier` for `class_names` (a new head unless
    it has as many classes) with its preprocessor, and the run's config."""
    model, checkpoint = common.load_pretrained(args.from_pretrained, num_classes=len(class_names),
                                               class_names=class_names)
    if type(model).__name__ != "ViTImageClassifier":
        common.fail(f"--from-pretrained {args.from_pretrained} is a {checkpoint.get('model_type')!r} checkpoint; "
                    "this recipe fine-tunes a ViT image classifier")
    new_head = len(class_names) != len(checkpoint.get("id2label") or {"0": 0, "1": 1})
    config = {"from_pretrained": args.from_pretrained, "model_type": "vit", "new_head": new_head,
              **{k: checkpoint.get(k) for k in ("image_size", "patch_size", "hidden_size", "num_hidden_layers",
                                                "num_attention_heads")},
              "channels": 3, "class_names": class_names, "dataset": args.dataset,
              **({"lora_rank": args.lora_rank, "lora_targets": list(args.lora_targets)} if args.lora_rank else {})}
    common.lora(args, model)
    return model, config


def _resized(ds, resize):
    """`ds` with its images passed through `resize` (the checkpoint preprocessor's `inputs`), if any."""
    if resize is None:
        return ds
    from kformer.data.pipeline import without_autograph

    return ds.map(without_autograph(lambda x, *rest: (resize(x), *rest)), num_parallel_calls=-1)  # AUTOTUNE


def shifted_accuracies(model, preprocessor, test_x, test_y, batch_size, resize=None):
    """{`SHIFTS` key: top-1 accuracy of `model` on `test_x` under that shift}, batched as the test split."""
    accuracies = {}
    for key, (shift, _) in SHIFTS.items():
        ds = _resized(preprocessor.dataset(shift(test_x), test_y, batch_size=batch_size), resize)
        accuracies[key] = float(model.evaluate(ds, verbose=0)[1])
    return accuracies


@common.entry_point
def main(argv=None):
    from kformer.data.preprocessors import ImageClassifierPreprocessor  # TensorFlow: not needed to parse flags

    args = parse_args(argv)
    scope = common.setup(args)
    try:
        if args.tfds:
            x, y = images.load_split_tfds("train", args.dataset, args.max_examples)
            test_x, test_y = images.load_split_tfds("test", args.dataset, args.max_examples)
        else:
            x, y = images.load_split("train", args.dataset, args.data_dir, args.max_examples)
            test_x, test_y = images.load_split("test", args.dataset, args.data_dir, args.max_examples)
    except ValueError as err:
        common.fail(err)
    class_names = list(images.CLASS_NAMES[args.dataset])
    cut = len(y) - max(1, len(y) // 10)  # rows are class-interleaved, so the tail is balanced
    if args.from_pretrained is None:
        name = f"{args.preset}_{args.dataset}"
        work_dir = common.training_dir(args, name)
        preset = models.get_preset(args.preset)
        preprocessor = ImageClassifierPreprocessor(preset["image_size"], preset["channels"])
        config = {"preset": args.preset, **preset, "class_names": class_names, "dataset": args.dataset}
        with scope:
            model = models.build(args.preset, class_names=class_names, preprocessor=preprocessor)
        resize = None
    else:
        name = f"{common.pretrained_name(args.from_pretrained)}_{args.dataset}"
        work_dir = common.training_dir(args, name)
        with scope:
            model, config = pretrained_vit(args, class_names)
        size, _, channels = images.IMAGE_SHAPES[args.dataset]
        preprocessor = ImageClassifierPreprocessor(size, channels)  # cached at the data's size ...
        resize = model.preprocessor.inputs  # ... then resized (and made RGB) batch by batch, as served
    train_ds = _resized(preprocessor.dataset(x[:cut], y[:cut], batch_size=args.batch_size, shuffle=True,
                                             seed=args.seed,
                                             augment=augmentation(args.dataset, seed=args.seed)), resize)
    val_ds = _resized(preprocessor.dataset(x[cut:], y[cut:], batch_size=args.batch_size), resize)
    test_ds = _resized(preprocessor.dataset(test_x, test_y, batch_size=args.batch_size), resize)
    with scope:
        compile_model(model, args, cut)
    start = time.time()
    common.fit(model, train_ds, val_ds, args, args.epochs, work_dir, "val_accuracy")
    common.quantize(args, model)
    train_seconds = time.time() - start
    _, top1, top5 = model.evaluate(test_ds, verbose=0)
    shifted = shifted_accuracies(model, preprocessor, test_x, test_y, args.batch_size, resize)
    metrics = {"test_top1": float(top1), "test_top5": float(top5), **shifted, "test_examples": len(test_y),
               "train_examples": cut, "epochs": args.epochs, "train_seconds": round(train_seconds, 1),
               "backend": keras.backend.backend(),
               **({"learning_rate": args.learning_rate, "from_pretrained": args.from_pretrained}
                  if args.from_pretrained else {})}

    limits = LIMITS if args.from_pretrained is None else [
        f"Fine-tuned from {args.from_pretrained}: {args.dataset} images are resized to its "
        f"{model.image_size}x{model.image_size} RGB input; its pretraining data and biases carry over."]
    card = dict(recipe="train_vit", dataset=args.dataset, limits=limits,
                ood={key: description for key, (_, description) in SHIFTS.items()})
    run_dir = common.finish(args, name, work_dir, common.version_writer(
        model, args, name=name, config=config, metrics=metrics, card=card, log=work_dir / "training_log.csv",
        attention=lambda: viz.plot_patch_attention(model, test_x[0])))
    print(f"test top-1: {top1:.4f}, top-5: {top5:.4f} on {len(test_y)} {args.dataset} images")
    print("shifted test images, top-1: " + ", ".join(
        f"{key.removeprefix('ood_shift_').removesuffix('_accuracy')} {value:.4f}" for key, value in shifted.items()))
    print(f"saved: {run_dir}")
    return run_dir


if __name__ == "__main__":
    main()
