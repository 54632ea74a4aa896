"""A run directory is owned by one process at a time; the lock dies with its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from e1.errors import ResultsError
from e1.store.lock import holder, run_lock

HOLD = textwrap.dedent("""
    import sys, time
    from e1.store.lock import run_lock
    with run_lock(sys.argv[1], "e1 eval"):
        print("held", flush=True)
        time.sleep(60)
""")


def start_holder(out):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_with_the_holder_named(tmp_path):
    out = tmp_path / "run"
    proc = start_holder(out)
    try:
        with pytest.raises(ResultsError) as err:
            with run_lock(out, "e1 sweep"):
                pass
        assert f"pid {proc.pid}" in str(err.value) and "e1 eval" in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_the_lock_dies_with_its_process_even_on_kill_9(tmp_path):
    out = tmp_path / "run"
    proc = start_holder(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with run_lock(out, "e1 eval"):  # no stale lock to clean up
        assert holder(out)["pid"] == os.getpid()


def test_the_same_process_cannot_hold_one_directory_twice(tmp_path):
    with run_lock(tmp_path / "run", "e1 eval"):
        with pytest.raises(ResultsError, match="already in use by this process"):
            with run_lock(tmp_path / "run", "e1 eval"):
                pass
    with run_lock(tmp_path / "run", "e1 eval"):  # released on exit
        pass


def test_an_unwritable_out_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot write into"):
        with run_lock(blocker / "run", "e1 eval"):
            pass


def test_a_run_refused_before_writing_leaves_no_directory(tmp_path):
    with pytest.raises(ValueError):
        with run_lock(tmp_path / "new", "e1 eval"):
            raise ValueError("the model did not load")
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    with pytest.raises(ValueError):
        with run_lock(tmp_path / "old", "e1 eval"):
            raise ValueError("refused")
    assert (tmp_path / "old").is_dir()  # a directory the user had stays
