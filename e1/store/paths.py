"""Names that become paths: one sanitiser for a file name, one helper that keeps a path inside its root.

    folder = inside(out, file_name(model))          # out/<one safe name>; never outside out
    inside(out, "../x")                             # ResultsError: it would lie outside out

A model id, a dataset name, a task or a value read from a run's ``config.json`` is outside input:
it becomes one path component only through :func:`file_name`, and every path e1 writes or serves
from such a name is checked by :func:`inside` against the folder it must stay in. Nothing past
these two re-checks a name.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

from e1.errors import ResultsError

HASH_MARK = "~"  # never in a name kept as it is, so a changed name cannot meet a kept one
MAX_NAME_BYTES, KEPT_PREFIX_BYTES = 200, 64  # file systems allow 255 bytes per name
_RESERVED = set("/\\" + HASH_MARK)  # separators (lighteval's own names hold '|', so it is kept)


def _plain(name: str) -> bool:
    """A name that is a safe file name as it is: not empty, not hidden (so never '.' or '..'), no
    separator ('/' or '\\'), no control character, no ``~``, no space at either end, and short enough."""
    return (
        bool(name)
        and not name.startswith(".")
        and name == name.strip()
        and len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES
        and not any(ch in _RESERVED or unicodedata.category(ch).startswith("C") for ch in name)
    )


def file_name(name: str) -> str:
    """``name`` as one file name: itself when it already is a safe one; else its safe characters (at
    most 64 bytes, each run of others as '-') then ``~`` and 16 hex digits of its SHA-256. Never
    empty, never '.' or '..', no '/', and distinct names give distinct file names (a name kept as it
    is has no ``~``; a changed one ends in the digest of the whole name).

    >>> file_name("Salesforce__E1-Math-1.5B")
    'Salesforce__E1-Math-1.5B'
    >>> file_name("../../x")
    '-..-x~9cdf6a50100a862e'
    """
    name = str(name)
    if _plain(name):
        return name
    kept = "".join("-" if ch in _RESERVED or unicodedata.category(ch).startswith("C") else ch for ch in name)
    kept = re.sub(r"-{2,}", "-", kept).strip().lstrip(".")
    while len(kept.encode("utf-8", "surrogatepass")) > KEPT_PREFIX_BYTES:
        kept = kept[:-1]
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{kept.strip() or '_'}{HASH_MARK}{digest}"


def inside(root: Path, *parts: str | Path) -> Path:
    """``root / parts`` when it lies under ``root`` once resolved ('..' and symlinks followed), else a
    one-line :class:`ResultsError`; with no parts, ``root`` itself. The path returned is as joined
    (not resolved), so it reads as the user typed ``root``.

        inside(Path("runs/x/export"), "org__m", "results.json")   # runs/x/export/org__m/results.json
    """
    root = Path(root).expanduser()
    path = root.joinpath(*parts)
    if not parts:
        return path
    base, resolved = root.resolve(), path.resolve()
    if base not in resolved.parents:
        raise ResultsError(
            f"{Path(*parts)} would lie outside {root}", hint="a name from a run or a config became a path: rename it"
        )
    return path


def new_run_dir(root: Path, labels: list[str], now=None) -> Path:
    """A run directory no run has used: ``root/<labels>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... when
    taken), each label shortened to its last path part without suffix, so two commands never share
    a default ``--out`` by accident.

        >>> from datetime import datetime
        >>> new_run_dir(Path("runs/eval"), ["Salesforce/E1-Math-1.5B", "data/probs.jsonl"], datetime(2026, 1, 2, 3, 4, 5))
        PosixPath('runs/eval/E1-Math-1.5B-probs-20260102-030405')
    """
    from datetime import datetime

    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    parts = [re.sub(r"[^A-Za-z0-9._+]+", "-", _short(label)).strip("-.")[:40] for label in labels]
    name = file_name("-".join([part for part in parts if part] + [stamp]))
    path, copy = root / name, 2
    while path.exists():
        path, copy = root / f"{name}-{copy}", copy + 1
    return path


def _short(label: str) -> str:
    """``org/Model-1.5B`` -> ``Model-1.5B``; ``a/probs.jsonl`` -> ``probs``; ``x,y`` -> ``x+y``."""
    names = [Path(part.strip().rstrip("/")).name for part in str(label).split(",") if part.strip()]
    return "+".join(
        Path(name).stem if Path(name).suffix.lower() in (".jsonl", ".json", ".parquet", ".csv") else name
        for name in names
    )
