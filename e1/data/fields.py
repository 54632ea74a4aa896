"""The one gate where a local file's own fields enter e1: its ``task`` and its other columns.

A local file (``--datasets probs.jsonl``, ``--data probs.jsonl``, ``e1 data prepare --from``) keeps
every field beyond the problem, the answer and the id as a column of its canonical table, and an
evaluation carries those columns into ``samples.parquet`` beside e1's own (``completion`` for
``--algo sft``, a ``difficulty`` to group results by, ...). A ``task`` field picks each row's
reward (rows without one are ``math``); whether a reward is registered under it is checked when a
run starts (:func:`e1.rewards.check_tasks`), after ``--include`` has loaded the user's rewards.

Field names become parquet column names, and rows travel as namedtuples, so a kept name is
bounded: a letter, then letters, digits and ``_``, at most :data:`MAX_NAME_CHARS`, not a Python
keyword, and not one of e1's own columns (the canonical ones, or a sample's such as ``reward``):
such a field is refused in one line naming it, never silently overwritten or dropped. A row index
written as a column (a CSV's unnamed first column, pandas' ``__index_level_0__``) is no field. Values are
kept as text (a string as it is, anything else as JSON; a missing value is null), so one column
has one type however the rows mix them.

    >>> extra_fields([{"problem": "1+1", "answer": "2", "level": 3}], consumed={"problem", "answer"}, source="p.jsonl")
    ['level']
    >>> field_value(3), field_value({"a": [1]}), field_value("x"), field_value(None)
    ('3', '{"a": [1]}', 'x', None)
    >>> extra_fields([{"reward": 1}], consumed=set(), source="p.jsonl")
    Traceback (most recent call last):
    ...
    e1.errors.DataError: p.jsonl: field 'reward' is one of e1's own columns (rename it in the file, e.g. to data_reward)
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Iterable, Mapping
from typing import Any

from e1.data import schema
from e1.errors import DataError
from e1.names import NAME, Name

MAX_NAME_CHARS = 64
# names matched whole (e1.names: ``$`` would let ``reward\n`` through)
FIELD_NAME = Name(
    rf"[A-Za-z][A-Za-z0-9_]{{0,{MAX_NAME_CHARS - 1}}}",
    f"a letter, then letters, digits or _, at most {MAX_NAME_CHARS} characters",
)
# a table's row index, not a field: a CSV's unnamed first column (pandas' to_csv), pandas' parquet index
_INDEX = Name(r"|Unnamed: \d+|__index_level_\d+__", "a row index")
TASK_NAME = NAME  # a reward task's name, as typed in a file: a registry's name (e1.names)


def reserved_columns() -> frozenset[str]:
    """Names a file's field may not take: the canonical columns, a sample's columns, a sweep's ``model``."""
    from e1.store import SAMPLE_COLUMNS

    return frozenset(schema.COLUMNS) | frozenset(SAMPLE_COLUMNS) | {"model"}


def extra_fields(records: Iterable[Mapping[str, Any]], consumed: set[str], source: str) -> list[str]:
    """The fields of ``records`` beyond ``consumed`` (problem, answer, id, task), in first-seen order;
    a name that cannot be a column is a one-line :class:`DataError`."""
    reserved = reserved_columns()
    names = [
        name
        for name in dict.fromkeys(key for record in records for key in record)
        if name not in consumed and not _INDEX.matches(str(name))
    ]
    for name in names:
        shown = repr(name) if len(str(name)) <= 80 else repr(str(name)[:80]) + "..."
        if name in reserved:
            raise DataError(
                f"{source}: field {shown} is one of e1's own columns",
                hint=f"rename it in the file, e.g. to data_{name}",
            )
        if not isinstance(name, str) or not FIELD_NAME.matches(name) or keyword.iskeyword(name):
            raise DataError(
                f"{source}: field {shown} cannot be a column name",
                hint=f"rename it: a letter, then letters, digits or _, at most {MAX_NAME_CHARS} "
                "characters (or map it with --problem-field/--answer-field/--id-field)",
            )
    return names


def field_value(value: Any) -> str | None:
    """A kept field's value as text: a string as it is, None as null, anything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "tolist"):  # numpy arrays and scalars (a parquet source)
        value = value.tolist()
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True, default=str)
    except (
        TypeError,
        ValueError,
    ):  # a circular structure cannot come from a file; be safe anyway
        return str(value)


def row_task(record: Mapping[str, Any], default: str) -> str:
    """The row's ``task`` field (its reward), else ``default``; a value that is not a name is a RowError."""
    from e1.data.registry import RowError

    value = record.get(schema.TASK)
    if value is None or value == "":
        return default
    if not isinstance(value, str) or not TASK_NAME.matches(value):
        raise RowError(
            schema.TASK,
            f"is {str(value)[:40]!r}, not a task name (letters, digits, . _ -)",
        )
    return value


def carried_fields(problem: Any) -> dict[str, str | None]:
    """The fields a problem row (a namedtuple or mapping) carries into its samples: those of a local
    file, as text. A registered benchmark's own columns (``starter_code``, ...) stay in its data.

        >>> carried_fields({"id": "1", "dataset": "probs", "problem": "p", "level": 3})
        {'level': '3'}
    """
    from e1.data.registry import get_benchmark, is_registered

    row = problem._asdict() if hasattr(problem, "_asdict") else dict(problem)
    dataset = row.get(schema.DATASET)
    own = set(get_benchmark(dataset).extra_columns) if isinstance(dataset, str) and is_registered(dataset) else set()
    return {
        name: field_value(_null(value)) for name, value in row.items() if name not in schema.COLUMNS and name not in own
    }


def _null(value: Any) -> Any:
    """pandas' missing values (None, NaN, NA) as None."""
    import pandas as pd

    return None if pd.api.types.is_scalar(value) and pd.isna(value) else value
