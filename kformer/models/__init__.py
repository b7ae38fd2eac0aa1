"""Task models, their builders and preset registry, decoding and loading.

`kformer.models.translator(preset="transformer_tiny", ...)` or
`kformer.models.build("transformer_tiny", ...)` build a task (`Translator`,
`TextClassifier`, `BertBackbone` and its `BertPretrainer` /
`BertTextClassifier`, `ViTImageClassifier`, `CausalLM`, `ConformerEncoder`,
`SpeechRecognizer`); `generate` decodes with a `GenerationConfig` and a
sampler (`GreedySampler`, `BeamSampler`, `TopKSampler`, `TopPSampler`, from
`kformer.generation`); `list_models()` names every
preset; `load(path)` reads a recipe's output back; `from_pretrained(folder or
"hf://org/name")` loads a published BERT, GPT-2 or ViT checkpoint; `layout_map(...)` shards a
model's weights for `keras.distribution.ModelParallel`. Every model derives
from `KformerModel` (config from the constructor, checked Keras loops, atomic
`save`).

Renamed in 0.2 (the old names work, with a DeprecationWarning, until 0.3):
`Backbone` -> `KformerModel`, `imdb_classifier` -> `text_classifier`,
`mini_bert` -> `bert`, `mini_bert_pretraining` -> `bert_pretrainer`,
`mini_bert_classifier` -> `bert_text_classifier`.
"""

from kformer.models.bert import (
    BertBackbone,
    BertPretrainer,
    BertTextClassifier,
    bert,
    bert_pretrainer,
    bert_text_classifier,
    mini_bert,  # deprecated names (0.2), until 0.3
    mini_bert_classifier,
    mini_bert_pretraining,
)
from kformer.generation.config import GenerationConfig
from kformer.generation.samplers import BeamSampler, GreedySampler, Sampler, TopKSampler, TopPSampler
from kformer.generation.search import generate
from kformer.models.classifier import TextClassifier, imdb_classifier, text_classifier
from kformer.models.conformer import ConformerEncoder, conformer_encoder
from kformer.models.gpt import CausalLM, causal_lm
from kformer.models.load import load
from kformer.models.parallel import layout_map
from kformer.models.pretrained import from_pretrained
from kformer.models.registry import build, builder, get_preset, list_models, register
from kformer.models.speech_recognizer import SpeechRecognizer, speech_recognizer
from kformer.models.speech_to_text import SpeechToText
from kformer.models.task import ClassifierTask, KformerModel, Task
from kformer.models.translator import Translator, translator
from kformer.models.vit import ViTImageClassifier, vit
from kformer.training.losses import LabelSmoothedCrossEntropy, SparseAccuracy, SparseCrossEntropy
from kformer.training.optimizers import (TransformerSchedule, accumulating, adamw, compile_bert_pretrainer,
                                         warmup_cosine)
from kformer.training.remat import remat_blocks

__all__ = [
    "BeamSampler",
    "BertBackbone",
    "BertPretrainer",
    "BertTextClassifier",
    "CausalLM",
    "ConformerEncoder",
    "ClassifierTask",
    "GenerationConfig",
    "GreedySampler",
    "KformerModel",
    "LabelSmoothedCrossEntropy",
    "Sampler",
    "SparseAccuracy",
    "SparseCrossEntropy",
    "SpeechRecognizer",
    "SpeechToText",
    "Task",
    "TextClassifier",
    "TopKSampler",
    "TopPSampler",
    "TransformerSchedule",
    "Translator",
    "ViTImageClassifier",
    "accumulating",
    "adamw",
    "bert",
    "bert_pretrainer",
    "bert_text_classifier",
    "build",
    "builder",
    "causal_lm",
    "compile_bert_pretrainer",
    "conformer_encoder",
    "from_pretrained",
    "generate",
    "get_preset",
    "layout_map",
    "list_models",
    "load",
    "register",
    "remat_blocks",
    "speech_recognizer",
    "text_classifier",
    "translator",
    "vit",
    "warmup_cosine",
]


def __getattr__(name):
    if name == "Backbone":  # renamed `KformerModel` in 0.2: `kformer.models.task` warns
        from kformer.models import task

        return task.Backbone
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
