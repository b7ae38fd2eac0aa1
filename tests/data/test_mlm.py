import keras
import numpy as np
import pytest

from kformer import models
from kformer.data import imdb, mlm, wordpiece

SEQUENCE_LENGTH = 64
MASKING = {"vocabulary_size": 1000, "num_special": 7, "mask_id": 4}


@pytest.fixture(scope="module")
def tokenizer():
    texts, _ = imdb.load_split("train", max_examples=200)
    return wordpiece.WordPieceTokenizer.learn(texts, 500)


@pytest.fixture(scope="module")
def reviews():
    return imdb.load_split("unsup", max_examples=150)[0]


@pytest.fixture(scope="module")
def pairs(tokenizer, reviews):
    return mlm.segment_pairs(reviews, tokenizer, SEQUENCE_LENGTH, seed=0)


def random_batch(n=4000, length=64, seed=0):
    """`[CLS] tokens [SEP]` then padding: int32 `(n, length)`, 0 to `length - 2` tokens a row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(7, MASKING["vocabulary_size"], (n, length)).astype("int32")
    lengths = rng.integers(2, length + 1, n)
    ids[np.arange(length) >= lengths[:, None]] = 0
    ids[:, 0] = 2
    ids[np.arange(n), lengths - 1] = 3
    return ids


@pytest.mark.once("file reading")
def test_bundled_unsup_sample():
    texts, labels = imdb.load_split("unsup")
    assert len(texts) == 3000 and set(labels.tolist()) == {-1}


@pytest.mark.once("regular expressions only")
def test_split_sentences():
    text = 'Great film! Did I like it? Yes. He said "wow." Then   left'
    assert mlm.split_sentences(text) == ["Great film!", "Did I like it?", "Yes.", 'He said "wow."', "Then   left"]
    assert mlm.split_sentences("  ") == []


@pytest.mark.once("numpy only")
def test_masking_statistics():
    ids = random_batch()
    masked, positions, labels, weights = mlm.mask_tokens(ids, **MASKING, rng=np.random.default_rng(1))
    max_masks = mlm.default_max_masks(ids.shape[1])
    assert positions.shape == labels.shape == weights.shape == (len(ids), max_masks)
    assert positions.dtype == labels.dtype == np.int32 and weights.dtype == np.float32
    real = weights == 1
    num_real = (ids >= 7).sum(1)
    expected = np.minimum(np.clip(np.rint(0.15 * num_real), 1, max_masks), num_real)  # 0 if no real token
    np.testing.assert_array_equal(real.sum(1), expected)
    assert abs(real.sum() / num_real.sum() - 0.15) < 0.01
    assert np.all(real[:, :-1] >= real[:, 1:])  # real masks first, then padding
    assert np.all(positions[~real] == 0) and np.all(labels[~real] == 0)
    rows = np.nonzero(real)[0]
    pos = positions[real]
    assert np.all((np.diff(positions, axis=1) > 0) | ~real[:, 1:])  # ascending, distinct
    assert np.all(ids[rows, pos] >= 7)  # never [CLS], [SEP] or padding
    np.testing.assert_array_equal(labels[real], ids[rows, pos])
    unselected = np.ones_like(ids, bool)
    unselected[rows, pos] = False
    np.testing.assert_array_equal(masked[unselected], ids[unselected])
    new = masked[rows, pos]
    to_mask, unchanged = np.mean(new == 4), np.mean(new == ids[rows, pos])
    assert abs(to_mask - 0.8) < 0.015 and abs(unchanged - 0.1) < 0.01
    assert abs(1 - to_mask - unchanged - 0.1) < 0.01  # random replacements
    assert np.all((new == 4) | ((new >= 7) & (new < MASKING["vocabulary_size"])))


def test_masking_matches_keras_hub_masked_lm_mask_generator():
    """kformer keeps its own seeded numpy masking (keras-hub's generator takes no seed, so a rerun
    or a resumed run would see other masks); it must select and replace as keras-hub's does."""
    keras_hub = pytest.importorskip("keras_hub")
    import tensorflow as tf

    ids = random_batch(n=2000)
    max_masks = mlm.default_max_masks(ids.shape[1])
    ours = mlm.mask_tokens(ids, **MASKING, rng=np.random.default_rng(3))
    tf.random.set_seed(3)
    theirs = keras_hub.layers.MaskedLMMaskGenerator(
        MASKING["vocabulary_size"], 0.15, MASKING["mask_id"], mask_selection_length=max_masks,
        unselectable_token_ids=list(range(MASKING["num_special"])))(tf.constant(ids))
    theirs = [np.asarray(theirs[k]) for k in ("token_ids", "mask_positions", "mask_ids", "mask_weights")]

    def summary(masked, positions, labels, weights):
        real = weights > 0
        rows = np.nonzero(real)[0]
        new = masked[rows, positions[real]]
        assert np.all(ids[rows, positions[real]] >= MASKING["num_special"])  # never a special token
        np.testing.assert_array_equal(labels[real], ids[rows, positions[real]])
        return np.array([real.sum() / (ids >= MASKING["num_special"]).sum(),  # selection rate
                         np.mean(new == MASKING["mask_id"]),  # -> [MASK]
                         np.mean(new == labels[real])])  # unchanged

    np.testing.assert_allclose(summary(*ours), summary(*theirs), atol=0.02)


@pytest.mark.once("numpy only")
def test_masking_is_deterministic_and_handles_edge_rows():
    ids = random_batch(n=50, seed=3)
    a = mlm.mask_tokens(ids, **MASKING, rng=np.random.default_rng(7))
    b = mlm.mask_tokens(ids, **MASKING, rng=np.random.default_rng(7))
    c = mlm.mask_tokens(ids, **MASKING, rng=np.random.default_rng(8))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], c[1])
    edge = np.array([[2, 3, 0, 0], [2, 9, 3, 0]])  # no real token; one real token
    _, positions, labels, weights = mlm.mask_tokens(edge, **MASKING, rng=np.random.default_rng(0), max_masks=2)
    np.testing.assert_array_equal(weights, [[0, 0], [1, 0]])
    np.testing.assert_array_equal(positions, [[0, 0], [1, 0]])
    np.testing.assert_array_equal(labels, [[0, 0], [9, 0]])
    with pytest.raises(ValueError, match="max_masks=5"):
        mlm.mask_tokens(edge, **MASKING, rng=np.random.default_rng(0), max_masks=5)


@pytest.mark.once("numpy only")
def test_truncate_pair_trims_the_longer_segment_first():
    def reference(la, lb, budget):  # BERT's loop: remove one token from the longer
        while la + lb > budget:
            la, lb = (la - 1, lb) if la > lb else (la, lb - 1)
        return la, lb

    for la in range(1, 40):
        for lb in range(1, 40):
            a, b = mlm._truncate_pair(np.arange(la), np.arange(100, 100 + lb), 25)
            assert (len(a), len(b)) == reference(la, lb, 25)
            assert (len(a) == 0 or a[-1] == la - 1) and (len(b) == 0 or b[0] == 100)  # A keeps its end


@pytest.mark.once("tokenizer in TensorFlow ops and numpy")
def test_segment_pairs_structure(pairs, tokenizer):
    token_ids, segment_ids, labels = pairs["token_ids"], pairs["segment_ids"], pairs["nsp_labels"]
    assert token_ids.shape == segment_ids.shape == (len(labels), SEQUENCE_LENGTH) and len(labels) > 300
    assert token_ids.dtype == segment_ids.dtype == labels.dtype == np.int32
    assert 0.4 < labels.mean() < 0.6 and set(labels.tolist()) == {0, 1}
    cls, sep = tokenizer.ids["[CLS]"], tokenizer.ids["[SEP]"]
    for ids, segments in zip(token_ids, segment_ids):
        length = int((ids != 0).sum())
        assert np.all(ids[length:] == 0) and np.all(segments[length:] == 0)
        first, second = np.nonzero(ids == sep)[0]
        assert ids[0] == cls and np.sum(ids == cls) == 1 and second == length - 1
        assert first >= 2 and second >= first + 2  # A and B are not empty
        np.testing.assert_array_equal(segments[:length], np.arange(length) > first)


@pytest.mark.once("tokenizer in TensorFlow ops and numpy")
def test_segment_pairs_next_is_contiguous_and_random_is_not(pairs, tokenizer, reviews):
    docs = [" " + " ".join(map(str, t)) + " " for t in tokenizer.tokenize(reviews).to_list()]
    contiguous = []
    for ids in pairs["token_ids"]:
        body = ids[(ids != 0) & (ids != 2) & (ids != 3)]
        pattern = " " + " ".join(map(str, body)) + " "
        contiguous.append(any(pattern in doc for doc in docs))
    contiguous = np.array(contiguous)
    assert np.all(contiguous[pairs["nsp_labels"] == 0])
    assert np.mean(contiguous[pairs["nsp_labels"] == 1]) < 0.05
    again = mlm.segment_pairs(reviews, tokenizer, SEQUENCE_LENGTH, seed=0)
    np.testing.assert_array_equal(again["token_ids"], pairs["token_ids"])


@pytest.mark.once("tokenizer in TensorFlow ops and numpy")
def test_packed_sequences_hold_every_token_once_in_order(tokenizer, reviews):
    packed = mlm.packed_sequences(reviews, tokenizer, SEQUENCE_LENGTH)
    token_ids, segment_ids = packed["token_ids"], packed["segment_ids"]
    assert sorted(packed) == ["segment_ids", "token_ids"] and token_ids.dtype == np.int32
    assert token_ids.shape == segment_ids.shape and token_ids.shape[1] == SEQUENCE_LENGTH
    assert not segment_ids.any()
    cls, sep = tokenizer.ids["[CLS]"], tokenizer.ids["[SEP]"]
    lengths = (token_ids != 0).sum(1)
    assert np.all(lengths[:-1] == SEQUENCE_LENGTH) and 3 <= lengths[-1] <= SEQUENCE_LENGTH  # one padded row
    assert np.all(token_ids[:, 0] == cls) and np.all(token_ids[np.arange(len(lengths)), lengths - 1] == sep)
    body = np.concatenate([row[1 : n - 1] for row, n in zip(token_ids, lengths)])
    docs = [np.asarray(d, "int32") for d in tokenizer.tokenize(reviews).to_list() if d]
    expected = np.concatenate([np.append(d, sep) for d in docs])[:-1]  # [SEP] between two reviews
    np.testing.assert_array_equal(body, expected)
    pairs = mlm.segment_pairs(reviews, tokenizer, SEQUENCE_LENGTH, seed=0)
    assert (token_ids != 0).mean() > 0.99 > (pairs["token_ids"] != 0).mean()  # pairs: a padded tail each


@pytest.mark.once("argument check before any backend code")
def test_packed_sequences_reject_bad_arguments(tokenizer):
    with pytest.raises(ValueError, match=r"`sequence_length` must be an int >= 3. Received: sequence_length=2"):
        mlm.packed_sequences(["A film."], tokenizer, 2)
    with pytest.raises(ValueError, match="Need at least 1 non-empty text. Received: 2 texts"):
        mlm.packed_sequences(["", "  "], tokenizer, 16)


@pytest.mark.once("tf.data pipeline with numpy masking")
def test_packed_sequences_train_the_masked_lm_only(tokenizer, reviews):
    packed = mlm.packed_sequences(reviews[:20], tokenizer, SEQUENCE_LENGTH)
    x, y, w = next(iter(mlm.make_pretraining_dataset(packed, 8, **mlm.masking_args(tokenizer))))
    assert not np.asarray(x["segment_ids"]).any() and not np.asarray(y["nsp_logits"]).any()
    np.testing.assert_array_equal(np.asarray(w["nsp_logits"]), np.zeros(8))  # no next-sentence signal
    real = (packed["token_ids"][:8] >= MASKING["num_special"]).sum(1)  # the first batch: not shuffled
    expected = np.clip(np.rint(0.15 * real), 1, mlm.default_max_masks(SEQUENCE_LENGTH))
    np.testing.assert_array_equal(np.asarray(w["mlm_logits"]).sum(1), expected)


def test_dataset_trains_mini_bert_and_weights_apply(pairs, tokenizer):
    args = mlm.masking_args(tokenizer)
    assert args["mask_id"] == tokenizer.ids["[MASK]"] and args["num_special"] == 7
    ds = mlm.make_pretraining_dataset(pairs, 16, **args, shuffle=True, seed=0)
    x, y, w = next(iter(ds))
    max_masks = mlm.default_max_masks(SEQUENCE_LENGTH)
    assert sorted(x) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    assert x["padding_mask"].dtype.name == "bool" and tuple(x["mask_positions"].shape) == (16, max_masks)
    assert tuple(y["mlm_logits"].shape) == tuple(w["mlm_logits"].shape) == (16, max_masks)
    assert tuple(y["nsp_logits"].shape) == tuple(w["nsp_logits"].shape) == (16,)
    epoch_1, epoch_2 = (np.asarray(next(iter(ds.take(1)))[0]["mask_positions"]) for _ in range(2))
    assert not np.array_equal(epoch_1, epoch_2)  # dynamic masking: new masks every pass

    backbone = models.bert(vocabulary_size=tokenizer.vocabulary_size, sequence_length=SEQUENCE_LENGTH,
                                num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    model = models.bert_pretrainer(backbone)
    model.compile(
        keras.optimizers.AdamW(1e-3),
        loss={"mlm_logits": keras.losses.SparseCategoricalCrossentropy(
                  from_logits=True, reduction="mean_with_sample_weight"),
              "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        weighted_metrics={"mlm_logits": ["sparse_categorical_accuracy"]},
    )
    history = model.fit(ds.take(2), epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])

    # The per-output sample weights reach the loss and the metric: compare with numpy.
    static = mlm.make_pretraining_dataset(pairs, 32, **args, dynamic_masking=False).take(1)
    x, y, w = (dict((k, np.asarray(v)) for k, v in part.items()) for part in next(iter(static)))
    assert 0 < w["mlm_logits"].mean() < 1  # some padded mask slots
    logits = keras.ops.convert_to_numpy(model.predict_on_batch(x)["mlm_logits"]).astype("float64")
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(log_probs, y["mlm_logits"][..., None], -1)[..., 0]
    expected = (nll * w["mlm_logits"]).sum() / w["mlm_logits"].sum()
    result = model.evaluate(static, verbose=0, return_dict=True)
    np.testing.assert_allclose(result["mlm_logits_loss"], expected, rtol=1e-4)
    np.testing.assert_allclose(result["mlm_logits_sparse_categorical_accuracy"],
                               mlm.masked_accuracy(y["mlm_logits"], logits, w["mlm_logits"]), atol=1e-6)
