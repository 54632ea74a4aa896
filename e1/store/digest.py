"""Files told apart by what they hold: :func:`file_digest`, the one content hash of a file e1 reads.

    file_digest(Path("mirror/aime/train.parquet"))   # 'b1946ac92492d2347c6235b4d2611184'

Never by size and modification time alone: ``cp -p``, ``rsync -t`` and ``touch -r`` keep both. The hash
is cached under the file's size, modification time, inode, device *and* change time (``st_ctime``
changes on every write and cannot be set back), so a file rewritten in place is read again, and a
file read twice in one process is hashed once. A file changed within the last :data:`_RACY_NS` is
never cached (git's "racy" rule): where the clock that stamps files is coarse (a jiffy, a second),
a rewrite in the same tick leaves every stat field as it was.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

_DIGESTS: dict[tuple, str] = {}  # (path, size, mtime_ns, ctime_ns, inode, device) -> the bytes' blake2b
_PIECE = 1 << 20  # bytes read at a time: a large file is never held whole
_RACY_NS = 2_000_000_000  # a file changed this recently may change again under the same stat: hashed each time


def stat_stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    """What any rewrite of a file changes: (size, modification time, change time, inode), in ns. ``touch -r``
    sets the modification time back, never the change time; a file renamed over it has another inode."""
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def file_digest(path: Path | str) -> str:
    """A hash of the file's bytes (blake2b, 16 bytes, as hex), read in 1 MiB pieces.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "x"; _ = f.write_bytes(b"abc")
    >>> file_digest(f) == hashlib.blake2b(b"abc", digest_size=16).hexdigest()
    True
    """
    info = os.stat(path)
    key = (str(path), *stat_stamp(info), info.st_dev)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while piece := handle.read(_PIECE):
            digest.update(piece)
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > _RACY_NS:  # settled: its stat tells a change
        _DIGESTS[key] = digest.hexdigest()
    return digest.hexdigest()
