"""Versioned, atomic output directories: `<base>/<1, 2, ...>` as TF Serving watches them."""

import os
import pathlib
import shutil
import socket
import tempfile


def next_version(base_dir):
    """Smallest integer version above every existing `base_dir/<int>` (1 if none).

    Files count too: a stray file named `3` makes the next version 4.

    Args:
        base_dir: path.

    Example:

    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> (base / "3").mkdir()
    >>> next_version(base)
    4
    """
    base_dir = pathlib.Path(base_dir)
    versions = [int(p.name) for p in base_dir.iterdir() if p.name.isdigit()] if base_dir.is_dir() else []
    return max(versions, default=0) + 1


def _tmp_prefix():
    """`.tmp-<host>-`: a writer's temporary folder is `.tmp-<host>-<pid>-<random>`."""
    return f".tmp-{socket.gethostname().replace('-', '_')}-"


def temporary_path(path):
    """`path`'s temporary sibling for an atomic write, `.tmp-<host>-<pid>-<name>`."""
    path = pathlib.Path(path)
    return path.with_name(f"{_tmp_prefix()}{os.getpid()}-{path.name}")


def remove_abandoned_writes(base_dir):
    """Delete the temporary folders (or files) that killed writers on this host left in `base_dir`.

    A writer that dies (SIGKILL, power loss) before its rename leaves
    `.tmp-<host>-<pid>-*`; the folder is removed once no process `<pid>`
    runs. Other hosts' folders (a shared file system) are left alone.
    Returns the removed paths.
    """
    removed, prefix = [], _tmp_prefix()
    for path in pathlib.Path(base_dir).glob(f"{prefix}*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def write_new_version(base_dir, write, version=None):
    """Call `write(tmp_dir)`, then rename `tmp_dir` to `base_dir/<next version>`.

    The version directory appears whole or not at all, and an existing
    version is never overwritten: if another writer takes the number first,
    the next free one is used. Temporary folders of killed writers are
    removed first (`remove_abandoned_writes`). With an explicit `version`, an existing one is
    an error. Returns the final path.

    Args:
        base_dir: path. Created if missing.
        write: callable `(tmp_dir: pathlib.Path) -> None` that fills the version.
        version: int >= 1, or None for the next free one.

    Example:

    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> write_new_version(base, lambda tmp: (tmp / "model.txt").write_text("weights")).name
    '1'
    """
    base_dir = pathlib.Path(base_dir)
    if base_dir.exists() and not base_dir.is_dir():
        raise ValueError(f"`base_dir` must be a directory; {base_dir} is a file.")
    if version is not None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"`version` must be an int >= 1. Received: version={version!r}")
        if (base_dir / str(version)).exists():
            raise ValueError(f"Version {version} already exists in {base_dir}; versions are never "
                             "overwritten. Pass another `version` or None for the next free one.")
    base_dir.mkdir(parents=True, exist_ok=True)
    remove_abandoned_writes(base_dir)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"{_tmp_prefix()}{os.getpid()}-", dir=base_dir))
    try:
        write(tmp_dir)
        for _ in range(100):  # other writers may take numbers first; never loop forever
            final = base_dir / str(version or next_version(base_dir))
            if final.exists() and version is None:
                continue  # appeared after next_version looked
            try:
                os.rename(tmp_dir, final)  # fails if `final` exists (unless an empty folder)
                return final
            except OSError:
                if not final.exists() or version is not None:
                    raise
        raise RuntimeError(f"Could not claim a new version number in {base_dir} after 100 tries.")
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
