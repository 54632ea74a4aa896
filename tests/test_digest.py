"""A file's digest is its content's (e1.store.file_digest), even where the clock that stamps files is
coarse: a file rewritten within one tick of that clock (size, mtime, ctime, inode, device: every
field the cache is keyed by, as it was) is hashed again, never answered from the cache."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from e1.store import digest as digests
from e1.store import file_digest


def blake(content: bytes) -> str:
    return hashlib.blake2b(content, digest_size=16).hexdigest()


@contextmanager
def coarse_clock(tick: int):
    """``os.stat`` as a file system whose clock stamped every write of this moment with ``tick``."""
    real = os.stat

    def stat(path, *args, **kwargs):
        info = real(path, *args, **kwargs)
        return SimpleNamespace(
            st_size=info.st_size, st_ino=info.st_ino, st_dev=info.st_dev, st_mtime_ns=tick, st_ctime_ns=tick
        )

    digests.os = SimpleNamespace(stat=stat)
    try:
        yield
    finally:
        digests.os = os


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 4096), data=st.data())
def test_a_file_rewritten_within_one_clock_tick_is_hashed_again(size, data):
    first = data.draw(st.binary(min_size=size, max_size=size))
    second = data.draw(st.binary(min_size=size, max_size=size).filter(lambda b: b != first))
    with tempfile.TemporaryDirectory() as folder, coarse_clock(time.time_ns() // 10**9 * 10**9):
        file = Path(folder) / "train.parquet"
        file.write_bytes(first)
        assert file_digest(file) == blake(first)
        with open(file, "r+b") as handle:  # in place: the same inode, the same size
            handle.write(second)
        assert file_digest(file) == blake(second)


def test_a_settled_file_is_hashed_once(tmp_path, monkeypatch):
    file = tmp_path / "x"
    file.write_bytes(b"abc")
    later = time.time_ns() + 10 * digests._RACY_NS  # the file has settled by then
    monkeypatch.setattr(digests, "time", SimpleNamespace(time_ns=lambda: later))
    assert file_digest(file) == blake(b"abc")
    monkeypatch.setattr(digests, "open", lambda *a, **k: 1 / 0, raising=False)  # a second read would fail
    assert file_digest(file) == blake(b"abc")
