"""BERT pretraining inputs: next-sentence pairs or packed text, and masked-LM masking (numpy) -> tf.data.

Devlin et al. 2019, "BERT", section 3.1 and appendix A.1. Next-sentence
labels follow BERT's code: 0 = "B is the next segment", 1 = "B is random".

    texts, _ = imdb.load_split("unsup")
    tokenizer = WordPieceTokenizer.learn(texts, 8000)
    arrays = mlm.segment_pairs(texts, tokenizer, sequence_length=128)
    ds = mlm.make_pretraining_dataset(arrays, 32, **mlm.masking_args(tokenizer), shuffle=True)
    model = kformer.models.bert_pretrainer(kformer.models.bert(...))
    model.compile("adamw", loss={
        "mlm_logits": keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"),  # mean over real masks
        "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        weighted_metrics={"mlm_logits": ["sparse_categorical_accuracy"]})  # masked-token accuracy
    model.fit(ds)
"""

import re

import keras
import numpy as np

_SENTENCE_END = re.compile(r"([.!?]+[\"')\]]*)\s+")  # ". " "?! " '." ' ends a sentence


def split_sentences(text):
    """Split on `.`, `!` or `?` (plus closing quotes) followed by whitespace: str -> list[str].

    Args:
        text: str.

    Example:

    >>> split_sentences('Great film! Did I like it? Yes.')
    ['Great film!', 'Did I like it?', 'Yes.']
    """
    return [s for s in _SENTENCE_END.sub("\\1\n", text.strip()).split("\n") if s.strip()]


def segment_pairs(texts, tokenizer, sequence_length, seed=0, verbose=0):
    """Next-sentence-prediction pairs `[CLS] A [SEP] B [SEP]` from whole reviews.

    Walking each review, A is one or more consecutive sentences (more only
    while it stays within half of the `sequence_length - 3` token budget). With
    probability 1/2, B is the sentences that follow A (label 0, "is next");
    otherwise B starts at a random sentence of another review (label 1,
    "random") and the true continuation is kept for the next pair. B fills the
    rest of the budget. A pair that still does not fit is trimmed, the longer
    segment first, A from its start and B from its end (so a true pair stays
    contiguous). A never holds a review's last sentence, whatever the label,
    so A alone does not reveal the label.

    Args:
        texts: list of str. Documents (e.g. `imdb.load_split("unsup")[0]`).
        tokenizer: `wordpiece.WordPieceTokenizer`.
        sequence_length: int. Length of each packed pair, specials included.
        seed: int. Seed of the pairing and coin flips. Defaults to `0`.
        verbose: `0`, `1` or `2`. A `keras.utils.Progbar` over tokenization when non-zero.

    Returns:
        Dict of numpy arrays: `token_ids` int32 `(n, sequence_length)`, 0-padded;
        `segment_ids` int32 `(n, sequence_length)`, 0 on `[CLS] A [SEP]` and
        padding, 1 on `B [SEP]`; `nsp_labels` int32 `(n,)`.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["good", "bad", "."])
    >>> pairs = segment_pairs(["Good. Bad. Good.", "Bad. Bad."], tokenizer, sequence_length=8)
    >>> pairs["token_ids"].shape[1], bool(pairs["token_ids"][0, 0] == tokenizer.ids["[CLS]"])
    (8, True)
    """
    from kformer.data import wordpiece

    if sequence_length < 5:
        raise ValueError(f"`sequence_length` must be >= 5. Received: sequence_length={sequence_length}")
    docs = [d for d in _tokenize_sentences(texts, tokenizer, verbose=verbose) if d]
    if len(docs) < 2:
        raise ValueError(f"Need at least 2 non-empty texts for random pairs. Received: {len(texts)} texts")
    budget = sequence_length - 3
    rng = np.random.default_rng(seed)
    pairs = [pair for d in range(len(docs)) for pair in _pairs_of(docs, d, budget, rng)]
    n = len(pairs)
    token_ids = np.zeros((n, sequence_length), "int32")
    segment_ids = np.zeros((n, sequence_length), "int32")
    cls, sep = tokenizer.ids[wordpiece.CLS], tokenizer.ids[wordpiece.SEP]
    for row, (a, b, _) in enumerate(pairs):
        a, b = _truncate_pair(a, b, budget)
        ids = np.concatenate([[cls], a, [sep], b, [sep]])
        token_ids[row, : len(ids)] = ids
        segment_ids[row, len(a) + 2 : len(ids)] = 1
    nsp_labels = np.array([label for _, _, label in pairs], "int32")
    return {"token_ids": token_ids, "segment_ids": segment_ids, "nsp_labels": nsp_labels}


def packed_sequences(texts, tokenizer, sequence_length, verbose=0):
    """Contiguous text for masked-LM-only pretraining: `[CLS] tokens [SEP]` rows cut from all texts.

    RoBERTa's "full-sentences" input (Liu et al. 2019, section 4.2): the texts
    are concatenated in order, `[SEP]` between two texts, and cut into rows of
    `sequence_length - 2` tokens, so a row may cross from one text into the
    next. Only the last row is padded: every token of every text is used once,
    where next-sentence pairs leave about a fifth of each row as padding.

    Args:
        texts: list of str. Documents, in order.
        tokenizer: `wordpiece.WordPieceTokenizer`.
        sequence_length: int >= 3. Length of each row, specials included.
        verbose: `0`, `1` or `2`. A `keras.utils.Progbar` over tokenization when non-zero.

    Returns:
        Dict of numpy arrays: `token_ids` int32 `(n, sequence_length)` and
        `segment_ids` int32 `(n, sequence_length)` (all 0). No `nsp_labels`:
        `make_pretraining_dataset` gives the next-sentence head weight 0.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["good", "bad", "."])
    >>> packed_sequences(["Good. Bad.", "Bad."], tokenizer, sequence_length=6)["token_ids"].tolist()
    [[2, 7, 9, 8, 9, 3], [2, 3, 8, 9, 3, 0]]
    """
    from kformer.data import wordpiece

    if not isinstance(sequence_length, int) or sequence_length < 3:
        raise ValueError(f"`sequence_length` must be an int >= 3. Received: sequence_length={sequence_length!r}")
    docs = [d for d in _tokenize_sentences(texts, tokenizer, verbose=verbose) if d]
    if not docs:
        raise ValueError(f"Need at least 1 non-empty text. Received: {len(texts)} texts")
    cls, sep = tokenizer.ids[wordpiece.CLS], tokenizer.ids[wordpiece.SEP]
    stream = np.concatenate([np.append(np.concatenate(d), sep) for d in docs])[:-1].astype("int32")
    width = sequence_length - 2
    n = -(-len(stream) // width)
    body = np.zeros((n, width), "int32")
    body.flat[: len(stream)] = stream
    token_ids = np.zeros((n, sequence_length), "int32")
    token_ids[:, 0] = cls
    token_ids[:, 1:-1] = body
    token_ids[:-1, -1] = sep
    token_ids[-1, len(stream) - (n - 1) * width + 1] = sep  # after the last row's tokens
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids)}


def _tokenize_sentences(texts, tokenizer, chunk=1024, verbose=0):
    """list[str] -> per text, a list of int32 arrays, one per non-empty sentence."""
    import tensorflow as tf

    sentences = [split_sentences(t) for t in texts]
    flat = [s for doc in sentences for s in doc]
    # Traced: faster than the eager tokenizer.
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    tokens = []
    progress = keras.utils.Progbar(len(flat), verbose=verbose, unit_name="sentence") if verbose else None
    for start in range(0, len(flat), chunk):
        ragged = tokenize(tf.constant(flat[start : start + chunk]))
        ends = np.cumsum(ragged.row_lengths().numpy())[:-1]
        tokens.extend(np.split(ragged.flat_values.numpy(), ends))
        if progress:
            progress.update(min(start + chunk, len(flat)))
    docs, start = [], 0
    for doc in sentences:
        docs.append([t for t in tokens[start : start + len(doc)] if len(t)])
        start += len(doc)
    return docs


def _take(sentences, start, room):
    """Sentences from `start` while they fit in `room` tokens (at least one): (tokens, end)."""
    end, size = start + 1, len(sentences[start])
    while end < len(sentences) and size + len(sentences[end]) <= room:
        size, end = size + len(sentences[end]), end + 1
    return np.concatenate(sentences[start:end]), end


def _pairs_of(docs, d, budget, rng):
    """Yield `(A tokens, B tokens, label)` for document `d`."""
    doc, i = docs[d], 0
    while i < len(doc) - 1:  # A needs a continuation
        a, j = _take(doc[: len(doc) - 1], i, budget // 2)
        if rng.random() < 0.5:
            b, i = _take(doc, j, budget - len(a))
            yield a, b, 0
        else:
            other = docs[(d + 1 + rng.integers(len(docs) - 1)) % len(docs)]  # any doc but d
            b, _ = _take(other, rng.integers(len(other)), budget - len(a))
            i = j  # the unused continuation starts the next pair
            yield a, b, 1


def _truncate_pair(a, b, budget):
    """Trim the longer of A (from the front) / B (from the back) until both fit in `budget`."""
    if len(a) + len(b) <= budget:
        return a, b
    # Closed form of "remove one token from the longer until it fits"; ties trim B.
    keep_a = min(len(a), max(budget - len(b), (budget + 1) // 2))
    return a[len(a) - keep_a :], b[: budget - keep_a]


def masking_args(tokenizer):
    """`{"vocabulary_size", "num_special", "mask_id"}` for `mask_tokens`, checked against `tokenizer`.

    The special tokens must hold the first ids (true of learned vocabularies).

    Args:
        tokenizer: `WordPieceTokenizer`.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> masking_args(WordPieceTokenizer(list(SPECIAL_TOKENS) + ["good"]))
    {'vocabulary_size': 8, 'num_special': 7, 'mask_id': 4}
    """
    from kformer.data import wordpiece

    tokens = getattr(tokenizer, "special_tokens", wordpiece.SPECIAL_TOKENS)
    special = [tokenizer.ids[t] for t in tokens]
    if sorted(special) != list(range(len(special))):
        raise ValueError(f"Masked-LM data needs the special tokens {list(tokens)} at ids 0..{len(special) - 1} "
                         f"(a learned vocabulary's); a published vocabulary such as BERT's keeps them elsewhere. "
                         f"Received ids: {special}")
    return {"vocabulary_size": tokenizer.vocabulary_size, "num_special": len(special),
            "mask_id": tokenizer.ids[wordpiece.MASK]}


def default_max_masks(sequence_length, mask_rate=0.15):
    """`ceil(mask_rate * sequence_length)`: 20 for 128, as in BERT.

    Args:
        sequence_length: int.
        mask_rate: float. Defaults to `0.15`.

    Example:

    >>> default_max_masks(128)
    20
    """
    return max(1, int(np.ceil(mask_rate * sequence_length)))


def mask_tokens(token_ids, vocabulary_size, num_special, mask_id, rng, mask_rate=0.15, max_masks=None):
    """BERT masking: select `round(mask_rate * real tokens)` per row (1 to `max_masks`).

    Ids below `num_special` ([PAD], [CLS], [SEP], ...) are never selected. Of
    the selected tokens 80% become `mask_id`, 10% a random non-special id and
    10% stay unchanged; the model must predict all of them.

    Args:
        token_ids: int array `(n, seq)`.
        vocabulary_size: int. Random replacements are in `[num_special, vocabulary_size)`.
        num_special: int. Ids `< num_special` are special tokens or padding.
        mask_id: int. The `[MASK]` id.
        rng: `np.random.Generator`. The only source of randomness.
        mask_rate: float. Defaults to `0.15`.
        max_masks: int. Defaults to `default_max_masks(seq, mask_rate)`.

    Returns:
        Tuple `(masked_token_ids (n, seq), mask_positions int32 (n, max_masks),
        mask_ids int32 (n, max_masks), mask_weights float32 (n, max_masks))`.
        Positions are ascending then 0-padded; `mask_ids` are the original
        tokens (the labels); `mask_weights` is 1 for a real mask, 0 for padding.

    Example:

    >>> import numpy as np
    >>> ids = np.array([[2, 10, 11, 12, 13, 3, 0, 0]])
    >>> masked, positions, labels, weights = mask_tokens(ids, 20, 7, 4, np.random.default_rng(0), max_masks=2)
    >>> positions.shape, int(weights.sum()), bool(np.all(labels[weights > 0] == ids[0, positions[weights > 0]]))
    ((1, 2), 1, True)
    """
    token_ids = np.asarray(token_ids)
    n, length = token_ids.shape
    max_masks = max_masks or default_max_masks(length, mask_rate)
    if not 1 <= max_masks <= length:
        raise ValueError(f"`max_masks` must be in [1, {length}]. Received: max_masks={max_masks}")
    candidates = token_ids >= num_special
    num_real = candidates.sum(axis=1)
    num_masks = np.clip(np.rint(num_real * mask_rate), 1, max_masks).astype("int64")
    num_masks = np.minimum(num_masks, num_real)  # 0 for a row without real tokens
    # A random order of each row's candidates (non-candidates sort last).
    scores = np.where(candidates, rng.random((n, length)), 2.0)
    order = np.argsort(scores, axis=1, kind="stable")[:, :max_masks]
    picked = np.arange(max_masks) < num_masks[:, None]
    positions = np.sort(np.where(picked, order, length), axis=1)  # (n, max_masks), pads = length
    real = positions < length
    positions = np.where(real, positions, 0).astype("int32")
    mask_ids = np.where(real, np.take_along_axis(token_ids, positions, axis=1), 0).astype("int32")
    action = rng.random((n, max_masks))
    random_ids = rng.integers(num_special, vocabulary_size, (n, max_masks))
    new_ids = np.where(action < 0.8, mask_id, np.where(action < 0.9, random_ids, mask_ids))
    masked = token_ids.copy()
    rows, slots = np.nonzero(real)
    masked[rows, positions[rows, slots]] = new_ids[rows, slots]
    return masked, positions, mask_ids, real.astype("float32")


def make_pretraining_dataset(arrays, batch_size, *, vocabulary_size, num_special, mask_id,
                             max_masks=None, mask_rate=0.15, shuffle=False, seed=0,
                             dynamic_masking=True):
    """A batched `tf.data.Dataset` of `(x, y, sample_weight)` for `bert_pretrainer`.

    `x = {"token_ids", "segment_ids", "padding_mask" (bool), "mask_positions"}`,
    `y = {"mlm_logits": mask_ids, "nsp_logits": nsp_labels}`,
    `sample_weight = {"mlm_logits": mask_weights, "nsp_logits": ones}` (zeros, and
    labels 0, for arrays without `nsp_labels`); Keras
    applies these per-output weights on TensorFlow, JAX and PyTorch. With `dynamic_masking` (RoBERTa) each batch is masked anew by numpy inside
    `tf.numpy_function`, so every epoch sees new masks (one `seed`-ed stream per
    dataset: deterministic given the seed and the order of iteration). Without
    it the masks are drawn once, with `seed`.

    Args:
        arrays: dict from `segment_pairs` or `packed_sequences`.
        batch_size: int.
        vocabulary_size, num_special, mask_id: as in `mask_tokens`; see `masking_args`.
        max_masks: int. Defaults to `default_max_masks(sequence_length, mask_rate)`.
        mask_rate: float. Defaults to `0.15`.
        shuffle: bool. Reshuffle the pairs every epoch. Defaults to `False`.
        seed: int. Seed of shuffling and masking. Defaults to `0`.
        dynamic_masking: bool. Defaults to `True`.

    Example:

    >>> import numpy as np
    >>> arrays = {"token_ids": np.full((4, 8), 9, "int32"), "segment_ids": np.zeros((4, 8), "int32"),
    ...           "nsp_labels": np.zeros(4, "int32")}
    >>> x, y, weights = next(iter(make_pretraining_dataset(arrays, 2, vocabulary_size=20, num_special=7,
    ...                                                    mask_id=4)))
    >>> sorted(x), tuple(y["mlm_logits"].shape)
    (['mask_positions', 'padding_mask', 'segment_ids', 'token_ids'], (2, 2))
    """
    import tensorflow as tf

    from kformer.data.pipeline import data_options, without_autograph

    token_ids = np.asarray(arrays["token_ids"], "int32")
    length = token_ids.shape[1]
    max_masks = max_masks or default_max_masks(length, mask_rate)
    rng = np.random.default_rng(seed)

    def mask(ids):
        return mask_tokens(ids, vocabulary_size, num_special, mask_id, rng, mask_rate, max_masks)

    has_nsp = "nsp_labels" in arrays  # packed text has none: the NSP head gets weight 0
    nsp_labels = arrays["nsp_labels"] if has_nsp else np.zeros(len(token_ids))
    columns = (token_ids, np.asarray(arrays["segment_ids"], "int32"), np.asarray(nsp_labels, "int32"))
    if not dynamic_masking:
        columns = (*columns, *mask(token_ids))
    ds = tf.data.Dataset.from_tensor_slices(columns)
    if shuffle:
        ds = ds.shuffle(len(token_ids), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size)
    if dynamic_masking:
        def remask(ids, segments, nsp):
            out = tf.numpy_function(mask, [ids], [tf.int32, tf.int32, tf.int32, tf.float32])
            shapes = ([None, length], [None, max_masks], [None, max_masks], [None, max_masks])
            return (ids, segments, nsp, *(tf.ensure_shape(t, s) for t, s in zip(out, shapes)))

        ds = ds.map(without_autograph(remask))  # sequential (no num_parallel_calls): one rng, used in order

    def to_inputs(ids, segments, nsp, masked, positions, mask_ids, weights):
        nsp_weights = (tf.ones_like if has_nsp else tf.zeros_like)(nsp, tf.float32)
        return pretraining_inputs(masked, segments, positions, mask_ids, weights, nsp, nsp_weights)

    return ds.map(without_autograph(to_inputs)).prefetch(2).with_options(data_options())


def pretraining_inputs(masked, segment_ids, mask_positions, mask_ids, mask_weights, nsp_labels, nsp_weights):
    """One masked batch -> `(x, y, sample_weight)` for `bert_pretrainer` (numpy arrays or tf tensors).

    Args:
        masked: int `(batch, seq)`. Token ids after masking, 0 = padding.
        segment_ids: int `(batch, seq)`.
        mask_positions, mask_ids: int `(batch, max_masks)`, as `mask_tokens` returns them.
        mask_weights: float `(batch, max_masks)`. 1 for a real mask, 0 for padding.
        nsp_labels: int `(batch,)`. nsp_weights: float `(batch,)`.

    Example:

    >>> import numpy as np
    >>> ids = np.array([[2, 4, 9, 3, 0]])
    >>> x, y, w = pretraining_inputs(ids, 0 * ids, np.array([[1]]), np.array([[8]]), np.ones((1, 1)),
    ...                              np.array([1]), np.ones(1))
    >>> x["padding_mask"].tolist(), sorted(y), sorted(w)
    ([[True, True, True, True, False]], ['mlm_logits', 'nsp_logits'], ['mlm_logits', 'nsp_logits'])
    """
    x = {"token_ids": masked, "segment_ids": segment_ids, "padding_mask": masked != 0,
         "mask_positions": mask_positions}
    y = {"mlm_logits": mask_ids, "nsp_logits": nsp_labels}
    return x, y, {"mlm_logits": mask_weights, "nsp_logits": nsp_weights}


def masked_accuracy(mask_ids, mlm_logits, mask_weights):
    """Accuracy over real mask positions only: `(n, m)`, `(n, m, vocab)`, `(n, m)` -> float.

    In `compile`, `weighted_metrics={"mlm_logits": ["sparse_categorical_accuracy"]}`
    computes the same during `fit`/`evaluate`.

    Args:
        mask_ids: int `(n, m)`. The original tokens at the masked positions.
        mlm_logits: float `(n, m, vocab)`.
        mask_weights: float `(n, m)`. 1 for a real mask, 0 for padding.

    Example:

    >>> import numpy as np
    >>> masked_accuracy([[1, 2]], np.eye(3)[None, [1, 0]], [[1.0, 0.0]])  # the padded slot is ignored
    1.0
    """
    hits = np.argmax(np.asarray(mlm_logits), axis=-1) == np.asarray(mask_ids)
    weights = np.asarray(mask_weights, "float64")
    return float((hits * weights).sum() / max(weights.sum(), 1.0))
