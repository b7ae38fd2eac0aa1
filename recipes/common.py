"""Shared recipe plumbing: versioned, atomic output directories."""

import os
import pathlib
import shutil
import tempfile


def next_version(base_dir):
    """Smallest integer version above every existing `base_dir/<int>` (1 if none)."""
    base_dir = pathlib.Path(base_dir)
    versions = [int(p.name) for p in base_dir.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0) + 1


def write_new_version(base_dir, write):
    """Call `write(tmp_dir)`, then rename `tmp_dir` to `base_dir/<next version>`.

    The version directory appears whole or not at all, and an existing
    version is never overwritten: if another writer takes the number first,
    the next free one is used. Returns the final path.
    """
    base_dir = pathlib.Path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=".tmp-", dir=base_dir))
    try:
        write(tmp_dir)
        while True:
            final = base_dir / str(next_version(base_dir))
            try:
                os.rename(tmp_dir, final)  # fails if `final` exists (and is not empty)
                return final
            except OSError:
                if not final.exists():
                    raise
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
