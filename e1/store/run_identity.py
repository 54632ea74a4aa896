"""A run directory's identity: what it holds and what it was run with, so a run never mixes with another.

``config.json`` records the run's ``kind`` (:data:`KINDS`; read off the files of directories written
before: :func:`run_kind`), the model's identity (:func:`model_identity`) and each dataset's
fingerprint; :func:`check_run_dir` and :func:`check_datasets` refuse a run that would mix with another,
in one line.

    previous = check_run_dir(Path("runs/x"), config.to_json(), ("model", "n", "sampling"), kind="eval")
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from e1.errors import ResultsError
from e1.store.results import CONFIG, MODE_FORMAT_KEY, SAMPLES, SUMMARY

# what a run directory holds: config.json records it as "kind"; each command writes and resumes one kind
KINDS = {"eval": "an eval run", "sweep": "a sweep", "train": "a training run", "demo": "a demo"}
METRICS, CHECKPOINTS = "metrics.parquet", "checkpoints"


def check_run_dir(
    out: Path, current: dict, keys: Sequence[str], what: str = "run", kind: str | None = None
) -> dict | None:
    """Refuse a run directory whose ``config.json`` records another run; return that record (None if new).

    With ``kind`` (a key of :data:`KINDS`), a directory holding another kind of run is refused
    first, naming what it holds (:func:`run_kind`). Then a key counts when both the record and
    ``current`` hold it; the first one that differs is named in a one-line :class:`ResultsError`.

        check_run_dir(Path("runs/x"), config.to_json(), ("model", "n", "sampling"), kind="eval")
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ResultsError(f"--out {out} is a file", hint="pass a directory")
    previous = read_record(out / CONFIG)
    if kind is not None:
        _check_kind(out, previous, kind)
    label = KINDS[kind] if kind is not None else f"a {what}"
    for key in keys if previous is not None else ():
        if key in previous and key in current and not _same(key, previous, current):
            raise ResultsError(
                f"{out} holds {label} with a different {key} ({previous[key]!r}, now {current[key]!r})",
                hint="use another --out, or rerun with the same settings to resume",
            )
    return previous


def mode_format(out: Path) -> int:
    """How the mode texts stored in ``out`` read (:data:`MODE_FORMAT_KEY` of its ``config.json``;
    1 for a run written before it was recorded, or one with samples and no config)."""
    record = read_record(Path(out) / CONFIG)
    value = (record or {}).get(MODE_FORMAT_KEY, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def read_record(path: Path) -> dict | None:
    """A run directory's ``config.json`` (None when there is none); one that is no JSON object, or not a
    regular file (a named pipe there is never opened), is refused in one line."""
    if not os.path.lexists(path):
        return None
    if not stat.S_ISREG(os.lstat(path).st_mode) and not path.is_file():
        raise ResultsError(f"cannot read {path}: not a file", hint="move it away or use another --out")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ResultsError(f"cannot read {path}: {err}", hint="move it away or use another --out") from err
    if not isinstance(record, dict):
        raise ResultsError(f"cannot read {path}: not a JSON object", hint="move it away or use another --out")
    return record


def _check_kind(out: Path, previous: dict | None, kind: str) -> None:
    held = run_kind(out, previous)
    if held is not None and held != kind:
        hint = "use another --out: a run directory holds one kind of run"
        if held == "train" and kind == "eval":
            hint += f" (a checkpoint is evaluated with --model {out / CHECKPOINTS}/step_N)"
        raise ResultsError(f"{out} holds {KINDS.get(held, held)}, not {KINDS[kind]}", hint=hint)


def run_kind(out: Path, record: dict | None = None) -> str | None:
    """What ``out`` holds: the ``kind`` its ``config.json`` records, else (directories written by
    e1 before kinds were recorded) what its record and files show; None for a new or foreign one."""
    out = Path(out)
    if record is not None:
        if isinstance(record.get("kind"), str):
            return record["kind"]
        for key, kind in (("models", "sweep"), ("algo", "train"), ("steps", "train"), ("datasets", "eval")):
            if key in record:
                return kind
    if (out / CHECKPOINTS).is_dir() or (out / METRICS).exists():
        return "train"
    if (out / "sft").is_dir() or (out / "curves").is_dir() or (out / "models" / "init").is_dir():
        return "demo"  # the stages' folders (e1.demo.pipeline)
    if (out / "curves.parquet").exists():
        return "sweep"
    if (out / SAMPLES).exists() or (out / SUMMARY).exists() or (out / "samples").is_dir():
        return "eval"
    return None


FINGERPRINTS = "dataset_fingerprints"  # config.json: {dataset name: e1.data.identity.fingerprint}
INCLUDE_FINGERPRINTS = (
    "include_fingerprints"  # config.json: {an --include's absolute path: e1.data.include_fingerprint}
)
# what a changed input is called, and how to resume, by the config.json key its fingerprints are under
_CHANGED = {
    FINGERPRINTS: ("a run on other problems of dataset '{name}' (they changed since", "restore '{name}' as it was"),
    INCLUDE_FINGERPRINTS: (
        "a run made with other code of --include {name} (it changed since",
        "restore {name} as it was",
    ),
}


def check_datasets(out: Path, fingerprints: dict[str, str], key: str = FINGERPRINTS) -> dict[str, str]:
    """Refuse a run directory that holds results of one of these inputs (datasets; under ``key``
    :data:`INCLUDE_FINGERPRINTS`, the user's code) as it was before a change (its ``config.json``
    recorded another fingerprint); returns the record's fingerprints updated with these, for the run
    to write. Directories written before fingerprints were recorded pass."""
    out = Path(out)
    recorded = (read_record(out / CONFIG) or {}).get(key) or {}
    recorded = recorded if isinstance(recorded, dict) else {}
    what, restore = _CHANGED[key]
    for name, digest in fingerprints.items():
        if recorded.get(name, digest) != digest:
            raise ResultsError(
                f"{out} holds {what.format(name=name)}: {recorded[name]}, now {digest})",
                hint=f"use another --out, or {restore.format(name=name)} to resume",
            )
    return {**recorded, **fingerprints}


def _same(key: str, previous: dict, current: dict) -> bool:
    """A model is the same when it is the same model, however its path was typed (or if it moved)."""
    if key == "model":
        return (previous.get("model_identity") or model_identity(previous["model"])) == (
            current.get("model_identity") or model_identity(current["model"])
        )
    return previous[key] == current[key]


_WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")
_SAMPLES_PER_FILE, _SAMPLE_BYTES = 64, 1 << 16


def model_identity(model: str) -> str:
    """What a model is, to tell runs apart: for a local folder a fingerprint of its config,
    tokenizer and weight files (names, sizes, every small file whole and 64 evenly spaced 64 KiB
    slices of each weight file), so the same folder typed another way, or moved, is the same
    model and another checkpoint is not; a hub id as typed. A few MB are read per weight file.
    """
    path = Path(model).expanduser()
    if not path.is_dir():
        return str(model)
    files = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(path.iterdir()) if f.is_file())
    return _fingerprint(str(path.resolve()), files)


@functools.lru_cache(maxsize=32)
def _fingerprint(folder: str, files: tuple) -> str:
    digest = hashlib.sha256()
    for name, size, _ in files:
        if not (name.endswith(_WEIGHTS) or name.endswith((".json", ".model", ".txt"))) or name.startswith("."):
            continue
        digest.update(f"{name}\0{size}\0".encode())
        with open(Path(folder) / name, "rb") as handle:
            if size <= _SAMPLES_PER_FILE * _SAMPLE_BYTES:
                digest.update(handle.read())
                continue
            for index in range(_SAMPLES_PER_FILE):
                handle.seek(index * (size - _SAMPLE_BYTES) // (_SAMPLES_PER_FILE - 1))
                digest.update(handle.read(_SAMPLE_BYTES))
    return "sha256:" + digest.hexdigest()[:24]
