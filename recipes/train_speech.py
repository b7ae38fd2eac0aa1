"""Train a Conformer CTC recognizer of spoken digit strings (FSDD), evaluate, save and export it.

    python -m recipes.train_speech --data-dir /path/holding/fsdd        # the full FSDD (3,000 recordings)
    python -m recipes.train_speech                                      # the bundled 60-recording sample
    python -m recipes.train_speech --tfds                               # TFDS spoken_digit (online)
    python -m recipes.train_speech --epochs 1 --max-examples 64         # quick smoke run
    kformer train speech --data-dir DATA                                # the same, through the CLI
    python -m recipes.train_speech --from-pretrained hf://openai/whisper-tiny   # fine-tune Whisper

Utterances of 1-7 digits are built by joining recordings of one speaker
with short seeded silences (`kformer.data.spoken_digits`): training ones
from the official training recordings (indices 5-49, less a seeded 10 %
kept for validation), their leading and trailing silences 0-0.3 s, so some
start or end right at the speech; test ones only from the official test
recordings (indices 0-4), each used `--test-passes` times. The model is a
`SpeechRecognizer` (Conformer encoder + CTC head over the digits) on 40
log-mel features (`AudioPreprocessor`, SpecAugment on training batches,
which hold recordings of similar length), trained with the CTC loss and
AdamW, gradients clipped to a global norm of `--clip-norm`, the learning
rate warming up and then decaying to 0 over `--epochs` (early stopping
waits as long). It reports the digit error rate (edit distance /
reference digits) and the utterance accuracy on the test utterances,
as `ood_isolated_*` on the official test recordings one by one, as
published (one digit, trimmed, no silence added), and, as `ood_speaker_*`,
on utterances of one speaker (`--ood-speaker`) from a second model trained
without that speaker.

`--from-pretrained SOURCE` fine-tunes a Whisper checkpoint instead (a Hugging Face folder or an
`hf://` handle; `models.from_pretrained`): each utterance's transcript is its digits as English words
("four zero seven"), after the checkpoint's English transcription prompt, with its cross-entropy
(transformers' fine-tuning loss) at `--learning-rate` (default 1e-5); its transcripts are scored as
the digits they name (digit words or numerals, anything else dropped). `--lora-rank R` trains
adapters only. The figures are the training curves (the spectrogram and attention figures are the
CTC model's).

Writes `<output-dir>/<preset>_fsdd/<version>/` (`<checkpoint>_fsdd` with `--from-pretrained`): the TF Serving SavedModel
(`speech_to_text`: WAV bytes in, `transcript` out), `model.keras`,
`config.json`, `metrics.json`, the model card, curves, attention and
spectrogram figures and the training logs.
"""

import re
import time

import keras
import numpy as np

from kformer import models
from recipes import common, model_card, plots

RATE_LIMIT = "Audio is resampled to 8 kHz: content above 4 kHz is discarded."
WHISPER_RATE_LIMIT = ("FSDD is recorded at 8 kHz and resampled to Whisper's 16 kHz: the checkpoint hears nothing above "
                      "4 kHz, unlike the audio it was trained on.")
LIMITS = ["Digits 0-9 only, from 6 adult male speakers reading in quiet rooms (FSDD); other words, voices, "
          "noise or far-field audio are out of domain.",
          "Utterances are isolated recordings joined with short silences, not continuous speech: real digit "
          "strings run words together (co-articulation) and will score worse.",
          RATE_LIMIT,
          "A single digit recorded with no silence around it is harder for the model than the digit strings "
          "it is scored on: see the ood_isolated figures."]
SPECTROGRAM = "spectrogram.png"
TRAIN_EDGE_SECONDS = (0.0, 0.3)  # leading / trailing silence of training utterances: some start right at speech


def parse_args(argv=None):
    p = common.make_parser(__doc__, builder="speech_recognizer", preset="conformer_speech_tiny", epochs=14,
                           batch_size=32, learning_rate=2e-3, tfds=True, pretrained=("Whisper", 1e-5))
    p.set_defaults(patience=14)  # the cosine schedule runs to 0: stop early only after that many bad epochs
    p.add_argument("--train-utterances", type=common.positive_int, default=3000,
                   help="training utterances built per run (each of 1-7 digits)")
    p.add_argument("--test-passes", type=common.positive_int, default=3,
                   help="times each test recording is used in the test utterances")
    p.add_argument("--ood-speaker", default="theo",
                   help="speaker held out of a second model's training, its utterances the ood_speaker_* "
                        "figures; 'none' to skip that second training")
    p.add_argument("--weight-decay", type=common.bounded(float, 0.0, 1.0), default=0.01)
    p.add_argument("--clip-norm", type=common.bounded(float, 0.0, 1e6), default=1.0,
                   help="clip the gradients' global norm to this (0: off); without it the CTC loss sits "
                        "several epochs on its all-blank plateau")
    args = common.parse_args(p, argv)
    args.ood_speaker = None if args.ood_speaker.lower() == "none" else args.ood_speaker
    return args


def load(args, split, exclude_speakers=(), speakers=None):
    from kformer.data import spoken_digits

    try:
        if args.tfds:
            return spoken_digits.load_recordings_tfds(split, speakers=speakers, exclude_speakers=exclude_speakers)
        return spoken_digits.load_recordings(split, args.data_dir, speakers=speakers,
                                             exclude_speakers=exclude_speakers)
    except ValueError as err:
        common.fail(err)


def split_validation(recordings, seed):
    """Hold out a seeded 10 % (at least one) of the training recordings for validation utterances."""
    order = np.random.default_rng(seed).permutation(len(recordings))
    cut = max(1, len(recordings) // 10)
    return [recordings[i] for i in sorted(order[cut:])], [recordings[i] for i in sorted(order[:cut])]


def utterances(args, recordings, seed, count=None, passes=None, edge_seconds=None):
    from kformer.data import spoken_digits

    audio, texts = spoken_digits.make_utterances(recordings, count=count, passes=passes, seed=seed,
                                                 edge_seconds=edge_seconds)
    limit = args.max_examples or len(texts)
    return audio[:limit], texts[:limit]


def training_utterances(args, train_recordings, val_recordings):
    """`(train, validation)` utterances, each `(audio, transcripts)`, with `TRAIN_EDGE_SECONDS` edges: the
    recognizer's and the held-out-speaker model's training data are built the same way."""
    return (utterances(args, train_recordings, args.seed, count=args.train_utterances,
                       edge_seconds=TRAIN_EDGE_SECONDS),
            utterances(args, val_recordings, args.seed + 1, passes=1, edge_seconds=TRAIN_EDGE_SECONDS))


def splits(args):
    """`((train, validation, test) recordings, (train, validation, test) utterances)`, each utterance split
    `(audio, transcripts)`: the recipe's data (`benchmarks/quality_vs_anchor.py` trains its anchor on the same)."""
    train_recordings, val_recordings = split_validation(load(args, "train"), args.seed)
    test_recordings = load(args, "test")
    train_data, val_data = training_utterances(args, train_recordings, val_recordings)
    test_data = utterances(args, test_recordings, 0, passes=args.test_passes)  # the same whatever --seed
    return (train_recordings, val_recordings, test_recordings), (train_data, val_data, test_data)


def edit_distance(reference, hypothesis):
    """Levenshtein distance between two strings (substitutions, insertions, deletions)."""
    row = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1]


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SPOKEN = {**{word: str(i) for i, word in enumerate(DIGIT_WORDS)}, "oh": "0"}


def as_words(digits):
    """A digit string -> the transcript a Whisper checkpoint is fine-tuned on: `"407"` -> `"four zero seven"`."""
    return " ".join(DIGIT_WORDS[int(d)] for d in digits)


def as_digits(text):
    """A transcript -> the digits it names (digit words, "oh", numerals; anything else dropped)."""
    return "".join(SPOKEN.get(token, token if token.isdigit() else "")
                   for token in re.findall(r"[a-z]+|[0-9]", text.lower()))


def scores(model, audio, texts, prefix):
    """`{prefix}digit_error_rate`, `{prefix}utterance_accuracy` of `model.transcribe` on `(audio, texts)`."""
    hypotheses = transcribe_sorted(model, audio)
    errors = sum(edit_distance(r, h) for r, h in zip(texts, hypotheses))
    return {f"{prefix}digit_error_rate": errors / sum(len(t) for t in texts),
            f"{prefix}utterance_accuracy": float(np.mean([r == h for r, h in zip(texts, hypotheses)]))}, hypotheses


def transcribe_sorted(model, audio, batch_size=32):
    """`model.transcribe(audio)` with recordings of similar length batched together (less padding)."""
    order = np.argsort([len(a) for a in audio])
    out = [None] * len(audio)
    from kformer.data.spoken_digits import SAMPLE_RATE

    whisper = isinstance(model, models.SpeechToText)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        if whisper:  # 8 kHz recordings, resampled by its preprocessor; the digits its words name
            texts = [as_digits(t) for t in model.transcribe([(audio[i], SAMPLE_RATE) for i in rows], language="en",
                                                            batch_size=batch_size)]
        else:
            texts = model.transcribe([audio[i] for i in rows], batch_size=batch_size)
        for i, text in zip(rows, texts):
            out[i] = text
    return out


def train(args, name, work_dir, train_data, val_data, scope):
    """Build (or load, `--from-pretrained`), compile and fit a recognizer; returns `(model, seconds)`."""
    if args.from_pretrained is not None:
        return fine_tune(args, work_dir, train_data, val_data, scope)
    from kformer.data.preprocessors import AudioPreprocessor

    preset = models.get_preset(args.preset)
    with scope:
        model = models.build(args.preset, preprocessor=AudioPreprocessor(num_mel_bins=preset["num_features"]))
    preprocessor = model.preprocessor
    train_ds = preprocessor.dataset(train_data[0], model.encode_transcripts(train_data[1]),
                                    batch_size=args.batch_size, shuffle=True, seed=args.seed, augment=True)
    val_ds = preprocessor.dataset(val_data[0], model.encode_transcripts(val_data[1]), batch_size=args.batch_size)
    return compile_and_fit(args, model, train_ds, val_ds, len(train_data[1]), work_dir, scope)


def compile_and_fit(args, model, train_ds, val_ds, examples, work_dir, scope, loss=None):
    """AdamW over `--epochs` of `examples` (the recognizer's own CTC loss, or `loss`), fit, `--quantize`;
    returns `(model, seconds)`."""
    steps = args.epochs * -(-examples // args.batch_size)
    with scope:
        model.compile(common.accumulated(args, models.adamw(args.learning_rate, steps, weight_decay=args.weight_decay,
                                                            global_clipnorm=args.clip_norm or None)),
                      loss, jit_compile=args.jit_compile)
    start = time.time()
    common.fit(model, train_ds, val_ds, args, args.epochs, work_dir, "val_loss")
    common.quantize(args, model)
    return model, time.time() - start


def fine_tune(args, work_dir, train_data, val_data, scope):
    """`--from-pretrained`: the Whisper checkpoint fine-tuned on the utterances' digit words; `(model, seconds)`."""
    from kformer.data.spoken_digits import SAMPLE_RATE
    from kformer.training.losses import SparseCrossEntropy

    with scope:
        model, checkpoint = common.load_pretrained(args.from_pretrained)
    if checkpoint.get("model_type") != "whisper" or model.preprocessor is None:
        common.fail(f"--from-pretrained {args.from_pretrained} is a {checkpoint.get('model_type')!r} checkpoint"
                    f"{' without a tokenizer' if model.preprocessor is None else ''}; the speech recipe fine-tunes "
                    "Whisper checkpoints with their tokenizer")
    if args.lora_rank:
        model.enable_lora(args.lora_rank, target_names=args.lora_targets)

    def data(split, shuffle):
        audio, digits = split
        return model.preprocessor.dataset([(a, SAMPLE_RATE) for a in audio], [as_words(d) for d in digits],
                                          batch_size=args.batch_size, shuffle=shuffle, seed=args.seed, language="en")
    return compile_and_fit(args, model, data(train_data, True), data(val_data, False), len(train_data[1]), work_dir,
                           scope, loss=SparseCrossEntropy(reduction="mean_with_sample_weight"))


def plot_spectrogram(model, audio, transcript):
    """Log-mel features of one test utterance with the frames where the model emits each digit."""
    from kformer.viz._common import pyplot

    plt = pyplot()
    inputs = model.preprocessor.encode([audio])
    logits = model.predict_on_batch(inputs)
    ids = keras.ops.convert_to_numpy(model.decode_ids(logits, inputs["padding_mask"]))[0]
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.imshow(inputs["features"][0].T, origin="lower", aspect="auto", cmap="magma")
    for frame in np.nonzero(ids)[0]:
        x = frame * 4 + 3  # a subsampled frame sees input frames 4t .. 4t + 6
        ax.axvline(x, color="cyan", linewidth=1)
        ax.text(x, inputs["features"].shape[2] - 3, model.vocabulary[ids[frame] - 1], color="cyan", fontsize=12)
    ax.set(xlabel="frame (10 ms)", ylabel="mel bin",
           title=f"log-mel features of a test utterance: reference {transcript}, emitted digits in cyan")
    fig.tight_layout()
    return fig


def plot_attention(model, audio):
    """Self-attention of the first Conformer block on one test utterance, one panel per head."""
    from kformer.viz._common import pyplot

    plt = pyplot()
    inputs = model.preprocessor.encode([audio])
    probabilities = keras.ops.convert_to_numpy(model.attention_probabilities(inputs))[0]
    frames = int(keras.ops.convert_to_numpy(model.output_padding_mask(inputs["padding_mask"]))[0].sum())
    heads = probabilities.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(3.2 * heads, 3.8), squeeze=False, layout="constrained")
    for head, ax in enumerate(axes[0]):
        ax.imshow(probabilities[head, :frames, :frames], cmap="viridis")
        ax.set(title=f"head {head}", xlabel="key frame (40 ms)", ylabel="query frame" if head == 0 else None)
    fig.suptitle("Conformer block 0 self-attention on a test utterance")  # constrained layout leaves it room
    return fig


def version_writer(model, args, *, name, config, metrics, card, log, example):
    """`common.version_writer`'s files plus `spectrogram.png` (shown on the model card)."""
    def write(tmp_dir):
        if not args.no_export:
            from kformer import export

            export.save_for_serving(model, tmp_dir, model_name=name)
        model.save(tmp_dir / "model.keras")
        common.write_json(tmp_dir / "config.json", config)
        common.write_json(tmp_dir / "metrics.json", metrics)
        figures = {}
        ctc = not isinstance(model, models.SpeechToText)  # the spectrogram and attention figures read CTC outputs
        if not args.no_plots:
            figures = plots.write(tmp_dir, log=log, attention=(lambda: plot_attention(model, example[0])) if ctc
                                  else None)
            if ctc and _has_matplotlib() and plots._save(lambda: plot_spectrogram(model, *example),
                                                         tmp_dir / SPECTROGRAM):
                figures[SPECTROGRAM] = "log-mel features of a test utterance and where each digit is emitted"
        model_card.write_for_run(tmp_dir, model=model, name=name, args=args, config=config, metrics=metrics,
                                 figures=figures, **card)
    return write


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@common.entry_point
def main(argv=None):
    args = parse_args(argv)
    scope = common.setup(args)
    source = args.from_pretrained
    name = f"{common.pretrained_name(source) if source else args.preset}_fsdd"
    work_dir = common.training_dir(args, name)
    (train_recordings, val_recordings, test_recordings), (train_data, val_data, test_data) = splits(args)
    print(f"utterances: {len(train_data[1])} train, {len(val_data[1])} validation, {len(test_data[1])} test "
          f"({sum(map(len, test_data[1]))} digits)", flush=True)
    model, seconds = train(args, name, work_dir, train_data, val_data, scope)
    metrics, hypotheses = scores(model, *test_data, "test_")
    metrics.update({"test_examples": len(test_data[1]), "test_digit_examples": sum(map(len, test_data[1])),
                    "train_examples": len(train_data[1]), "validation_examples": len(val_data[1]),
                    "epochs": args.epochs, "train_seconds": round(seconds, 1), "backend": keras.backend.backend(),
                    **({"learning_rate": args.learning_rate, "from_pretrained": source} if source else {})})
    isolated = test_recordings[:args.max_examples or None]  # one digit each, as published: no silence added
    isolated_scores, _ = scores(model, [r.waveform for r in isolated], [r.digit for r in isolated], "ood_isolated_")
    metrics.update({**isolated_scores, "isolated_examples": len(isolated)})
    what = "the official test recordings one by one, as published (one digit, trimmed, no silence added)"
    ood = {f"ood_isolated_{k}": what for k in ("digit_error_rate", "utterance_accuracy")}
    if args.ood_speaker:
        held_out = [r for r in train_recordings + val_recordings if r.speaker != args.ood_speaker]
        if len(held_out) == len(train_recordings) + len(val_recordings):
            common.fail(f"--ood-speaker {args.ood_speaker!r} has no recordings here; pass a speaker of the data "
                        "set or 'none'")
        ood_train, ood_val = split_validation(held_out, args.seed)
        ood_test = utterances(args, load(args, "all", speakers=[args.ood_speaker]), 0, passes=1)
        print(f"held-out speaker {args.ood_speaker}: training a second model without it", flush=True)
        ood_model, ood_seconds = train(args, name, work_dir / "held_out_speaker",
                                       *training_utterances(args, ood_train, ood_val), scope)
        ood_scores, _ = scores(ood_model, *ood_test, "ood_speaker_")
        metrics.update({**ood_scores, "held_out_speaker_examples": len(ood_test[1]),
                        "held_out_model_train_seconds": round(ood_seconds, 1)})
        what = (f"utterances of speaker {args.ood_speaker} (all of their recordings, each used once) from a "
                f"second model trained the same way without that speaker")
        ood.update({f"ood_speaker_{k}": what for k in ("digit_error_rate", "utterance_accuracy")})
    metrics["samples"] = [{"reference": r, "transcript": h} for r, h in list(zip(test_data[1], hypotheses))[:8]]
    if source:
        config = {"from_pretrained": source, "model_type": "whisper", "transcripts": "digits as English words",
                  "dataset": "fsdd", "ood_speaker": args.ood_speaker}
    else:
        config = {"preset": args.preset, **models.get_preset(args.preset), "vocabulary": model.vocabulary,
                  "preprocessor": model.preprocessor.get_config(), "dataset": "fsdd", "ood_speaker": args.ood_speaker}
    limits = [WHISPER_RATE_LIMIT if source and line == RATE_LIMIT else line for line in LIMITS]
    card = dict(recipe="train_speech", dataset="fsdd", limits=limits, ood=ood)
    example = (test_data[0][0], test_data[1][0])
    run_dir = common.finish(args, name, work_dir, version_writer(
        model, args, name=name, config=config, metrics=metrics, card=card, log=work_dir / "training_log.csv",
        example=example))
    print(f"test digit error rate {metrics['test_digit_error_rate']:.4f}, utterance accuracy "
          f"{metrics['test_utterance_accuracy']:.4f} on {len(test_data[1])} utterances")
    print(f"isolated test recordings (one digit, no silence added): digit error rate "
          f"{metrics['ood_isolated_digit_error_rate']:.4f}, accuracy {metrics['ood_isolated_utterance_accuracy']:.4f}")
    if args.ood_speaker:
        print(f"held-out speaker {args.ood_speaker}: digit error rate {metrics['ood_speaker_digit_error_rate']:.4f}, "
              f"utterance accuracy {metrics['ood_speaker_utterance_accuracy']:.4f}")
    print(f"saved: {run_dir}")
    return run_dir


if __name__ == "__main__":
    main()
