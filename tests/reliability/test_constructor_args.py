"""Builders, tasks and blocks refuse bad sizes, rates and epsilons, naming the argument (issue 12, item 9)."""

import pytest

from kformer import blocks, models

TEXT = {"vocabulary_size": 100}
PAIR = {"encoder_vocabulary_size": 100, "decoder_vocabulary_size": 100}
CASES = [  # (what, build, argument named in the message)
    ("encoder layers -1", lambda: models.translator(preset="transformer_tiny", **PAIR, num_encoder_layers=-1),
     "num_encoder_layers"),
    ("decoder layers 0", lambda: models.translator(preset="transformer_tiny", **PAIR, num_decoder_layers=0),
     "num_decoder_layers"),
    ("a string size", lambda: models.translator(preset="transformer_tiny", encoder_vocabulary_size="100",
                                                decoder_vocabulary_size=100), "encoder_vocabulary_size"),
    ("a bool size", lambda: models.text_classifier(preset="imdb_tiny", vocabulary_size=True), "vocabulary_size"),
    ("one class", lambda: models.text_classifier(preset="imdb_tiny", **TEXT, num_classes=1), "num_classes"),
    ("negative n-gram buckets", lambda: models.text_classifier(preset="imdb_bigram", **TEXT, ngram_buckets=-1),
     "ngram_buckets"),
    ("n-grams of one token", lambda: models.text_classifier(preset="imdb_bigram", **TEXT, ngram_size=1),
     "ngram_size"),
    ("an n-gram size without buckets", lambda: models.text_classifier(preset="imdb_tiny", **TEXT, ngram_size=3),
     "ngram_size"),
    ("a string mask flag", lambda: models.text_classifier(preset="imdb_tiny", **TEXT, mask_padding="no"),
     "mask_padding"),
    ("zero channels", lambda: models.vit(preset="vit_tiny", channels=0), "channels"),
    ("BERT classifier, one class", lambda: models.bert_text_classifier(
        models.bert(preset="bert_tiny", **TEXT), 1), "num_classes"),
    ("BERT layers 0", lambda: models.bert(preset="bert_tiny", **TEXT, num_layers=0), "num_layers"),
    ("negative epsilon", lambda: models.causal_lm(preset="gpt_tiny", **TEXT, layer_norm_epsilon=-1.0),
     "layer_norm_epsilon"),
    ("NaN epsilon", lambda: blocks.TransformerEncoderBlock(2, 16, layer_norm_epsilon=float("nan")),
     "layer_norm_epsilon"),
    ("conformer epsilon 0", lambda: blocks.ConformerBlock(2, layer_norm_epsilon=0.0), "layer_norm_epsilon"),
    ("dropout 1.5", lambda: blocks.TransformerEncoderBlock(2, 16, dropout=1.5), "dropout"),
    ("a string rate", lambda: blocks.TransformerDecoderBlock(2, 16, attention_dropout="0.1"), "attention_dropout"),
    ("a string head count", lambda: blocks.TransformerEncoderBlock("2", 16), "num_heads"),
    ("a bool expert count", lambda: blocks.TransformerEncoderBlock(2, 16, num_experts=True), "num_experts"),
    # An argument a task does not take is refused, not silently dropped by keras.Model.
    ("unknown task argument", lambda: models.text_classifier(preset="imdb_tiny", **TEXT, layer_norm_epsilon=1e-6),
     "layer_norm_epsilon"),
    ("misspelled argument", lambda: models.bert(preset="bert_tiny", **TEXT, num_layer=2), "num_layer"),
]


@pytest.mark.parametrize("build, argument", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_constructor_arguments_name_the_argument(build, argument):
    with pytest.raises((ValueError, TypeError), match=f"`?{argument}`?.*Received|{argument}="):
        build()


def test_valid_arguments_still_build_and_round_trip_through_config():
    model = models.text_classifier(preset="imdb_tiny", **TEXT, name="classifier", trainable=True)
    clone = type(model).from_config(model.get_config())
    assert clone.count_params() == model.count_params() and clone.name == "classifier"
