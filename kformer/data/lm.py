"""Language-model training data: texts -> contiguous token windows (no padding), as GPT-2 trains.

    preprocessor = CausalLMPreprocessor(tokenizer, sequence_length=128)
    ds = preprocessor.dataset(texts, batch_size=32, shuffle=True)   # packed_dataset below
"""

import numpy as np


def pack(token_lists, window):
    """Concatenate token id lists and cut `(n, window)` rows; the last partial window is dropped.

    Args:
        token_lists: list of int sequences (each already `[START] ... [END]`).
        window: int >= 2. Tokens per row.

    Returns:
        int32 numpy `(n, window)`, `n = total tokens // window`.

    Example:

    >>> pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], window=4).tolist()
    [[1, 2, 3, 4], [5, 6, 7, 8]]
    """
    if not isinstance(window, int) or window < 2:
        raise ValueError(f"`window` must be an int >= 2. Received: window={window!r}")
    flat = np.concatenate([np.asarray(t, "int32") for t in token_lists]) if token_lists else np.zeros(0, "int32")
    n = len(flat) // window
    return flat[: n * window].reshape(n, window)


def packed_dataset(preprocessor, texts, batch_size, shuffle=False, seed=0):
    """Batched `tf.data.Dataset` of `(token_ids, labels)` `(batch, sequence_length)` from packed texts.

    `packed_windows` then `windows_dataset`: inputs are a window's first
    `sequence_length` tokens, labels its last `sequence_length`.

    Args:
        preprocessor: `kformer.data.preprocessors.CausalLMPreprocessor`.
        texts: list of str.
        batch_size: int.
        shuffle: bool. Reshuffle the windows every epoch. Defaults to `False`.
        seed: int. Defaults to `0`.

    Example:

    >>> from kformer.data.preprocessors import CausalLMPreprocessor
    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "good", "film"])
    >>> ds = packed_dataset(CausalLMPreprocessor(tokenizer, 4), ["a good film"] * 4, batch_size=2)
    >>> [tuple(x.shape) for x, y in ds]  # 20 tokens -> four 5-token windows
    [(2, 4), (2, 4)]
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1. Received: batch_size={batch_size!r}")
    return windows_dataset(packed_windows(preprocessor, texts), batch_size, shuffle, seed)


def packed_windows(preprocessor, texts, verbose=0):
    """Texts -> int32 numpy `(n, sequence_length + 1)`: every text as `[START] text [END]`, concatenated, cut.

    Tokenizes with the preprocessor's tokenizer, in compiled chunks of 2048
    texts; the last partial window is dropped.

    Args:
        preprocessor: `kformer.data.preprocessors.CausalLMPreprocessor`.
        texts: list of str.
        verbose: `0`, `1` or `2`: a `keras.utils.Progbar` over the texts when non-zero. Defaults to `0`.

    Example:

    >>> from kformer.data.preprocessors import CausalLMPreprocessor
    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "good", "film"])
    >>> packed_windows(CausalLMPreprocessor(tokenizer, 4), ["a good film"] * 4).tolist()[0]  # START a good film END
    [5, 7, 8, 9, 6]
    """
    import keras
    import tensorflow as tf

    from kformer.data.wordpiece import END, START

    if not texts:
        raise ValueError("`texts` is empty: a language model needs training text.")
    tokenizer, window = preprocessor.tokenizer, preprocessor.sequence_length + 1
    start, end = tokenizer.token_to_id(START), tokenizer.token_to_id(END)
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    progress = keras.utils.Progbar(len(texts), verbose=verbose, unit_name="text") if verbose else None
    token_lists = []
    for i in range(0, len(texts), 2048):
        for row in tokenize(tf.constant(texts[i:i + 2048])).to_list():
            token_lists.append([start, *row, end])
        if progress:
            progress.update(min(i + 2048, len(texts)))
    windows = pack(token_lists, window)
    if not len(windows):
        raise ValueError(f"The texts hold {sum(map(len, token_lists))} tokens: fewer than one window of "
                         f"sequence_length + 1 = {window}. Received: {len(texts)} texts")
    return windows


def windows_dataset(windows, batch_size, shuffle=False, seed=0):
    """Batched `(token_ids, labels)` `(batch, window - 1)` from `packed_windows` rows.

    Args:
        windows: int numpy `(n, window)`.
        batch_size: int.
        shuffle: bool. Reshuffle the windows every epoch. Defaults to `False`.
        seed: int. Defaults to `0`.

    Example:

    >>> import numpy as np
    >>> ds = windows_dataset(np.arange(15).reshape(3, 5), batch_size=2)
    >>> [(x.numpy().tolist(), y.numpy().tolist()) for x, y in ds][1]
    ([[10, 11, 12, 13]], [[11, 12, 13, 14]])
    """
    import tensorflow as tf

    from kformer.data.pipeline import data_options, without_autograph

    ds = tf.data.Dataset.from_tensor_slices(windows)
    if shuffle:
        ds = ds.shuffle(len(windows), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size).map(without_autograph(lambda w: (w[:, :-1], w[:, 1:])))
    return ds.prefetch(2).with_options(data_options())
