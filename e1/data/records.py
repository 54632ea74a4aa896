"""Plain records from a local data file (.jsonl, .json, .parquet, .csv): each reader returns the records
and a label per row for messages (``line 3``, ``row 2``); every value passes :func:`e1.data.json_values.check_value`.

    >>> from e1.data.records import read_records
    >>> records, labels = read_records(Path("problems.jsonl"))   # doctest: +SKIP

Every parquet read passes :func:`_parquet`, where pyarrow's error becomes one line. pyarrow is
imported inside the functions that need it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e1.data.json_values import check_value, load_json
from e1.errors import DataError, one_line
from e1.store import missing_file, read_whole

Records = list[dict[str, Any]]


def read_records(path: Path) -> tuple[Records, list[str]]:
    """Plain records from a .jsonl, .json, .parquet or .csv file, with a label per row for messages."""
    if not path.is_file():
        raise missing_file(path, hint=f"pass a file: {', '.join(_READERS)}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"{path}: unsupported file type '{path.suffix or '(none)'}'",
            hint=f"use one of {', '.join(_READERS)}",
        )
    try:
        records, labels = reader(path)
    except (UnicodeDecodeError, csv.Error) as err:  # csv: a field past 128 KiB, a NUL byte
        why = f"not readable CSV ({err})" if isinstance(err, csv.Error) else "not UTF-8 text"
        hint = "save the file as UTF-8 (a field of up to 128 KiB in a .csv; longer: .jsonl or .parquet)"
        raise DataError(f"{path}: {why}", hint=hint) from None
    if not records:
        raise DataError(f"{path}: the file has no rows", hint="is it the right file?")
    for record, label in zip(records, labels):  # every value bounded, every text true text
        check_value(record, f"{path}: {label}")
    return records, labels


def _read_jsonl(path: Path) -> tuple[Records, list[str]]:
    records, labels = [], []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = load_json(line, f"{path}: line {number}")
            except json.JSONDecodeError as err:
                raise DataError(
                    f"{path}: line {number}: not valid JSON ({err.msg})", hint="each line must hold one JSON object"
                ) from None
            if not isinstance(record, dict):
                raise DataError(
                    f"{path}: line {number}: expected a JSON object, got {type(record).__name__}",
                    hint='each line must look like {"problem": ..., "answer": ...}',
                )
            records.append(record)
            labels.append(f"line {number}")
    return records, labels


def _read_json(path: Path) -> tuple[Records, list[str]]:
    shape_hint = 'expected a list of objects, or {"data": [objects]}; for one object per line use .jsonl'
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return [], []
    try:
        data = load_json(text, str(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})", hint=shape_hint) from None
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(f"{path}: top level is a {type(data).__name__}, not a list", hint=shape_hint)
    for number, record in enumerate(data, 1):
        if not isinstance(record, dict):
            kind = type(record).__name__
            raise DataError(f"{path}: row {number}: expected a JSON object, got {kind}", hint=shape_hint)
    return data, [f"row {number}" for number in range(1, len(data) + 1)]


def _read_parquet(path: Path) -> tuple[Records, list[str]]:
    records = read_parquet_table(path).to_pylist()  # plain Python values: lists stay lists, nulls are None
    return records, [f"row {number}" for number in range(1, len(records) + 1)]


def read_parquet_table(path: Path) -> Any:
    """``path`` as a pyarrow Table, validated whole, or one :class:`DataError` line naming it."""
    import pyarrow.parquet as pq

    return _parquet(path, pq.read_table)


def _parquet_schema(path: Path) -> Any:
    import pyarrow.parquet as pq

    return _parquet(path, pq.read_schema)


def _parquet(path: Path, read: Callable[[Path], Any]) -> Any:
    """``read(path)`` through the parquet gate (:func:`e1.store.read_whole`: a table validated whole), pyarrow's
    error (often several lines, raw bytes in them) as one :class:`DataError` line naming the file."""

    def failed(err: Exception) -> DataError:
        reason = " ".join(one_line((str(err).strip().splitlines() or [""])[0]).split())  # its first line, short
        return DataError(
            f"{path}: not a readable parquet file ({reason or type(err).__name__})",
            hint="is it really parquet, and whole?",
        )

    return read_whole(lambda: read(path), failed)


def _read_csv(path: Path) -> tuple[Records, list[str]]:
    records, labels = [], []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)  # every value stays text: "342" is not turned into 342.0
        row_start = 2  # line 1 is the header
        for record in reader:
            records.append({key: value for key, value in record.items() if key is not None})
            labels.append(f"line {row_start}")
            row_start = reader.line_num + 1
    return records, labels


_READERS: dict[str, Callable[[Path], tuple[Records, list[str]]]] = {
    ".jsonl": _read_jsonl,
    ".json": _read_json,
    ".parquet": _read_parquet,
    ".csv": _read_csv,
}
DATA_SUFFIXES = tuple(_READERS)  # the data files e1 reads (shell completion offers them)
