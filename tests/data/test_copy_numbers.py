"""Issue 60: a translator copies the source's numbers (`TranslatorPreprocessor(copy_numbers=True)`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kformer import export, models
from kformer.data.preprocessors import TranslatorPreprocessor
from kformer.data.preprocessors.translator import find_numbers
from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, MASK, PAD, SPECIAL_TOKENS, UNK, WordPieceTokenizer

WORDS = ["i", "have", "cats", "at", "tengo", "gatos", "a", "las", "y", ".", ":", "12", "##3"]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(list(SPECIAL_TOKENS) + WORDS)


@pytest.mark.once("TensorFlow string ops")
def test_find_numbers_keeps_separators_inside_a_number():
    found = find_numbers(tf.constant(["At 12:30, 3.5 km and 1,000 dogs.", "no digits", "7\x017", ""]))
    assert found.to_list() == [[b"12:30", b"3.5", b"1,000"], [], [b"7", b"7"], []]


@pytest.mark.once("preprocessor in TensorFlow ops")
def test_numbers_are_slots_on_both_sides_and_come_back_from_the_source(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 12)
    x, labels = preprocessor(["I have 3 cats at 12:30."], ["Tengo 3 gatos a las 12:30."])
    slot = tokenizer.token_to_id(MASK)
    source = x["encoder_token_ids"].numpy()[0]
    assert [tokenizer.id_to_token(i).numpy().decode() for i in source[:7]] == \
        ["i", "have", MASK, "cats", "at", MASK, "."]
    assert (labels.numpy()[0] == slot).sum() == 2 and (x["decoder_token_ids"].numpy()[0] == slot).sum() == 2
    ids = labels.numpy()
    # numbers never seen in training come back exactly, in order; a slot with no number left is dropped
    assert preprocessor.detokenize(ids, ["I have 4821 cats at 9:05."]) == ["tengo 4821 gatos a las 9:05."]
    assert preprocessor.detokenize(ids, ["I have 7 cats"]) == ["tengo 7 gatos a las."]
    assert preprocessor.detokenize(np.concatenate([ids, ids]), ["1 2 3", "no number"]) == \
        ["tengo 1 gatos a las 2.", "tengo gatos a las."]
    assert preprocessor.detokenize(ids) == ["tengo gatos a las."]  # no sources: nothing to fill in


@pytest.mark.once("preprocessor in TensorFlow ops")
def test_the_served_graph_fills_slots_as_translate_does(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 12)
    ids = preprocessor(["x"], ["Tengo 3 gatos a las 12:30."])[1]
    graph = tf.function(preprocessor.detokenize_tensor, input_signature=[
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.string)])
    sources = ["I have 12 cats at 10:15.", "none at all"]
    served = graph(tf.concat([ids, ids], 0), tf.constant(sources)).numpy().tolist()
    assert [s.decode() for s in served] == preprocessor.detokenize(np.concatenate([ids, ids]), sources) == \
        ["tengo 12 gatos a las 10:15.", "tengo gatos a las."]


@pytest.mark.once("preprocessor in TensorFlow ops")
def test_without_copy_numbers_digits_are_word_pieces(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 8, copy_numbers=False)
    source = preprocessor(["I have 123 cats"])["encoder_token_ids"].numpy()[0]
    assert [tokenizer.id_to_token(i).numpy().decode() for i in source[:5]] == ["i", "have", "12", "##3", "cats"]
    assert preprocessor.detokenize(source[None], ["I have 9 cats"]) == ["i have 123 cats"]


@pytest.mark.once("preprocessor config, no model")
def test_copy_numbers_is_saved_and_old_configs_load_without_it(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 8)
    assert TranslatorPreprocessor.from_config(preprocessor.get_config()).copy_numbers is True
    off = TranslatorPreprocessor(tokenizer, tokenizer, 8, copy_numbers=False)
    assert TranslatorPreprocessor.from_config(off.get_config()).copy_numbers is False
    old = {k: v for k, v in preprocessor.get_config().items() if k != "copy_numbers"}  # saved before the option
    assert TranslatorPreprocessor.from_config(old).copy_numbers is False


@pytest.mark.once("argument check before any backend code")
def test_bad_copy_numbers_arguments_are_named(tokenizer):
    with pytest.raises(ValueError, match=r"`copy_numbers` must be True or False. Received: copy_numbers='yes'"):
        TranslatorPreprocessor(tokenizer, tokenizer, 8, copy_numbers="yes")
    no_mask = WordPieceTokenizer([PAD, UNK, "[START]", "[END]"] + WORDS, special_tokens=[PAD, UNK, "[START]", "[END]"])
    with pytest.raises(ValueError, match=r"copy_numbers=True` needs \[MASK\] among the source_tokenizer's"):
        TranslatorPreprocessor(no_mask, tokenizer, 8)
    TranslatorPreprocessor(no_mask, tokenizer, 8, copy_numbers=False)  # fine without slots
    moved = WordPieceTokenizer([PAD, UNK, "[START]", "[END]", "x", MASK] + WORDS,
                               special_tokens=[PAD, UNK, "[START]", "[END]", MASK])
    with pytest.raises(ValueError, match=r"\[MASK\] at the same id in both tokenizers .* ids 5 and 4"):
        TranslatorPreprocessor(moved, tokenizer, 8)
    assert MASK in BERT_SPECIAL_TOKENS  # a published BERT vocabulary has the slot too


@pytest.mark.only_backend("torch")  # with its export (the TensorFlow worker), served in-process; the slots are checked on all three above
def test_a_trained_translator_copies_numbers_it_never_saw_and_so_does_its_export(tmp_path):
    """Thirty numbers in training; ten others at test time come back digit for digit, in Python and served."""
    rng = np.random.default_rng(0)
    nouns = [("cats", "gatos"), ("dogs", "perros"), ("books", "libros"), ("friends", "amigos")]
    pairs = []
    for n in rng.choice(10000, 40, replace=False):
        en, es = nouns[n % 4]
        pairs.append((f"I have {n} {en}.", f"Tengo {n} {es}."))
    train, test = pairs[:30], pairs[30:]
    sources, targets = [p[0] for p in train] * 8, [p[1] for p in train] * 8
    english = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["i", "have", "."] + [en for en, _ in nouns])
    spanish = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["tengo", "."] + [es for _, es in nouns])
    keras.utils.set_random_seed(0)
    model = models.translator(preset="transformer_tiny", preprocessor=TranslatorPreprocessor(english, spanish, 8),
                              dropout=0.0)
    model.compile(keras.optimizers.Adam(3e-3), models.LabelSmoothedCrossEntropy(0.0))
    model.fit(model.preprocessor.dataset(sources, targets, batch_size=16, shuffle=True), epochs=4, verbose=0)
    translations = model.translate([p[0] for p in test], max_length=8)
    assert translations == [p[1].lower() for p in test]
    path = export.export_for_serving(model, tmp_path / "translator", max_length=8, warmup_requests=False)
    served = tf.saved_model.load(str(path)).signatures["serving_default"]
    answer = served(text=tf.constant([p[0] for p in test]))["translation"].numpy()
    assert [t.decode() for t in answer] == translations


def test_ban_slots_holds_end_until_every_source_slot_is_out_then_bans_slots():
    from kformer.generation.search import NEG_INF, ban_slots

    slot, end = 4, 6
    logits = np.zeros((3, 10), "float32")
    logits[0, end] = 3.0  # row 0 would end
    tokens = np.array([[5, 4, 0, 0], [5, 4, 9, 4], [5, 9, 0, 0]], "int32")  # [START] 4 ..., two slots, none
    required = np.array([2, 2, 0], "int32")
    out = keras.ops.convert_to_numpy(ban_slots(logits, tokens, required, slot, end))
    banned = out <= NEG_INF / 2
    assert banned[0].nonzero()[0].tolist() == [end]  # one of two slots out: it may not end yet,
    assert out[0, slot] == 3.0 and out[0].argmax() == slot  # and puts the missing slot where it would have ended
    assert banned[1].nonzero()[0].tolist() == [slot]  # both out: no third
    assert banned[2].nonzero()[0].tolist() == [slot]  # a source without numbers gets no slot


@pytest.mark.once("argument check in numpy")
def test_slot_token_id_is_checked_and_named():
    from kformer.generation import GenerationConfig

    ids = np.array([[7, 4, 8]])
    config = GenerationConfig(max_length=5, start_token_id=5, stop_token_ids=6, slot_token_id=4)
    assert config.resolve("translator", ids, vocabulary_size=20).slot_token_id == 4
    with pytest.raises(ValueError, match=r"`slot_token_id` must be None or an int in \[1, 20\). Received: "
                                         r"slot_token_id=20"):
        config.replace(slot_token_id=20).resolve("translator", ids, vocabulary_size=20)
    with pytest.raises(ValueError, match=r"`slot_token_id` is for translators"):
        GenerationConfig(max_length=5, slot_token_id=4).resolve("causal", ids, vocabulary_size=20)
