"""Task preprocessors: raw text, images or audio in, model inputs out, in TensorFlow ops.

One implementation serves `model.fit` on raw inputs, the recipes' tf.data
pipelines, eager calls (`encode`) and the exported serving graphs. One module
per task family; `base` holds the `Preprocessor` class they share.
"""

from kformer.data.preprocessors.audio import AudioPreprocessor
from kformer.data.preprocessors.base import Preprocessor, as_strings, is_text
from kformer.data.preprocessors.bert import BertPreprocessor, bert_inputs
from kformer.data.preprocessors.causal_lm import CausalLMPreprocessor
from kformer.data.preprocessors.image_classifier import ImageClassifierPreprocessor
from kformer.data.preprocessors.text_classifier import TextClassifierPreprocessor
from kformer.data.preprocessors.translator import TranslatorPreprocessor

__all__ = ["AudioPreprocessor", "BertPreprocessor", "CausalLMPreprocessor", "ImageClassifierPreprocessor", "Preprocessor",
           "TextClassifierPreprocessor", "TranslatorPreprocessor", "as_strings", "bert_inputs", "is_text"]
