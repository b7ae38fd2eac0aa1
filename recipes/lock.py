"""One run at a time in a `_training/` folder: `_training.lock`, holding the host and process id.

The lock is the operating system's (`fcntl.flock` on the open file), so it
is race-free and a killed run's lock is free the moment it dies: the next
run takes it over (and says so), then resumes from the killed run's
backups. A second run while the first is alive gets `HeldError`, naming
the holder. Where there is no `flock` (Windows, some network mounts), the
host and process id in the file decide instead.
"""

import errno
import json
import os
import pathlib
import socket

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

_held = {}  # path -> open file descriptor: the locks this process holds


class HeldError(Exception):
    """A live process holds the lock at `path`; `holder` is its {"host", "pid"} (None if unreadable)."""

    def __init__(self, path, holder):
        self.path, self.holder = path, holder
        who = f"host {holder.get('host')}, pid {holder.get('pid')}" if holder else "an unknown process"
        super().__init__(f"{path} is held by another run ({who})")


def acquire(path):
    """Lock `path` (created if missing) for this process; a lock it already holds is kept.

    A lock file left by a process that no longer runs is taken over, with a
    message. Raises `HeldError` when a live process holds it.
    """
    path = pathlib.Path(path).absolute()
    if path in _held:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _flock(fd)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise HeldError(path, holder) from None
        try:  # the holder removed the file between our open and lock: lock the one there now
            same = os.path.samestat(os.stat(path), os.fstat(fd))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    holder = _read(fd)
    if holder and not locked and _alive(holder):
        os.close(fd)
        raise HeldError(path, holder)
    if holder:
        print(f"taking over the lock {path} of a run that no longer runs (host {holder.get('host')}, "
              f"pid {holder.get('pid')})", flush=True)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode(), 0)
    os.fsync(fd)
    _held[path] = fd
    return path


def release(path):
    """Remove the lock file at `path` and unlock it, if this process holds it."""
    path = pathlib.Path(path).absolute()
    fd = _held.pop(path, None)
    if fd is not None:
        try:
            path.unlink(missing_ok=True)  # before unlocking: a waiting opener then sees another file
        finally:
            os.close(fd)


def release_all():
    """Release every lock this process holds."""
    for path in list(_held):
        release(path)


def _flock(fd):
    """True once `fd` is locked; False where the file system has no `flock`. BlockingIOError: held."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as err:
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            return False
        raise
    return True


def _read(fd):
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(holder):
    """True unless `holder` names a process of this host that no longer runs."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
