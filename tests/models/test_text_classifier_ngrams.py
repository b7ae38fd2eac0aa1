"""`TextClassifier(ngram_buckets=..., mask_padding=...)`: hashed bigrams add to the token embeddings."""

import numpy as np
import pytest

from kformer import models
from tests.helpers import to_numpy

SIZES = dict(vocabulary_size=50, sequence_length=8, hidden_dim=16, num_heads=2, intermediate_dim=32)
IDS = np.array([[5, 6, 7, 8, 9, 0, 0, 0], [11, 12, 0, 0, 0, 0, 0, 0]], "int32")


def _copy_weights(source, target):
    for layer in source.layers:
        if layer.weights:
            target.get_layer(layer.name).set_weights(layer.get_weights())


def test_with_a_zero_table_it_is_the_plain_classifier_padding_mask_included():
    # If the Add of the n-gram embedding dropped the padding mask, attention and mean pooling
    # would take in the padded positions and the two models would differ.
    plain = models.build("imdb_small", **SIZES)
    bigram = models.build("imdb_bigram", **SIZES, ngram_buckets=64, mask_padding=True)
    _copy_weights(plain, bigram)
    table = bigram.ngram_embedding.table.embeddings
    table.assign(np.zeros(table.shape, "float32"))
    np.testing.assert_allclose(to_numpy(bigram(IDS)), to_numpy(plain(IDS)), atol=1e-5)
    table.assign(np.full(table.shape, 0.5, "float32"))
    assert not np.allclose(to_numpy(bigram(IDS)), to_numpy(plain(IDS)), atol=1e-3)


@pytest.mark.parametrize("mask_padding", [True, False])
def test_padding_takes_part_only_without_the_mask(mask_padding):
    model = models.build("imdb_bigram", **SIZES, ngram_buckets=64, mask_padding=mask_padding)
    before = to_numpy(model(IDS))
    table = model.token_embedding.token_embedding.embeddings
    table.assign(np.concatenate([np.full((1, 16), 3.0, "float32"), to_numpy(table)[1:]]))  # the padding row
    moved = not np.allclose(to_numpy(model(IDS)), before, atol=1e-4)
    assert moved != mask_padding


def test_preset_and_config():
    model = models.build("imdb_bigram", **SIZES)
    assert (model.ngram_buckets, model.ngram_size, model.mask_padding) == (2**18, 2, False)
    assert model.get_config()["ngram_buckets"] == 2**18 and model.get_config()["mask_padding"] is False
    assert models.build("imdb_small", **SIZES).ngram_embedding is None
