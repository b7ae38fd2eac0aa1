"""Model cards: `README.md` in every version folder, and `assets.extra/model_card.json` beside an export."""

import json
import platform
import shlex

import keras

# One example request per task type for TF Serving's REST API (the signature names are kformer.export's).
REQUESTS = {
    "text_classification": '{"instances": ["A wonderful, moving film."]}',
    "translation": '{"signature_name": "translate_beam", "instances": ["How are you?"]}',
    "fill_mask": '{"signature_name": "fill_mask", "instances": ["This movie was [MASK]."]}',
    "text_generation": '{"instances": ["The movie was"]}',
    "image_classification": '{"instances": [{"b64": "<base64 of a PNG or JPEG>"}]}',
    "speech_recognition": '{"signature_name": "speech_to_text", "instances": [{"b64": "<base64 of a WAV file>"}]}',
    "speech_to_text": '{"instances": [{"b64": "<base64 of a WAV file>"}]}',
}


COUNTS = ("_examples", "_reviews", "_pairs", "_sequences", "_texts", "_sources")
SETTINGS = ("epochs", "seconds", "steps", "schedule", "truncation", "ema", "objective", "dropout", "batch",
            "beams", "ngram", "max_length", "learning_rate", "augmentation")  # decoding settings too: not scores


OOD = "ood_"  # metrics.json keys of out-of-distribution figures start with this (or hold `_ood_`: val_ood_...)


def is_ood(key):
    """Whether the metrics.json `key` is an out-of-distribution figure: `ood_...` or `<split>_ood_...`."""
    return key.startswith(OOD) or f"_{OOD}" in key


def write_for_run(folder, *, model, name, recipe, args, config, metrics, dataset, limits, figures=None, ood=None):
    """A recipe's card from its flags and metrics.

    Numbers whose key starts with `ood_` (`is_ood`: or holds `_ood_`, as `val_ood_...`) become the
    out-of-distribution table, each with its line from `ood` ({`ood_...` key: what was changed};
    `val_ood_x` shares `ood_x`'s line, a key without one gets an empty cell). Of the rest, counts
    (int, a `COUNTS` ending) become the data table, training and decoding settings and times
    (`SETTINGS` in the key) the training table, other numbers the test metrics.
    """
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    shifted = {k: v for k, v in metrics.items() if is_ood(k) and number(v)}
    metrics = {k: v for k, v in metrics.items() if not is_ood(k)}
    ood = ood or {}
    counts = {k: v for k, v in metrics.items()  # test_unseen_sources (a count), not test_bleu_unseen_sources
              if k.endswith(COUNTS) and isinstance(v, int) and not isinstance(v, bool)}
    data = {"dataset": dataset, **counts}
    training = {k: v for k, v in metrics.items()
                if any(s in k for s in SETTINGS) and v is not None and not isinstance(v, bool)}
    scores = {k: v for k, v in metrics.items() if number(v) and k not in counts and k not in training}
    card = facts(model=model, name=name, recipe=recipe, argv=args._argv, config=config, data=data,
                 metrics=scores, training=training, limits=limits, figures=figures,
                 out_of_distribution={k: {"value": v, "description": ood.get(k, ood.get(k[k.find(OOD):], ""))}
                                      for k, v in shifted.items()})
    write(folder, card, exported=not args.no_export)


def facts(*, model, name, recipe, argv, config, data, metrics, training, limits, figures=None,
          out_of_distribution=None):
    """The card's facts as a JSON-ready dict.

    Args:
        model: the trained task. name: str, the model's base folder name.
        recipe: str, the recipe module. argv: list of str, its flags.
        config: dict, the build config. data: dict, data set and split sizes.
        metrics: dict, the test metrics. training: dict, training and decoding settings, seconds.
        limits: list of str, known limits.
        figures: {file name: caption} of the PNGs in the folder, or None.
        out_of_distribution: {`ood_` key: {"value": number, "description": what was changed}}, or None.
    """
    import tensorflow as tf

    return {
        "name": name, "task": type(model).__name__, "task_type": model.task_type,
        "preset": config.get("preset"), "from_pretrained": config.get("from_pretrained"),
        "parameters": int(model.count_params()),
        "config": config, "data": data, "metrics": metrics,
        "out_of_distribution": dict(out_of_distribution or {}), "training": training, "known_limits": limits,
        "figures": dict(figures or {}),
        "command": "python -m recipes." + " ".join([recipe, *map(shlex.quote, argv)]),
        "backend": keras.backend.backend(),
        "versions": {"python": platform.python_version(), "keras": keras.__version__,
                     "tensorflow": tf.__version__, "kformer": _kformer_version()},
    }


def write(folder, card, exported):
    """Write `folder/README.md`, and `folder/assets.extra/model_card.json` when `exported`."""
    (folder / "README.md").write_text(render(card, exported), encoding="utf-8")
    if exported:
        (folder / "assets.extra").mkdir(exist_ok=True)
        (folder / "assets.extra" / "model_card.json").write_text(json.dumps(card, indent=2) + "\n")


def render(card, exported):
    """The model card as Markdown."""
    rows = lambda d: "\n".join(f"| {k} | {_fmt(v)} |" for k, v in d.items())  # noqa: E731
    serve = (f"""TF Serving loads this folder's parent (`--model_base_path`), version by version:

```
docker run -p 8501:8501 -v "$PWD/{card['name']}:/models/{card['name']}" \\
    -e MODEL_NAME={card['name']} tensorflow/serving
curl -s -X POST localhost:8501/v1/models/{card['name']}:predict \\
    -d '{REQUESTS[card['task_type']]}'
```
""" if exported else "Not exported (`--no-export`): `kformer export` writes a SavedModel from `model.keras`.\n")
    limits = "\n".join(f"- {line}" for line in card["known_limits"])
    shifted = "\n".join(f"| {k} | {_fmt(v['value'])} | {_cell(v.get('description', ''))} |"
                         for k, v in (card.get("out_of_distribution") or {}).items())
    ood = "" if not shifted else f"""## Out of distribution

The same kind of score on inputs unlike the training data, one figure per change:

| metric | value | what was changed |
|---|---|---|
{shifted}

"""
    figures = "".join(f"![{caption}]({name})\n\n" for name, caption in card.get("figures", {}).items())
    source = card.get("from_pretrained")
    start = f"fine-tuned from the pretrained checkpoint `{source}`" if source else "trained"
    return f"""# {card['name']}: {card['task']} ({card['preset'] or 'from ' + str(source)})

{card['parameters']:,} parameters, {start} on {card['backend']} with this command:

```
{card['command']}
```

## Data

| | |
|---|---|
{rows(card['data'])}

## Metrics

On the test split; `val_` metrics on the validation split the run was selected on.

| metric | value |
|---|---|
{rows(card['metrics'])}

{ood}## Training and decoding

| | |
|---|---|
{rows(card['training'])}

{figures}## Known limits

{limits}

## Use it

```python
from kformer import models
model = models.load("<this folder>")   # the {card['task']} with its preprocessor
```

{serve}
## Versions

{", ".join(f"{k} {v}" for k, v in card['versions'].items())}
"""


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(text):
    """`text` as one Markdown table cell: pipes escaped, on one line."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _kformer_version():
    import kformer

    return kformer.__version__
