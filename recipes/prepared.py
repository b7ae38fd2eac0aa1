"""Prepared data cached under `<output-dir>/<name>/_prepared/`, keyed by what produced it.

Learning a vocabulary, building next-sentence pairs, or packing masked-LM
sequences or language-model windows on the full data takes minutes. Each
result is stored once, in a file named by a hash of its input texts and
arguments: a rerun, a resume, or a run with other training flags on
the same data reuses it; other text or arguments prepare afresh. Writes are
atomic (a temporary file, then a rename), and the name ends with the first
20 hex digits of the content's SHA-256 (`vocabulary-<inputs>-<content>.txt`):
a file that does not match it (cut short, overwritten, a bad disk block),
has none, or does not load is removed and rebuilt, with a message. TF
Serving ignores the non-numeric folder; delete it to free the space.
"""

import argparse
import hashlib
import io
import os
import pathlib
import shutil
import sys
import tempfile
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
    stem = pathlib.Path(cache) / f"{label}-{digest(texts, vocabulary_size)}"
    path, result = _load_checked(stem, ".txt", lambda path, data: WordPieceTokenizer.load(path))
    if path is not None:
        _say(verbose, f"{label}: reusing {path}")
    else:
        start = time.time()
        result = WordPieceTokenizer.learn(texts, vocabulary_size, verbose=verbose)
        path = _store_checked(stem, ".txt", result.save)
        _say(verbose, f"{label}: learned {result.vocabulary_size} tokens in {time.time() - start:.0f} s, cached "
                      f"at {path}")
    _atomic(work_path, lambda tmp: shutil.copyfile(path, tmp))
    return result


def nsp_pairs(cache, texts, tok, sequence_length, seed, verbose=0):
    """`mlm.segment_pairs(texts, tok, sequence_length, seed)`, cached as a compressed npz."""
    from kformer.data import mlm

    path = pathlib.Path(cache) / f"nsp_pairs-{digest(texts, list(tok.vocabulary), sequence_length, seed)}"
    return _cached_arrays(path, "next-sentence pairs", verbose,
                          lambda: mlm.segment_pairs(texts, tok, sequence_length, seed=seed, verbose=verbose))


def mlm_sequences(cache, texts, tok, sequence_length, verbose=0):
    """`mlm.packed_sequences(texts, tok, sequence_length)`, cached as a compressed npz."""
    from kformer.data import mlm

    path = pathlib.Path(cache) / f"mlm_sequences-{digest(texts, list(tok.vocabulary), sequence_length)}"
    return _cached_arrays(path, "packed sequences", verbose,
                          lambda: mlm.packed_sequences(texts, tok, sequence_length, verbose=verbose))


def lm_windows(cache, texts, preprocessor, verbose=0):
    """`lm.packed_windows(preprocessor, texts)`, cached as a compressed npz."""
    from kformer.data import lm

    tok = preprocessor.tokenizer
    path = pathlib.Path(cache) / f"lm_windows-{digest(texts, list(tok.vocabulary), preprocessor.sequence_length)}"
    return _cached_arrays(path, "language-model windows", verbose,
                          lambda: {"windows": lm.packed_windows(preprocessor, texts, verbose=verbose)})["windows"]


def _cached_arrays(stem, label, verbose, build):
    """The dict of int arrays cached as `<stem>-<checksum>.npz`, else `build()`'s, stored in the narrowest
    unsigned dtype."""
    def load(path, data):
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            return {k: saved[k].astype("int32") for k in saved.files}

    path, arrays = _load_checked(stem, ".npz", load)
    if path is not None:
        _say(verbose, f"{label}: reusing {path}")
        return arrays
    start = time.time()
    arrays = build()
    path = _save_npz(stem, **{k: v.astype(_narrowest(v)) for k, v in arrays.items()})
    rows = len(next(iter(arrays.values())))
    _say(verbose, f"{label}: {rows} built in {time.time() - start:.0f} s, cached at {path}")
    return arrays


def _narrowest(values):
    top = int(values.max(initial=0))
    if values.size and int(values.min()) < 0:
        return "int32"
    return "uint8" if top < 2**8 else "uint16" if top < 2**16 else "int32"


def _save_npz(stem, **arrays):
    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    return _store_checked(stem, ".npz", write)


def _checksum(data):
    return hashlib.sha256(data).hexdigest()[:20]


def _load_checked(stem, suffix, load):
    """(path, `load(path, data)`) of a cached `<stem>-<checksum><suffix>` whose content matches its name.

    A file that does not match, has no checksum in its name (`<stem><suffix>`,
    written before checksums) or fails to load is removed, saying why, and
    (None, None) returned: the caller rebuilds it.
    """
    candidates = sorted(stem.parent.glob(f"{stem.name}-*{suffix}")) + [stem.with_name(stem.name + suffix)]
    for path in candidates:
        if not path.is_file():
            continue
        expected = path.name[len(stem.name) + 1:-len(suffix)] if path.name != stem.name + suffix else None
        try:
            data = path.read_bytes()
            if expected is None:
                problem = "has no checksum in its name"
            elif _checksum(data) != expected:
                problem = "does not match its checksum (damaged)"
            else:
                return path, load(path, data)
        except Exception as err:  # noqa: BLE001 (a damaged file: UnicodeDecodeError, zipfile.BadZipFile, ...)
            problem = f"does not load ({type(err).__name__}: {str(err)[:200]})"
        print(f"warning: the cached {path} {problem}; removed, rebuilding it", file=sys.stderr, flush=True)
        path.unlink(missing_ok=True)
    return None, None


def _store_checked(stem, suffix, write):
    """`write(tmp_path)`, then rename it to `<stem>-<checksum of its content><suffix>`; returns that path."""
    def name(tmp):
        return stem.with_name(f"{stem.name}-{_checksum(tmp.read_bytes())}{suffix}")

    return _atomic(stem.with_name(stem.name + suffix), write, name)


def _atomic(path, write, name=None):
    """Call `write(tmp_path)`, then rename the temporary file to `path` (or `name(tmp_path)`); returns it.

    Killed writers' temporary files go first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    versioning.remove_abandoned_writes(path.parent)
    tmp = versioning.temporary_path(path)
    try:
        write(tmp)
        final = path if name is None else name(tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def _say(verbose, message):
    if verbose:
        print(message, flush=True)


def main():
    """Times this cache: mini-BERT's data preparation (vocabulary, next-sentence pairs) on a fresh cache
    folder, then the same calls served from it.

        python -m recipes.prepared --data-dir DATA          # 50k unlabeled + 25k train reviews
        python -m recipes.prepared --max-examples 2000      # bundled samples, quick
    """
    p = argparse.ArgumentParser(description="Times the _prepared cache: first run vs cached rerun.")
    p.add_argument("--data-dir", default=None, help="full IMDB (default: the bundled sample)")
    p.add_argument("--max-examples", type=int, default=None)
    p.add_argument("--vocabulary-size", type=int, default=8000)
    p.add_argument("--sequence-length", type=int, default=128)
    args = p.parse_args()
    from kformer.data import imdb

    start = time.time()
    texts = [t for split in ("unsup", "train")
             for t in imdb.load_split(split, data_dir=args.data_dir, max_examples=args.max_examples)[0]]
    print(f"loaded {len(texts)} reviews in {time.time() - start:.1f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for run in ("first", "cached"):
            times = {}
            start = time.time()
            tok = tokenizer(tmp, "vocabulary", texts, args.vocabulary_size, f"{tmp}/{run}/vocabulary.txt",
                                     verbose=2)
            times["vocabulary"] = time.time() - start
            start = time.time()
            pairs = nsp_pairs(tmp, texts, tok, args.sequence_length, 1337, verbose=2)
            times["nsp_pairs"] = time.time() - start
            runs.append(times)
            print(f"{run}: vocabulary {times['vocabulary']:.1f} s, {len(pairs['nsp_labels'])} next-sentence "
                  f"pairs {times['nsp_pairs']:.1f} s", flush=True)
        first, cached = (sum(r.values()) for r in runs)
        print(f"preparation: first {first:.1f} s, cached {cached:.1f} s ({first / cached:.0f}x faster)")


if __name__ == "__main__":
    main()
