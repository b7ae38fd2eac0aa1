"""Prepared data cached under `<output-dir>/<name>/_prepared/`, keyed by what produced it.

Learning a vocabulary, building next-sentence pairs, or packing masked-LM
sequences or language-model windows on the full data takes minutes. Each
result is stored once, in a file named by a hash of its input texts and
arguments: a rerun, a resume, or a run with other training flags on
the same data reuses it; other text or arguments prepare afresh. Writes are
atomic (a temporary file, then a rename). TF Serving ignores the non-numeric
folder; delete it to free the space.
"""

import hashlib
import os
import pathlib
import shutil
import time

import numpy as np

from kformer.export import versioning

FORMAT = 1  # bump when a prepared file's content changes for the same inputs


def digest(*parts):
    """Hex digest of `parts`: str, int, float, None, or lists of str (texts)."""
    h = hashlib.sha256(f"kformer-prepared-{FORMAT}".encode())
    for part in parts:
        if isinstance(part, (list, tuple)):
            h.update(f"list:{len(part)}".encode())
            for text in part:
                data = text.encode("utf-8")
                h.update(len(data).to_bytes(8, "little") + data)
        else:
            h.update(f"{type(part).__name__}:{part!r};".encode())
    return h.hexdigest()[:20]


def cache_dir(output_dir, name):
    return pathlib.Path(output_dir) / name / "_prepared"


def tokenizer(cache, label, texts, vocabulary_size, work_path, verbose=0):
    """The WordPiece vocabulary for `texts`: from `work_path` (a resumed run), the cache, or learned.

    A resumed run keeps the vocabulary its first epochs were trained with;
    otherwise the cached one for the same texts and size is reused, or a new
    one is learned and cached. `work_path` always ends up holding it.
    """
    from kformer.data.wordpiece import WordPieceTokenizer

    work_path = pathlib.Path(work_path)
    if work_path.is_file():
        return WordPieceTokenizer.load(work_path)
    path = pathlib.Path(cache) / f"{label}-{digest(texts, vocabulary_size)}.txt"
    if path.is_file():
        _say(verbose, f"{label}: reusing {path}")
        result = WordPieceTokenizer.load(path)
    else:
        start = time.time()
        result = WordPieceTokenizer.learn(texts, vocabulary_size, verbose=verbose)
        _atomic(path, result.save)
        _say(verbose, f"{label}: learned {result.vocabulary_size} tokens in {time.time() - start:.0f} s, cached "
                      f"at {path}")
    _atomic(work_path, lambda tmp: shutil.copyfile(path, tmp))
    return result


def nsp_pairs(cache, texts, tok, sequence_length, seed, verbose=0):
    """`mlm.segment_pairs(texts, tok, sequence_length, seed)`, cached as a compressed npz."""
    from kformer.data import mlm

    path = pathlib.Path(cache) / f"nsp_pairs-{digest(texts, list(tok.vocabulary), sequence_length, seed)}.npz"
    return _cached_arrays(path, "next-sentence pairs", verbose,
                          lambda: mlm.segment_pairs(texts, tok, sequence_length, seed=seed, verbose=verbose))


def mlm_sequences(cache, texts, tok, sequence_length, verbose=0):
    """`mlm.packed_sequences(texts, tok, sequence_length)`, cached as a compressed npz."""
    from kformer.data import mlm

    path = pathlib.Path(cache) / f"mlm_sequences-{digest(texts, list(tok.vocabulary), sequence_length)}.npz"
    return _cached_arrays(path, "packed sequences", verbose,
                          lambda: mlm.packed_sequences(texts, tok, sequence_length, verbose=verbose))


def lm_windows(cache, texts, preprocessor, verbose=0):
    """`lm.packed_windows(preprocessor, texts)`, cached as a compressed npz."""
    from kformer.data import lm

    tok = preprocessor.tokenizer
    path = pathlib.Path(cache) / f"lm_windows-{digest(texts, list(tok.vocabulary), preprocessor.sequence_length)}.npz"
    return _cached_arrays(path, "language-model windows", verbose,
                          lambda: {"windows": lm.packed_windows(preprocessor, texts, verbose=verbose)})["windows"]


def _cached_arrays(path, label, verbose, build):
    """The dict of int arrays stored at `path`, else `build()`'s, stored in the narrowest unsigned dtype."""
    if path.is_file():
        _say(verbose, f"{label}: reusing {path}")
        with np.load(path) as saved:
            return {k: saved[k].astype("int32") for k in saved.files}
    start = time.time()
    arrays = build()
    _save_npz(path, **{k: v.astype(_narrowest(v)) for k, v in arrays.items()})
    rows = len(next(iter(arrays.values())))
    _say(verbose, f"{label}: {rows} built in {time.time() - start:.0f} s, cached at {path}")
    return arrays


def _narrowest(values):
    top = int(values.max(initial=0))
    if values.size and int(values.min()) < 0:
        return "int32"
    return "uint8" if top < 2**8 else "uint16" if top < 2**16 else "int32"


def _save_npz(path, **arrays):
    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    _atomic(path, write)


def _atomic(path, write):
    """Call `write(tmp_path)`, then rename the temporary file to `path` (killed writers' files go first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    versioning.remove_abandoned_writes(path.parent)
    tmp = versioning.temporary_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _say(verbose, message):
    if verbose:
        print(message, flush=True)
