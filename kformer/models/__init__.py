"""Task models, their builders and preset registry, decoding and loading.

`kformer.models.translator(preset="transformer_tiny", ...)` or
`kformer.models.build("transformer_tiny", ...)` build a task (`Translator`,
`TextClassifier`, `BertBackbone` and its `BertPretrainer` /
`BertTextClassifier`, `ViTImageClassifier`, `CausalLM`, `ConformerEncoder`); `list_models()` names every
preset; `load(path)` reads a recipe's output back; `from_pretrained(folder or
"hf://org/name")` loads a published BERT, GPT-2 or ViT checkpoint; `layout_map(...)` shards a
model's weights for `keras.distribution.ModelParallel`.
"""

from kformer.models.bert import (
    BertBackbone,
    BertPretrainer,
    BertTextClassifier,
    mini_bert,
    mini_bert_classifier,
    mini_bert_pretraining,
)
from kformer.models.classifier import TextClassifier, imdb_classifier
from kformer.models.conformer import ConformerEncoder, conformer_encoder
from kformer.models.generate import generate
from kformer.models.gpt import CausalLM, causal_lm
from kformer.models.load import load
from kformer.models.parallel import layout_map
from kformer.models.pretrained import from_pretrained
from kformer.models.registry import build, builder, get_preset, list_models, register
from kformer.models.task import Backbone, ClassifierTask, Task
from kformer.models.training import LabelSmoothedCrossEntropy, SparseAccuracy, SparseCrossEntropy, TransformerSchedule
from kformer.models.translator import Translator, translator
from kformer.models.vit import ViTImageClassifier, vit

__all__ = [
    "Backbone",
    "BertBackbone",
    "BertPretrainer",
    "BertTextClassifier",
    "CausalLM",
    "ConformerEncoder",
    "ClassifierTask",
    "LabelSmoothedCrossEntropy",
    "SparseAccuracy",
    "SparseCrossEntropy",
    "Task",
    "TextClassifier",
    "TransformerSchedule",
    "Translator",
    "ViTImageClassifier",
    "build",
    "builder",
    "causal_lm",
    "conformer_encoder",
    "from_pretrained",
    "generate",
    "get_preset",
    "imdb_classifier",
    "layout_map",
    "list_models",
    "load",
    "mini_bert",
    "mini_bert_classifier",
    "mini_bert_pretraining",
    "register",
    "translator",
    "vit",
]
