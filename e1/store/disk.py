"""A full disk as one line: which file, what was kept, and that rerunning resumes.

Every file of a run is written by :func:`e1.store.results.atomic_write` (a checkpoint by
:func:`e1.grpo.checkpoint.save_checkpoint`); both write under :func:`disk_errors`, which turns a
write that the file system refused (full, over quota, read-only, file too large, an I/O error)
into a :class:`DiskError`: the CLI's one red line instead of "unexpected error ... please
report it". The libraries that write for e1 report such a failure in several ways: an
``OSError`` with its errno (Python, pyarrow), a message with the system's text
(safetensors: "No space left on device (os error 28)"), or, for ``torch.save``, only
"[enforce fail at inline_container.cc] unexpected pos" — there the file system is asked.

    with disk_errors(path, kept="finished samples up to here are kept"):
        frame.to_parquet(tmp)
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e1.errors import ResultsError

# the class: what the file system says, and what the user can do about it
DISK_ERRNOS = {
    errno.ENOSPC: ("no space left on device", "free space"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota"),
    errno.EFBIG: ("file too large for the file system", "use a file system that allows larger files, or free space"),
    errno.EROFS: ("read-only file system", "make the file system writable"),
    errno.EIO: ("input/output error", "check the disk"),
}
RESUME = "rerun the same command to resume"
# torch.save reports a failed write without its errno (PyTorchStreamWriter in inline_container.cc)
_TORCH_WRITER = ("inline_container", "PytorchStreamWriter", "unexpected pos", "file write failed")
_FREE_BYTES_WHEN_FULL = 1 << 20


class DiskError(ResultsError):
    """A write refused by the file system; the message names the file and what was kept."""

    def __init__(self, path: Path, code: int, kept: str, resume: str = RESUME):
        reason, action = DISK_ERRNOS[code]
        super().__init__(f"cannot write {path}: {reason}; {kept}", hint=f"{action}, then {resume}")
        self.path, self.errno = Path(path), code


def disk_errno(err: BaseException, path: Path | None = None) -> int | None:
    """The errno of the class :data:`DISK_ERRNOS` behind ``err`` (its causes included), else None.
    A torch writer failure without one is judged by the file system that holds ``path``."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
            return err.errno
        code = _errno_in_text(str(err))
        if code is not None:
            return code
        if path is not None and any(marker in str(err) for marker in _TORCH_WRITER):
            return _file_system_state(Path(path))
        err = err.__cause__ or err.__context__
    return None


def _errno_in_text(text: str) -> int | None:
    """An errno of the class named in a message: "[Errno 28]", "os error 28" or the system's own text."""
    lowered = text.lower()
    for code in DISK_ERRNOS:
        if os.strerror(code).lower() in lowered or re.search(rf"\b(errno|os error)\s*{code}\b", lowered):
            return code
    return None


def _file_system_state(path: Path) -> int | None:
    """ENOSPC when the file system holding ``path`` is (about) full, EROFS when it is read-only."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if stats.f_bavail * stats.f_frsize < _FREE_BYTES_WHEN_FULL:
        return errno.ENOSPC
    return None


@contextmanager
def disk_errors(path: Path, kept: str, resume: str = RESUME) -> Iterator[None]:
    """Raise a :class:`DiskError` for ``path`` when the block fails for a reason of the class."""
    try:
        yield
    except DiskError:
        raise
    except Exception as err:
        code = disk_errno(err, path)
        if code is None:
            raise
        raise DiskError(path, code, kept, resume) from err
