"""Model builders and their preset registry.

`kformer.models.translator(preset="transformer_tiny", ...)`, or
`kformer.models.build("transformer_tiny", ...)`; `list_models()` names every preset.
"""

from kformer.models.bert import mini_bert, mini_bert_classifier, mini_bert_pretraining
from kformer.models.classifier import imdb_classifier
from kformer.models.generate import generate
from kformer.models.registry import build, builder, get_preset, list_models, register
from kformer.models.training import LabelSmoothedCrossEntropy, TransformerSchedule
from kformer.models.translator import translator
from kformer.models.vit import vit

__all__ = [
    "LabelSmoothedCrossEntropy",
    "TransformerSchedule",
    "build",
    "builder",
    "generate",
    "get_preset",
    "imdb_classifier",
    "list_models",
    "mini_bert",
    "mini_bert_classifier",
    "mini_bert_pretraining",
    "register",
    "translator",
    "vit",
]
