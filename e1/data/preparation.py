"""Turn a registered benchmark (from the hub) or a local file into a canonical parquet; load it back.

    >>> from e1.data import prepare, load_dataset
    >>> prepare(["aime", "math500"])              # doctest: +SKIP
    [PosixPath('/home/me/.cache/e1/data/aime.parquet'), PosixPath('/home/me/.cache/e1/data/math500.parquet')]
    >>> load_dataset("aime").columns.tolist()     # doctest: +SKIP
    ['id', 'dataset', 'problem', 'answer', 'task', 'task_version']

Prepared files live in the data dir (``$E1_DATA_DIR``, else ``~/.cache/e1/data``) as
``<name>.parquet``. Without the hub, set ``E1_HUB_MIRROR=DIR`` (:mod:`e1.data.hub`): a hub id is
then read from ``DIR/<hub_id>/``, a copy of the hub repository in its own layout, e.g.
``hf download HuggingFaceH4/aime_2024 --repo-type dataset --local-dir DIR/HuggingFaceH4/aime_2024``.

Prepared rows come from the source as it is now. Each prepared file records where its rows came
from (:func:`source_fingerprint`; for a mirror, a digest of its files' names and contents) and the options it was prepared with; :func:`load_dataset` prepares a
registered name again, with those options, when its mirror has changed since, and otherwise
reads the prepared file as it is. ``e1 data prepare`` always reads the source afresh.

pandas, pyarrow and datasets are imported inside the functions that need them, so importing
this module (and ``e1 --help``) stays fast.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e1.data import schema
from e1.data.fields import extra_fields, field_value, row_task
from e1.data.hub import hub_records, mirror_fingerprint
from e1.data.records import DATA_SUFFIXES, Records, _parquet, _parquet_schema, read_parquet_table, read_records
from e1.data.registry import (
    DATASET_NAME,
    Benchmark,
    Fields,
    RowError,
    benchmark_names,
    field_text,
    get_benchmark,
    is_registered,
    math_row,
)
from e1.errors import DataError, did_you_mean
from e1.store import file_name, inside, missing_file

if TYPE_CHECKING:
    import pandas as pd

DATA_DIR_ENV = "E1_DATA_DIR"
FILE_HINT = "choose the fields with --problem-field, --answer-field and --id-field"
SOURCE_KEY = "e1.source"  # a prepared parquet's metadata: {"source": fingerprint, "options": {name: value}}
FILE_SOURCE = "file "  # the fingerprint of a file prepared with --from: "file /abs/path"


@dataclass(frozen=True)
class Prepared:
    """One written dataset: where it went and how many rows it has."""

    name: str
    path: Path
    rows: int
    skipped_rows: int = 0  # hub rows without a problem or an answer


def default_data_dir() -> Path:
    """``$E1_DATA_DIR`` if set, else ``~/.cache/e1/data``."""
    configured = os.environ.get(DATA_DIR_ENV, "")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "e1" / "data"


def prepared_path(name: str, data_dir: Path | None = None) -> Path:
    """Where the canonical parquet of dataset ``name`` lives: always a file in the data dir."""
    return inside(data_dir or default_data_dir(), f"{file_name(name)}.parquet")


def prepared_names(data_dir: Path | None = None) -> list[str]:
    """Names of all prepared datasets in the data dir (registered or from local files)."""
    folder = data_dir or default_data_dir()
    return sorted(path.stem for path in folder.glob("*.parquet")) if folder.is_dir() else []


def prepare(names: Sequence[str], out_dir: Path | None = None) -> list[Path]:
    """Prepare each registered benchmark into ``out_dir/<name>.parquet``; return the paths."""
    for name in names:
        get_benchmark(name)  # a typo fails before anything is downloaded
    return [prepare_benchmark(name, out_dir).path for name in names]


def prepare_benchmark(name: str, out_dir: Path | None = None, options: dict[str, str] | None = None) -> Prepared:
    """Load one registered benchmark (its ``load`` function with ``options``, else
    ``datasets.load_dataset``) and write its parquet."""
    benchmark = get_benchmark(name)
    values = benchmark.resolve_options(options)  # a wrong option fails before anything is downloaded
    source = source_fingerprint(benchmark)  # taken before reading: a change while reading shows next time
    records = benchmark.load(benchmark, values) if benchmark.load else hub_records(benchmark)
    labels = [f"row {number}" for number in range(1, len(records) + 1)]
    hint = "the hub dataset may have changed; prepare from a file instead: e1 data prepare --from FILE"
    frame, skipped = _canonical_frame(records, labels, benchmark, benchmark.source, hint, skip_blank=True)
    path = prepared_path(name, out_dir)
    _write_parquet(frame, path, {"source": source, "options": values})
    return Prepared(name, path, len(frame), skipped)


def prepare_file(
    path: Path,
    name: str | None = None,
    out_dir: Path | None = None,
    *,
    problem_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
) -> Prepared:
    """Write a local .jsonl/.json/.parquet/.csv as ``out_dir/<name>.parquet`` (name: the file stem).

    Fields default to those of the registered benchmark called ``name`` if there is one (so a
    downloaded copy of a benchmark prepares under its own name), else problem/answer; ids come
    from ``id_field``, else an ``id`` field present in every row, else ``<name>-<row index>``.
    """
    path = Path(path).expanduser()
    name = name or _name_from_stem(path)
    if not DATASET_NAME.matches(name):  # how the dataset is asked for later (--data NAME)
        raise DataError(f"--name {name!r} is not a dataset name", hint="use letters, digits, . _ - (a letter first)")
    records, labels = read_records(path)
    benchmark = _file_benchmark(name, path, records, problem_field, answer_field, id_field)
    frame, _ = _canonical_frame(records, labels, benchmark, str(path), FILE_HINT, skip_blank=False)
    out = prepared_path(name, out_dir)
    _write_parquet(frame, out, {"source": f"{FILE_SOURCE}{path.resolve()}", "options": {}})
    return Prepared(name, out, len(frame))


def load_dataset(spec: str, data_dir: Path | None = None) -> pd.DataFrame:
    """A canonical DataFrame for ``spec``: a registered name (prepared first if needed), a file, or a
    dataset prepared earlier with ``e1 data prepare --from``."""
    data_dir = data_dir or default_data_dir()
    if is_registered(spec):
        return _load_registered(get_benchmark(spec), data_dir)
    file = Path(spec).expanduser()
    if file.is_file():
        return _load_file(file)
    if DATASET_NAME.matches(spec) and prepared_path(spec, data_dir).is_file():
        return _read_canonical(prepared_path(spec, data_dir))
    if file.suffix.lower() in DATA_SUFFIXES or "/" in spec or os.sep in spec or os.path.lexists(file):
        raise missing_file(spec, hint=f"pass a file ({', '.join(DATA_SUFFIXES)}) or a registered name")
    candidates = sorted(set(benchmark_names()) | set(prepared_names(data_dir)))
    raise DataError(f"unknown dataset '{spec}'", hint=did_you_mean(spec, candidates, "known datasets:"))


def _load_registered(benchmark: Benchmark, data_dir: Path) -> pd.DataFrame:
    """The prepared file of ``benchmark``, prepared first when there is none, when its mirror has
    changed since (prepared again with the options it was prepared with), or when the row mapping has."""
    path = prepared_path(benchmark.name, data_dir)
    if not path.is_file():
        prepare_benchmark(benchmark.name, data_dir)
        return _read_canonical(path)
    recorded = prepared_source(path)
    stored = recorded.get("options")
    taken = {option.name for option in benchmark.options}  # an option since removed is left out
    options = {key: str(value) for key, value in stored.items() if key in taken} if isinstance(stored, dict) else {}
    if _mirror_changed(benchmark, recorded):
        prepare_benchmark(benchmark.name, data_dir, options)
    frame = _read_canonical(path)
    if len(frame) and int(frame[schema.TASK_VERSION].iloc[0]) != benchmark.task_version:
        prepare_benchmark(benchmark.name, data_dir, options)  # the row mapping changed since it was prepared
        frame = _read_canonical(path)
    return frame


def source_fingerprint(benchmark: Benchmark) -> str:
    """What ``benchmark``'s rows are read from now: its ``E1_HUB_MIRROR`` folder and a digest of
    the names and contents of the files there; else its hub id (the hub's
    revision is ``datasets``' concern) or, for data not on the hub, its origin."""
    return mirror_fingerprint(benchmark) or (f"hub {benchmark.hub_id}" if benchmark.hub_id else benchmark.source)


def prepared_source(path: Path) -> dict[str, Any]:
    """What a prepared file records of its source: ``{"source": fingerprint, "options": {...}}``;
    empty for a file prepared before e1 recorded it."""
    from e1.store import parquet_metadata

    try:
        stored = parquet_metadata(path, SOURCE_KEY)
        recorded = json.loads(stored) if stored else {}
    except (OSError, ValueError):
        return {}  # unreadable: _read_canonical says so, or the file is prepared again
    return recorded if isinstance(recorded, dict) else {}


def _mirror_changed(benchmark: Benchmark, recorded: dict[str, Any]) -> bool:
    """True when the mirror now holds other files than those ``recorded`` was prepared from. A file
    prepared with --from under this name is the user's choice and stays; without a mirror (or
    without this dataset in it) the prepared file cannot be checked and is used as it is."""
    source = str(recorded.get("source", ""))
    if source.startswith(FILE_SOURCE):
        return False
    current = mirror_fingerprint(benchmark)
    return current is not None and current != source


def _load_file(path: Path) -> pd.DataFrame:
    if path.suffix.lower() == ".parquet":
        names = _parquet_schema(path).names
        if not schema.missing_columns(names):  # a canonical table: its other columns pass the same gate
            extra_fields([dict.fromkeys(names)], consumed=set(schema.COLUMNS), source=str(path))
            return _read_canonical(path)
    records, labels = read_records(path)
    benchmark = _file_benchmark(_name_from_stem(path), path, records, None, None, None)
    hint = (
        f"rename the fields to problem and answer, or map them: e1 data prepare --from {path} --problem-field P "
        f"--answer-field A, then use the name {benchmark.name}"
    )
    return _canonical_frame(records, labels, benchmark, str(path), hint, skip_blank=False)[0]


def dataset_names(specs: Sequence[str]) -> list[str]:
    """The names ``specs`` load under (the results' ``dataset`` column), sorted, without loading them:
    a registered or prepared name is itself, a file its stem (a prepared parquet: the names it holds)."""
    names: set[str] = set()
    for spec in specs:
        file = Path(spec).expanduser()
        if is_registered(spec) or not (file.is_file() or file.suffix.lower() in DATA_SUFFIXES):
            names.add(spec)  # a registered or prepared name
        elif (
            file.is_file()
            and file.suffix.lower() == ".parquet"
            and not schema.missing_columns(_parquet_schema(file).names)
        ):
            import pyarrow.parquet as pq

            column = _parquet(file, lambda path: pq.read_table(path, columns=[schema.DATASET])).column(0)
            names.update(str(name) for name in column.unique().to_pylist())
        else:
            names.add(_name_from_stem(file))
    return sorted(names)


def _read_canonical(path: Path) -> pd.DataFrame:
    frame = read_parquet_table(path).to_pandas()
    missing = schema.missing_columns(frame.columns)
    if missing:
        raise DataError(
            f"{path}: not a prepared dataset (no column {', '.join(missing)})",
            hint="prepare it again with e1 data prepare",
        )
    return frame


def _name_from_stem(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._") or "local"


def _file_benchmark(
    name: str, path: Path, records: Records, problem_field: str | None, answer_field: str | None, id_field: str | None
) -> Benchmark:
    """A benchmark for a local file: a registered one's mapping and task if ``name`` is registered;
    else problem and answer, each row's ``task`` field, and every other field kept as a column
    (:mod:`e1.data.fields`)."""
    registered = is_registered(name)
    if registered:
        base = get_benchmark(name)
    else:
        base = Benchmark(name=name, hub_id=None, split=None, description=f"local file {path.name}")
    candidate = id_field or base.fields.id or "id"
    if id_field is None:
        has_ids = all(schema.render_id(record.get(candidate)) for record in records)  # a probe, not a default
        id_field = candidate if has_ids else None
    fields = Fields(
        problem=problem_field or base.fields.problem, answer=answer_field or base.fields.answer, id=id_field
    )
    if registered:
        return replace(base, fields=fields)
    consumed = {fields.problem, fields.answer, candidate, schema.TASK}
    extras = tuple(extra_fields(records, consumed, str(path)))
    return replace(base, fields=fields, extra_columns=extras, to_row=functools.partial(_file_row, extras=extras))


def _file_row(record: dict[str, Any], fields: Fields, extras: tuple[str, ...]) -> dict[str, Any]:
    """A local file's row: problem and answer, its own task (default math), its other fields as text."""
    row = math_row(record, fields) | {schema.TASK: row_task(record, "math")}
    return row | {name: field_value(record.get(name)) for name in extras}


def _canonical_frame(
    records: Records, labels: list[str], benchmark: Benchmark, source: str, hint: str, skip_blank: bool
) -> tuple[pd.DataFrame, int]:
    """Map source records to canonical rows; returns the frame and how many blank rows were skipped."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    first_label_of: dict[str, str] = {}
    skipped = 0
    for index, (record, label) in enumerate(zip(records, labels)):
        try:
            values = dict(benchmark.to_row(record, benchmark.fields))
            id_field = benchmark.fields.id
            row_id = values.pop(schema.ID, None)  # to_row may build the id itself (Codeforces: 1971A)
            if not row_id:
                row_id = field_text(record, id_field, schema.render_id) if id_field else f"{benchmark.name}-{index}"
        except RowError as err:
            if err.blank and skip_blank:
                skipped += 1
                continue
            fields = ", ".join(map(str, record)) or "none"
            raise DataError(f"{source}: {label}: {err}", hint=f"its fields: {fields}; {hint}") from None
        if row_id in first_label_of:
            raise DataError(
                f"{source}: {label}: id '{row_id}' is also used at {first_label_of[row_id]}",
                hint="ids must be unique; choose another --id-field, or none to number the rows",
            )
        first_label_of[row_id] = label
        task = values.pop(schema.TASK, None) or benchmark.task  # a local file's row may name its own
        row = {schema.ID: row_id, schema.DATASET: benchmark.name, **values}
        row.update({schema.TASK: task, schema.TASK_VERSION: benchmark.task_version})
        missing = [column for column in benchmark.columns if column not in row]
        if missing:
            raise DataError(f"{benchmark.name}: to_row returned no {', '.join(missing)} for {label}")
        rows.append(row)
    if not rows:
        raise DataError(f"{source}: no row has both a problem and an answer", hint=hint)
    frame = pd.DataFrame(rows, columns=list(benchmark.columns))
    frame[schema.TASK_VERSION] = frame[schema.TASK_VERSION].astype("int64")
    return frame, skipped


def _write_parquet(frame: pd.DataFrame, path: Path, source: dict[str, Any]) -> None:
    """Write atomically (:func:`e1.store.results.write_parquet`) with ``source`` as the file's
    :data:`SOURCE_KEY` metadata; a failure is a one-line DataError."""
    from e1.store import write_parquet

    try:
        write_parquet(frame, path, metadata={SOURCE_KEY: json.dumps(source, sort_keys=True)})
    except OSError as err:
        raise DataError(f"cannot write {path}: {err.strerror or err}", hint="check --out / $E1_DATA_DIR") from None
