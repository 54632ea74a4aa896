"""One process at a time per run directory: a lock that dies with its process.

    with run_lock(out, "e1 eval"):
        ...  # write into out/

Two ``e1 eval`` (or ``sweep``/``train``) processes writing into one ``--out`` would lose samples
or mix two models' results. The lock is a POSIX record lock (``fcntl.lockf``) on
``out/.e1.lock``: the kernel releases it when its process exits, however it exits (``kill -9``
included), so there is no stale lock to clean up (the file itself is removed on a normal exit;
after a kill it stays, unlocked, and is reused). On NFS the lock is held by the server (NLM or
NFSv4 locking), so it also keeps apart processes on two nodes of a cluster; a filesystem that
has no locking at all is reported, never silently ignored. The file names the holder (host,
pid, command, start time) for the error the second process prints. Taking the lock removes the
temporary files a killed write left behind (:func:`e1.store.results.remove_leftovers`).

POSIX locks belong to a process, not to a file descriptor, so a second lock of the same
directory from the same process is refused by a registry of the directories this process holds.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from e1.errors import ResultsError
from e1.store.guard import check_alive, guard
from e1.store.owned import remove_owned
from e1.store.results import remove_leftovers

LOCK_NAME = ".e1.lock"
_HELD: set[str] = set()  # directories this process holds (POSIX locks do not conflict within one process)


@contextmanager
def run_lock(out: Path, command: str):
    """Hold ``out`` (created if missing) for the duration; ResultsError naming the holder if another
    process (or this one) already holds it."""
    out = Path(out)
    key = str(out.resolve())
    if key in _HELD:
        raise ResultsError(f"{out} is already in use by this process", hint="use another --out")
    check_alive(out)  # a stage of a run whose directory vanished does not make it again
    created = not out.exists()
    fd = _locked(out)
    taken = os.stat(out).st_ino
    _HELD.add(key)
    try:
        _write_holder(fd, command)
        remove_leftovers(out)  # a kill mid-write left a temporary file: nobody else writes here now
        with guard(out):  # every write into out checks it is still this directory (e1.store.guard)
            yield
    finally:
        _HELD.discard(key)
        ours = _inode(out) == taken  # not a directory made there since ours vanished (its lock is another's)
        if ours:
            remove_owned(out, [LOCK_NAME])  # still locked: whoever opens the path next gets a new file
        os.close(fd)  # releases the lock
        if created and ours:
            _remove_if_empty(out)  # a run refused before writing anything leaves nothing behind


def held() -> list[Path]:
    """The run directories this process holds now (the Ctrl-C line names them)."""
    return [Path(key) for key in sorted(_HELD)]


def holder(out: Path) -> dict | None:
    """Who holds ``out`` (or last held it, if killed): host, pid, command, started; None if nobody does."""
    try:
        return json.loads((Path(out) / LOCK_NAME).read_text() or "null")
    except (OSError, ValueError):
        return None


def _locked(out: Path) -> int:
    """An fd of ``out/.e1.lock``, locked. The file is removed on release, so a process that opened
    it just before then locks a file no longer at that path: it checks, and opens again."""
    while True:
        fd = _open(out)
        try:
            _lock(fd, out)
            if os.fstat(fd).st_ino == os.stat(out / LOCK_NAME).st_ino:
                return fd
        except FileNotFoundError:
            pass  # removed between our open and our check: open again
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _inode(out: Path) -> int | None:
    try:
        return os.stat(out).st_ino
    except OSError:
        return None


def _remove_if_empty(out: Path) -> None:
    try:
        out.rmdir()  # only succeeds when nothing was written
    except OSError:
        pass


def _open(out: Path) -> int:
    try:
        out.mkdir(parents=True, exist_ok=True)
        return os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise ResultsError(f"cannot write into {out}: {err.strerror}", hint="pass an --out you can write to") from err


def _lock(fd: int, out: Path) -> None:
    import fcntl

    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EAGAIN):
            raise ResultsError(
                f"{out} is in use by {_describe(holder(out))}", hint="wait for it to finish, or use another --out"
            ) from None
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise ResultsError(
                f"the filesystem of {out} does not support file locks, so two runs could mix",
                hint="use an --out on a filesystem with locking (on Lustre mount with -o flock)",
            ) from err
        raise


def _write_holder(fd: int, command: str) -> None:
    info = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    data = (json.dumps(info) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _describe(info: dict | None) -> str:
    if not info:
        return "another e1 process"
    return f"{info.get('command', 'e1')} (pid {info.get('pid')} on {info.get('host')}, since {info.get('started')})"
