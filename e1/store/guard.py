"""A run directory that vanishes mid-run stops the run: every write checks that the directory is
still the one the run started in.

    with guard(out):                                   # taken with the run's lock (e1.store.lock)
        check_alive(out / "samples" / "part-1.parquet")   # ResultsError if out was removed or replaced

A run holds the identity (device, inode) of its directory from the moment it takes it.
:func:`e1.store.results.atomic_write` — the one writer — calls :func:`check_alive` before it
creates anything and again after its rename, so a run whose directory was deleted (or moved
away, or deleted and made again) fails with one line at its next write instead of silently
creating a new, partial directory and reporting a summary over what little it wrote since.
Paths outside every guarded directory (a dataset being prepared) are not checked.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from e1.errors import ResultsError

_GUARDED: dict[str, tuple[int, int]] = {}  # absolute run directory -> (st_dev, st_ino) when the run took it


@contextmanager
def guard(out: Path):
    """Record ``out``'s identity (it must exist) for the duration; writes under it check it."""
    key = os.path.abspath(out)
    info = os.stat(key)
    previous = _GUARDED.get(key)
    _GUARDED[key] = (info.st_dev, info.st_ino)
    try:
        yield
    finally:
        if previous is None:
            _GUARDED.pop(key, None)
        else:
            _GUARDED[key] = previous


def check_alive(path: Path) -> None:
    """ResultsError when ``path`` lies in a guarded run directory that is no longer the one its run took."""
    target = os.path.abspath(path)
    for run, identity in list(_GUARDED.items()):
        if target != run and not target.startswith(run.rstrip(os.sep) + os.sep):
            continue
        try:
            info = os.stat(run)
        except FileNotFoundError:
            raise ResultsError(
                f"the run directory {run} is gone (removed or moved away) while the run was writing into it",
                hint="the run stopped there; move it back and rerun to resume, or rerun into a new --out",
            ) from None
        if (info.st_dev, info.st_ino) != identity:
            raise ResultsError(
                f"the run directory {run} was replaced (removed and made again, or another moved there) while the "
                "run was writing into it",
                hint="the run stopped there; rerun into a new --out",
            )
