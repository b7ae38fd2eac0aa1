"""`max_word_pieces` (issue 60): no generated word has more WordPiece pieces than that, on every backend.

A tiny translator whose output bias makes the `##` continuation pieces win
chains them without the guard ("el ompipimpumpremprimi"); with it, no word
has more than `K` pieces, for greedy, beam and sampling. Each decoding setting
compiles once (TensorFlow, JAX): the `decoded` fixture runs every setting on
both biases before it moves to the next, and decodes with `translate`'s own
options, so `translate` reuses the compiled loops.
"""

import re

import keras
import numpy as np
import pytest

from kformer import export, models
from kformer.data.preprocessors import TranslatorPreprocessor
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
from kformer.export.decoding import check_export_options
from kformer.generation.options import TRANSLATE_MAX_WORD_PIECES
from kformer.generation.search import (CONTINUATION, SPECIAL, WORD_START, ban_long_words, decode_function,
                                     word_piece_kinds)
from tests.helpers import to_numpy
from tests.models.cases import small_model

VOCABULARY = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(10)] + [f"##c{i}" for i in range(10)]
KINDS = np.array([SPECIAL] * len(SPECIAL_TOKENS) + [WORD_START] * 10 + [CONTINUATION] * 10)
TEXTS = ["w1 w2 w3", "w4", "w5 w6c1 w7", "w8 w8"]
LENGTH = 12  # the preprocessor's sequence_length: `translate`'s max_length
K = TRANSLATE_MAX_WORD_PIECES  # `translate`'s and the export's default
STRATEGIES = {"greedy": {}, "beam": dict(num_beams=3), "top_k": dict(k=5, seed=0)}
assert 2 <= K < LENGTH // 2


def pieces_per_word(row):
    """The pieces of each word of generated ids (a word: a word start or a leading `##`, then `##` pieces)."""
    words = []
    for token in row:
        kind = KINDS[token]
        if kind == CONTINUATION and words and words[-1] is not None:
            words[-1] += 1
        else:
            words.append(None if kind == SPECIAL else 1)
    return [n for n in words if n is not None]


def longest_word(ids):
    return max((max(pieces_per_word(row), default=0) for row in ids), default=0)


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    tokenizer = WordPieceTokenizer(VOCABULARY)
    model = models.translator(preset="transformer_tiny", vocabulary_size=len(VOCABULARY), sequence_length=16,
                              hidden_dim=16, num_heads=2, intermediate_dim=32, num_encoder_layers=1,
                              num_decoder_layers=1, tie_output_embedding=False,
                              preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, LENGTH))
    kernel = model.output_projection.kernel
    kernel.assign(to_numpy(kernel) * 0.1)  # the bias decides which kind of token wins
    return model


def rig(model, continuation_bias):
    """Output bias: `##` pieces at `continuation_bias`, word starts at 3, special tokens (`[END]`) at -10, plus
    0.2 apart within each kind (no near ties between in-process and exported decoding)."""
    spread = 0.2 * np.arange(len(KINDS)) % 2.0
    bias = np.select([KINDS == CONTINUATION, KINDS == WORD_START], [continuation_bias, 3.0], -10.0) + spread
    model.output_projection.bias.assign(bias.astype("float32"))


CHAINING, PLAIN = 6.0, -20.0  # `##` pieces win every step / never win


@pytest.fixture(scope="module")
def decoded(translator):
    """{(strategy, max_word_pieces, bias): generated ids}, and `translate`'s answers on the chaining bias."""
    source = translator.preprocessor.encode(TEXTS)["encoder_token_ids"]
    options = dict(max_length=LENGTH, start_token_id=translator.preprocessor.start_token_id,
                   end_token_id=translator.preprocessor.end_token_id)
    out, translations = {}, {}
    for strategy, extra in STRATEGIES.items():
        for pieces in (None, K):
            for bias in (PLAIN, CHAINING):  # the same compiled loop, other weights (translate: chaining)
                rig(translator, bias)
                out[strategy, pieces, bias] = models.generate(translator, source, strategy=strategy,
                                                              max_word_pieces=pieces, **options, **extra)
            translations[strategy, pieces] = translator.translate(TEXTS, strategy=strategy, max_word_pieces=pieces,
                                                                  **extra)
    rig(translator, CHAINING)
    return out, translations


def test_kinds_come_from_the_target_tokenizer(translator):
    np.testing.assert_array_equal(word_piece_kinds(translator), KINDS)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_without_the_guard_continuation_pieces_chain(decoded, strategy):
    out, _ = decoded
    assert longest_word(out[strategy, None, CHAINING]) > K + 2


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_no_word_exceeds_max_word_pieces(decoded, strategy):
    out, translations = decoded
    ids = out[strategy, K, CHAINING]
    assert longest_word(ids) == K
    assert (ids[:, :3 * K] != 0).all()  # the rows went on, starting new words
    texts = translations[strategy, K]
    assert all(len(word) <= 2 * K for text in texts for word in text.split()), texts  # each piece: 2 letters
    assert max(len(word) for word in " ".join(translations[strategy, None]).split()) > 2 * K


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_guard_changes_nothing_where_no_word_is_long(decoded, strategy):
    out, _ = decoded
    assert longest_word(out[strategy, None, PLAIN]) < K
    np.testing.assert_array_equal(out[strategy, K, PLAIN], out[strategy, None, PLAIN])


def test_greedy_with_the_guard_is_greedy_over_the_allowed_tokens(translator, decoded):
    """Step by step on the chaining bias: each token is the argmax of the logits with `##` banned where the
    word is full, and of the unbanned logits elsewhere."""
    out, _ = decoded
    ids = out["greedy", K, CHAINING]
    source = translator.preprocessor.encode(TEXTS)["encoder_token_ids"]
    tokens = np.concatenate([np.full((len(ids), 1), translator.preprocessor.start_token_id), ids], axis=1)
    logits = to_numpy(translator.predict_on_batch({"encoder_token_ids": source, "decoder_token_ids": tokens}))
    for row in range(len(ids)):
        for t in range(LENGTH):
            full = t + 1 >= K and all(KINDS[tokens[row, j]] == CONTINUATION for j in range(t + 2 - K, t + 1)) \
                and KINDS[tokens[row, t + 1 - K]] != SPECIAL
            allowed = np.where(full & (KINDS == CONTINUATION), -np.inf, logits[row, t])
            assert ids[row, t] == allowed.argmax(), (row, t)


def reference_full(row, t, k):
    """Whether the word before position `t` of a buffer already has `k` pieces (plain Python)."""
    count = 0
    for token in reversed(row[:t]):
        count += KINDS[token] != SPECIAL
        if KINDS[token] != CONTINUATION:
            break
    return count >= k


def test_ban_long_words_counts_back_to_the_word_start():
    rng = np.random.default_rng(0)
    tokens = rng.choice([5, 6, 7, 8, 17, 18, 19], (64, 8)).astype("int32")  # [START], [END], words, ##
    tokens[:8, :4] = [[5, 17, 18, 19], [7, 17, 18, 19], [17, 18, 19, 17], [5, 7, 17, 18],
                      [7, 8, 17, 5], [17, 17, 17, 17], [5, 5, 17, 18], [7, 17, 0, 17]]
    logits = np.zeros((64, len(VOCABULARY)), "float32")
    kinds = keras.ops.convert_to_tensor(KINDS, "int32")
    for k in (1, 2, 3):
        for t in range(9):
            known = k == 2  # torch's eager loop passes `t` as an int; TF and JAX trace it
            position = t if known else keras.ops.convert_to_tensor(t, "int32")
            banned = to_numpy(ban_long_words(logits, keras.ops.convert_to_tensor(tokens), position, k, kinds)) < -1e8
            want = np.array([reference_full(list(row), t, k) for row in tokens])
            np.testing.assert_array_equal(banned[:, KINDS == CONTINUATION], np.repeat(want[:, None], 10, 1))
            assert not banned[:, KINDS != CONTINUATION].any()


@pytest.mark.parametrize("value", [0.5, -1, "3", True, 2.0])
def test_bad_values_name_the_argument(translator, value):
    source = translator.preprocessor.encode(TEXTS[:1])["encoder_token_ids"]
    match = "`max_word_pieces` must be None or an int >= 0.*" + re.escape(f"Received: max_word_pieces={value!r}")
    with pytest.raises(ValueError, match=match):
        models.generate(translator, source, max_length=4, start_token_id=5, end_token_id=6, max_word_pieces=value)
    with pytest.raises(ValueError, match="max_word_pieces"):
        translator.translate("w1", max_word_pieces=value)
    with pytest.raises(ValueError, match="max_word_pieces"):
        check_export_options(translator, translator.preprocessor, {"max_word_pieces": value})


def test_the_guard_needs_a_wordpiece_tokenizer():
    bare = small_model("transformer_tiny")
    with pytest.raises(ValueError, match="`max_word_pieces` needs the model's WordPiece tokenizer.*no preprocessor"):
        models.generate(bare, np.array([[8, 9]]), max_length=4, start_token_id=5, end_token_id=6, max_word_pieces=2)
    lm = small_model("gpt_tiny")
    with pytest.raises(ValueError, match="WordPiece tokenizer.*CausalLM with no preprocessor"):
        models.generate(lm, np.array([[8, 9]]), max_length=4, max_word_pieces=2)
    with pytest.raises(ValueError, match="WordPiece tokenizer"):
        decode_function(lm, max_length=4, max_word_pieces=2)
    decode_function(lm, max_length=4, max_word_pieces=0)  # off: no tokenizer needed


def test_export_options(translator):
    def pieces(*args):
        return check_export_options(translator, translator.preprocessor, *args)["generation"]["max_word_pieces"]

    assert pieces() == K  # translate's default: the task's generation config
    assert pieces(None, {"max_word_pieces": None}) is None  # 0.2's keyword, still read
    assert pieces(translator.generation_config.replace(max_word_pieces=None)) is None
    lm = small_model("gpt_tiny")
    assert check_export_options(lm, None)["generation"]["max_word_pieces"] is None  # off for a language model


@pytest.mark.only_backend("tensorflow")
def test_the_exported_translator_keeps_the_guard(translator, decoded, tmp_path):
    import tensorflow as tf

    _, translations = decoded
    rig(translator, CHAINING)
    path = export.export_for_serving(translator, tmp_path, num_beams=3, max_word_pieces=K, warmup_requests=False)
    served = tf.saved_model.load(str(path)).signatures
    text = tf.constant(TEXTS)
    for signature, strategy in (("serving_default", "greedy"), ("translate_beam", "beam")):
        got = [t.decode() for t in served[signature](text=text)["translation"].numpy()]
        assert got == translations[strategy, K], signature
        assert all(len(word) <= 2 * K for t in got for word in t.split())
