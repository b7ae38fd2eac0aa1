"""Training setups the recipes share: warmup + cosine AdamW, the paper's warmup schedule (5.3), and how a
BERT pretrainer is compiled.

Recipes and benchmarks call these, so a benchmark trains with the recipe's
optimizer without importing the recipe.
"""

import keras
from keras import ops


def warmup_cosine(peak, steps, warmup_fraction=0.1):
    """Learning rate schedule: linear warmup to `peak` over `warmup_fraction` of `steps`, then cosine decay to 0.

    Args:
        peak: float. The learning rate at the end of the warmup.
        steps: int. Optimizer steps of the whole run.
        warmup_fraction: float. Share of `steps` spent warming up. Defaults to `0.1`.

    Returns:
        A `keras.optimizers.schedules.CosineDecay`.

    Example:

    >>> schedule = warmup_cosine(1e-3, steps=100)
    >>> round(float(schedule(10)), 6), round(float(schedule(100)), 6)
    (0.001, 0.0)
    """
    warmup = int(steps * warmup_fraction)
    return keras.optimizers.schedules.CosineDecay(0.0, max(1, steps - warmup), warmup_target=peak,
                                                  warmup_steps=warmup)


def adamw(peak, steps, weight_decay=0.01, warmup_fraction=0.1, global_clipnorm=None,
          gradient_accumulation_steps=1):
    """AdamW with `warmup_cosine(peak, steps, warmup_fraction)`: the recipes' optimizer.

    Args:
        peak: float. Peak learning rate.
        steps: int. Training steps (batches) of the whole run.
        weight_decay: float. Defaults to `0.01` (BERT's; the ViT recipe passes its `--weight-decay`).
        warmup_fraction: float. Defaults to `0.1`.
        global_clipnorm: float or None. Gradients are scaled down together
            when their global norm exceeds it (the speech recipe: CTC's
            first steps). Defaults to `None` (no clipping).
        gradient_accumulation_steps: int >= 1. Update the weights once every
            this many batches, with their gradients' mean (`accumulating`).
            Defaults to `1` (every batch).

    Example:

    >>> optimizer = adamw(5e-4, steps=1000, weight_decay=0.05)
    >>> type(optimizer).__name__, optimizer.weight_decay
    ('AdamW', 0.05)
    """
    optimizer = keras.optimizers.AdamW(warmup_cosine(peak, steps, warmup_fraction), weight_decay=weight_decay,
                                       global_clipnorm=global_clipnorm)
    return accumulating(optimizer, gradient_accumulation_steps)


def accumulating(optimizer, gradient_accumulation_steps):
    """`optimizer` updating the weights once every `gradient_accumulation_steps` batches (Keras's
    `gradient_accumulation_steps`): the memory of one batch, the update of a batch that many times larger.

    The gradients of the batches in between are summed in the optimizer's
    state (saved with it, so a run resumed mid-group goes on as if never
    stopped), and the update uses their mean: `k` batches of `b` examples
    give the update of one batch of `k * b`, clipping and weight decay
    included, without dropout. Adam's moments count updates; learning-rate
    schedules count batches, as Keras's do (each update takes the rate of
    its last batch). Batches of a last, unfinished group update nothing.

    Args:
        optimizer: a Keras optimizer, not yet used to update weights.
        gradient_accumulation_steps: int >= 1. `1` returns `optimizer` as it is.

    Returns:
        A Keras optimizer of `optimizer`'s class and settings.

    Example:

    >>> optimizer = accumulating(keras.optimizers.Adam(1e-3), 4)
    >>> type(optimizer).__name__, optimizer.gradient_accumulation_steps
    ('Adam', 4)
    """
    if isinstance(gradient_accumulation_steps, bool) or not isinstance(gradient_accumulation_steps, int) \
            or gradient_accumulation_steps < 1:
        raise ValueError(f"`gradient_accumulation_steps` must be an int >= 1. Received: "
                         f"gradient_accumulation_steps={gradient_accumulation_steps!r}")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"`optimizer` must be a Keras optimizer. Received: optimizer={optimizer!r}")
    if gradient_accumulation_steps == 1:
        return optimizer
    if optimizer.built:
        raise ValueError(f"`optimizer` has already updated weights (its state is built); pass a new one. "
                         f"Received: optimizer={optimizer!r}")
    config = optimizer.get_config()
    config["gradient_accumulation_steps"] = gradient_accumulation_steps
    rate = optimizer._learning_rate
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) or \
            (callable(rate) and not isinstance(rate, keras.Variable)):
        config["learning_rate"] = rate  # the schedule object itself (a float rate is in the config)
    return type(optimizer).from_config(config)


def compile_bert_pretrainer(model, optimizer, objective="mlm_nsp", jit_compile="auto"):
    """Compile a `BertPretrainer` for `objective`: `"mlm_nsp"` (masked LM + next sentence) or `"mlm"`.

    The masked-token loss is averaged over real masks (`mean_with_sample_weight`);
    with `"mlm"` there is no NSP loss or metric, and the pooler and NSP head,
    which only NSP trains, are frozen (Liu et al. 2019, RoBERTa).

    Args:
        model: `BertPretrainer`.
        optimizer: a Keras optimizer, e.g. `adamw(1e-3, steps)`.
        objective: str. `"mlm_nsp"` or `"mlm"`. Defaults to `"mlm_nsp"`.
        jit_compile: passed to `model.compile`. Defaults to `"auto"`.

    Example:

    >>> from kformer import models
    >>> model = models.bert_pretrainer(models.bert(preset="bert_tiny", vocabulary_size=100, sequence_length=8))
    >>> compile_bert_pretrainer(model, adamw(1e-3, 10), objective="mlm")
    >>> model.nsp_head.trainable
    False
    """
    if objective not in ("mlm_nsp", "mlm"):
        raise ValueError(f"`objective` must be 'mlm_nsp' or 'mlm'. Received: objective={objective!r}")
    nsp = objective == "mlm_nsp"
    heads = ["mlm_logits", "nsp_logits"] if nsp else ["mlm_logits"]
    losses = {"mlm_logits": keras.losses.SparseCategoricalCrossentropy(
                  from_logits=True, reduction="mean_with_sample_weight"),
              "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
    model.backbone.pooler.trainable = model.nsp_head.trainable = nsp
    model.compile(optimizer, loss={head: losses[head] for head in heads},
                  weighted_metrics={head: ["sparse_categorical_accuracy"] for head in heads}, jit_compile=jit_compile)


@keras.saving.register_keras_serializable(package="kformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * hidden_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper 5.3).

    `step` counts from 1 (the optimizer's iteration + 1); the peak,
    `scale * (hidden_dim * warmup_steps)^-0.5`, is reached at `warmup_steps`.

    Args:
        hidden_dim: int. The model width (`d_model`).
        warmup_steps: int. Linear warmup length. Defaults to `4000`.
        scale: float. Multiplies the whole schedule. Defaults to `1.0`.

    Example:

    >>> schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak: 512^-0.5 * 4000^-0.5
    0.000699
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        if hidden_dim < 1 or warmup_steps < 1 or scale <= 0:
            raise ValueError(
                "`hidden_dim` and `warmup_steps` must be >= 1 and `scale` > 0. Received: "
                f"hidden_dim={hidden_dim}, warmup_steps={warmup_steps}, scale={scale}"
            )
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warm = step * float(self.warmup_steps) ** -1.5
        return self.scale * float(self.hidden_dim) ** -0.5 * ops.minimum(ops.rsqrt(step), warm)

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}
