"""Translation training data: tokenized pairs -> teacher-forcing batches padded to length buckets.

    preprocessor = TranslatorPreprocessor(en_tokenizer, es_tokenizer, sequence_length=40)
    ds = preprocessor.dataset(sources, targets, batch_size=64, shuffle=True)   # bucketed_dataset below
"""

import numpy as np
import tensorflow as tf

from kformer.data.pipeline import data_options, without_autograph

BUCKET_WIDTH = 8  # batches are padded to multiples of 8 (and to sequence_length)


def bucket_lengths(sequence_length):
    """Padded lengths of the batches: multiples of 8 below `sequence_length`, then it.

    Args:
        sequence_length: int.

    Example:

    >>> bucket_lengths(20)
    [8, 16, 20]
    """
    return [*range(BUCKET_WIDTH, sequence_length, BUCKET_WIDTH), sequence_length]


def bucketed_dataset(preprocessor, sources, targets, batch_size, shuffle=False, seed=0):
    """Teacher-forcing `tf.data.Dataset` for `model.fit`, batched by length buckets.

    `TranslatorPreprocessor.dataset` calls this. Each element is
    `({"encoder_token_ids": (batch, n), "decoder_token_ids": (batch, n)},
    labels (batch, n))`, int32, 0 = padding, where `n` is one of
    `bucket_lengths(preprocessor.sequence_length)`: the preprocessor's
    tokenization and teacher forcing, padded to the bucket instead of the full
    length. Texts are tokenized once, up front. A bucket's last batch may be
    smaller, so at most `2 * len(bucket_lengths(...))` shapes occur, the same
    every epoch.

    Args:
        preprocessor: `kformer.data.preprocessors.TranslatorPreprocessor`.
        sources, targets: lists of str of the same length.
        batch_size: int. Examples per batch.
        shuffle: bool. Reshuffle the examples every epoch. Defaults to `False`.
        seed: int. Shuffle seed. Defaults to `0`.

    Example:

    >>> from kformer.data.preprocessors import TranslatorPreprocessor
    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["hola", "hello"])
    >>> ds = bucketed_dataset(TranslatorPreprocessor(tokenizer, tokenizer, 20), ["hello"] * 3, ["hola"] * 3, 2)
    >>> [tuple(labels.shape) for _, labels in ds]  # padded to the 8-token bucket, not to 20
    [(2, 8), (1, 8)]
    """
    if len(sources) != len(targets) or not sources:
        raise ValueError("`sources` and `targets` must be non-empty and of the same length. "
                         f"Received: {len(sources)} sources, {len(targets)} targets")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1. Received: batch_size={batch_size!r}")
    length = preprocessor.sequence_length
    source_ids = _tokenize(preprocessor.source_tokenizer, preprocessor.prepare, sources, length)
    target_ids = _tokenize(preprocessor.target_tokenizer, preprocessor.prepare, targets, length - 1)

    def teacher_forcing(source, target):  # (n_src,), (n_tgt,) -> inputs, labels (n_tgt + 1,)
        decoder, labels = preprocessor.teacher_forcing(tf.RaggedTensor.from_tensor(target[None]))
        return {"encoder_token_ids": source, "decoder_token_ids": decoder[0]}, labels[0]

    ds = tf.data.Dataset.from_tensor_slices((source_ids, target_ids))
    if shuffle:
        ds = ds.shuffle(len(sources), seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(without_autograph(teacher_forcing)).bucket_by_sequence_length(
        lambda inputs, labels: tf.maximum(tf.shape(inputs["encoder_token_ids"])[0], tf.shape(labels)[0]),
        bucket_boundaries=[n + 1 for n in bucket_lengths(length)],  # bucket i: length < boundary
        bucket_batch_sizes=[batch_size] * (len(bucket_lengths(length)) + 1),
        pad_to_bucket_boundary=True)  # pads every tensor to boundary - 1 = bucket length
    ds = ds.apply(tf.data.experimental.assert_cardinality(
        _num_batches(source_ids, target_ids, length, batch_size)))
    return ds.prefetch(2).with_options(data_options())


def _num_batches(source_ids, target_ids, sequence_length, batch_size):
    """Batches per epoch: a known count gives fit() a progress bar and no 'ran out of data' warning."""
    lengths = np.maximum(source_ids.row_lengths().numpy(), target_ids.row_lengths().numpy() + 1)
    per_bucket = np.bincount(np.searchsorted(bucket_lengths(sequence_length), lengths))
    return int(np.sum(-(-per_bucket // batch_size)))


def _tokenize(tokenizer, prepare, texts, max_tokens, chunk_size=2000):
    """list of str -> int32 RaggedTensor (len(texts), (<= max_tokens)), in chunks; `prepare`: tf.string -> tf.string."""
    chunks = [tokenizer.tokenize(prepare(tf.constant(texts[i:i + chunk_size])))[:, :max_tokens]
              for i in range(0, len(texts), chunk_size)]
    return tf.concat(chunks, axis=0)
