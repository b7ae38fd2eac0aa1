"""Bad model inputs are refused before the backend runs, the same way on every backend,
and the model keeps working after a refused call (Keras's JAX trainer would not)."""

import numpy as np
import pytest

from kformer import models

IDS = np.ones((2, 8), "int32")


@pytest.fixture(scope="module")
def classifier():
    return models.text_classifier(preset="imdb_tiny", vocabulary_size=50, sequence_length=8)


@pytest.mark.parametrize("x, message", [
    (np.full((2, 8), 50, "int32"), r"`token_ids` must be in \[0, 50\). Received: values from 50 to 50"),
    (np.full((2, 8), -1, "int32"), r"`token_ids` must be in \[0, 50\). Received: values from -1"),
    (np.full((2, 8), 2.7, "float32"), "`token_ids` must hold integers"),
    (np.ones((2, 9), "int32"), r"`token_ids` must have shape \(None, 8\).*Received: token_ids.shape=\(2, 9\)"),
    (np.ones((8,), "int32"), "`token_ids` must have shape"),
])
def test_bad_ids_are_refused_and_the_model_still_predicts(classifier, x, message):
    before = classifier.predict(IDS, verbose=0)
    for call in (lambda: classifier.predict(x, verbose=0), lambda: classifier.predict_on_batch(x),
                 lambda: classifier.evaluate(x, np.zeros(len(x), "int32"), verbose=0)):
        with pytest.raises(ValueError, match=message):
            call()
    np.testing.assert_allclose(classifier.predict(IDS, verbose=0), before, rtol=1e-6)


def test_every_text_task_names_its_inputs():
    lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=40, sequence_length=8)
    with pytest.raises(ValueError, match=r"`token_ids` has 9 positions but the model supports at most 8"):
        lm.predict(np.ones((1, 9), "int32"), verbose=0)
    translator = models.translator(preset="transformer_tiny", encoder_vocabulary_size=30,
                                   decoder_vocabulary_size=20)
    bad = {"encoder_token_ids": np.ones((1, 4), "int32"), "decoder_token_ids": np.full((1, 4), 20, "int32")}
    with pytest.raises(ValueError, match=r"`decoder_token_ids` must be in \[0, 20\)"):
        translator.predict(bad, verbose=0)
    backbone = models.bert(preset="bert_tiny", vocabulary_size=40, sequence_length=8, hidden_dim=16,
                                intermediate_dim=32)
    bert = models.bert_pretrainer(backbone)
    inputs = {"token_ids": IDS, "segment_ids": np.full((2, 8), 2, "int32"),
              "padding_mask": np.ones((2, 8), bool), "mask_positions": np.array([[1], [8]], "int32")}
    with pytest.raises(ValueError, match=r"`segment_ids` must be in \[0, 2\)"):
        bert.predict(inputs, verbose=0)
    inputs["segment_ids"] = np.zeros((2, 8), "int32")
    with pytest.raises(ValueError, match=r"`mask_positions` must be in \[0, 8\). Received: values from 1 to 8"):
        bert.predict(inputs, verbose=0)
    inputs["mask_positions"] = np.array([[1], [7]], "int32")
    assert bert.predict(inputs, verbose=0)["mlm_logits"].shape == (2, 1, 40)
