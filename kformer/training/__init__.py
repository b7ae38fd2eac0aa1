"""Training helpers the tasks and recipes share: optimizers and schedules, losses and metrics, and the safe
model state (atomic saves, the state restored on an error, one lock per model)."""

from kformer.training.losses import LabelSmoothedCrossEntropy, SparseAccuracy, SparseCrossEntropy
from kformer.training.optimizers import (TransformerSchedule, accumulating, adamw, compile_bert_pretrainer,
                                         warmup_cosine)

__all__ = ["LabelSmoothedCrossEntropy", "SparseAccuracy", "SparseCrossEntropy", "TransformerSchedule", "accumulating",
           "adamw", "compile_bert_pretrainer", "warmup_cosine"]
