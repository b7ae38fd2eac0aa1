"""Versioned, atomic output directories: `<base>/<1, 2, ...>` as TF Serving watches them."""

import os
import pathlib
import shutil
import socket
import tempfile


MAX_VERSION = 2**63 - 1  # TF Serving reads a version folder's name as an int64


def versions(base_dir):
    """`{version: name}` of the entries in `base_dir` that TF Serving reads as versions kformer writes.

    A name counts when it is ASCII digits (`0-9` only; leading zeros allowed,
    `007` is version 7) with a value in 1 .. `MAX_VERSION` (2**63 - 1). Any
    other name is ignored: `²` or `٣` (digits to `str.isdigit` but not to
    TF Serving), `0`, and numbers past int64 such as `99999999999999999999`,
    which TF Serving cannot read as a version either. Files count too.

    Args:
        base_dir: path. A missing folder has no versions.
    """
    base_dir = pathlib.Path(base_dir)
    found = {}
    for path in base_dir.iterdir() if base_dir.is_dir() else ():
        if path.name.isascii() and path.name.isdigit() and 1 <= int(path.name) <= MAX_VERSION:
            found.setdefault(int(path.name), path.name)
    return found


def newest_version(base_dir):
    """The largest version in `base_dir` (see `versions`), 0 if none."""
    return max(versions(base_dir), default=0)


def next_version(base_dir):
    """Smallest integer version above every existing `base_dir/<int>` (1 if none).

    Files count too: a stray file named `3` makes the next version 4. Names
    that are not versions in 1 .. 2**63 - 1 are ignored (see `versions`).

    Args:
        base_dir: path.

    Raises:
        ValueError: `base_dir` already holds version 2**63 - 1, TF Serving's
            largest: there is no next one.

    Example:

    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> (base / "3").mkdir()
    >>> next_version(base)
    4
    """
    newest = newest_version(base_dir)
    if newest >= MAX_VERSION:
        raise ValueError(f"{base_dir} already holds version {newest}, the largest TF Serving reads "
                         f"(2**63 - 1): there is no next version. Pass an explicit free `version` "
                         f"or another folder.")
    return newest + 1


def check_version(version):
    """A ValueError unless `version` is an int in 1 .. 2**63 - 1 (None passes: the next free one)."""
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)
                                or not 1 <= version <= MAX_VERSION):
        raise ValueError(f"`version` must be an int in [1, 2**63 - 1 = {MAX_VERSION}] (TF Serving reads "
                         f"versions as int64), or None for the next free one. Received: version={version!r}")


def check_base_dir(base_dir, argument="base_dir"):
    """A ValueError unless `base_dir` is a folder, or a path whose nearest existing part is a folder
    (it is created below it), that this process can write. `argument` names it in the message."""
    base_dir = pathlib.Path(base_dir)
    for path in (base_dir, *base_dir.parents):
        if not path.exists():
            continue
        if not path.is_dir():
            where = "" if path == base_dir else f" (cannot create {base_dir} below it)"
            raise ValueError(f"`{argument}` must be a directory; {path} is a file{where}. "
                             f"Received: {argument}={str(base_dir)!r}")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"`{argument}` must be a directory this process can write; {path} is not "
                             f"writable. Received: {argument}={str(base_dir)!r}")
        return


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


def write_new_version(base_dir, write, version=None, argument="base_dir"):
    """Call `write(tmp_dir)`, then rename `tmp_dir` to `base_dir/<next version>`.

    The version directory appears whole or not at all, and an existing
    version is never overwritten: if another writer takes the number first,
    the next free one is used. Temporary folders of killed writers are
    removed first (`remove_abandoned_writes`). With an explicit `version`, an existing one is
    an error. Returns the final path.

    Args:
        base_dir: path. Created if missing. A path below a file, or one
            this process cannot write, is a ValueError before `write` runs.
        write: callable `(tmp_dir: pathlib.Path) -> None` that fills the version.
        version: int in 1 .. 2**63 - 1 (TF Serving's int64), or None for
            the next free one (`next_version`).
        argument: str. The caller's name for `base_dir` in error messages.

    Example:

    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> write_new_version(base, lambda tmp: (tmp / "model.txt").write_text("weights")).name
    '1'
    """
    base_dir = pathlib.Path(base_dir)
    check_base_dir(base_dir, argument)
    check_version(version)
    if version is not None and version in versions(base_dir):
        raise ValueError(f"Version {version} already exists in {base_dir} (as {versions(base_dir)[version]!r}); "
                         "versions are never overwritten. Pass another `version` or None for the next free one.")
    if version is None:
        next_version(base_dir)  # no next version: an error now, not after `write`
    try:
        base_dir.mkdir(parents=True, exist_ok=True)
    except PermissionError as err:  # `check_base_dir`'s os.access answered for another user
        raise ValueError(f"`{argument}` must be a directory this process can write; {err}. "
                         f"Received: {argument}={str(base_dir)!r}") from err
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
