"""The results format: one schema, one atomic writer.

A run directory holds ``config.json`` (resolved configuration, e1 version, seed),
``samples.parquet`` (one row per problem × sample × mode × budget) and ``summary.parquet``
(per dataset × mode × budget). Every write goes to a temporary file that is renamed into
place, so a kill at any moment leaves the previous complete file. Units: every rate in a
file (accuracy, pass@k, forced_rate, tests_passed) is a fraction in [0, 1]; only rendered
tables and plots show percent (:mod:`e1.report.ui`, :mod:`e1.report.plots`).

A run directory knows what it holds (its ``kind``, the model's identity, each dataset's
fingerprint: :mod:`e1.store.run_identity`, whose checks refuse a run that would mix with another).
Writes into a run directory whose run is under way check that it is still the directory the run
took (:mod:`e1.store.guard`).

    write_parquet(frame, run_dir / SAMPLES)
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

from e1.errors import ResultsError
from e1.store.disk import RESUME, disk_errors
from e1.store.guard import check_alive
from e1.store.owned import record_files, remove_owned, replace_owned

CONFIG, SAMPLES, SUMMARY = "config.json", "samples.parquet", "summary.parquet"

# gold: the reference answer, or for code "<k> tests"; tests_passed: the fraction of a code
# problem's tests passed (they stop at the first failure), NaN for math; first_failure: why the
# first failing test failed (e.g. "test 3: timeout after 6s"), null when all passed and for math;
# prompt: the text the model continued from, exactly as built (chat template, system prompt, stated
# budget), on sample 0 of each problem and cell and null on its others (once per cell, not per sample);
# decoded_tokens: every token decoded for the sample (output + early-exit's rolled-back trials; NaN in
# older files); overthinking_tokens: thinking after the first correct trial answer (e1.eval.trials), NaN
# in modes without trials; forced_text: the text e1 forced after thinking that is neither a marker nor the
# model's (a mode's exit text, s1's "Final Answer:"), never part of solution_text or of what was scored
# ("" when nothing was forced; null in older files, whose solution_text may begin with s1's "Final Answer:")
SAMPLE_COLUMNS = [
    "dataset",
    "problem_id",
    "sample_index",
    "mode",
    "think_budget",
    "solve_budget",
    "prompt_tokens",
    "think_tokens",
    "solve_tokens",
    "forced",
    "finish_reason",
    "think_text",
    "solution_text",
    "extracted_answer",
    "gold",
    "reward",
    "correct",
    "tests_passed",
    "first_failure",
    "prompt",
    "decoded_tokens",
    "overthinking_tokens",
    "think_end",
    "forced_text",
]
SAMPLE_DTYPES = {
    "dataset": "string",
    "problem_id": "string",
    "sample_index": "int64",
    "mode": "string",
    "think_budget": "int64",
    "solve_budget": "int64",
    "prompt_tokens": "int64",
    "think_tokens": "int64",
    "solve_tokens": "int64",
    "forced": "bool",
    "finish_reason": "string",
    "think_text": "string",
    "solution_text": "string",
    "extracted_answer": "string",
    "gold": "string",
    "reward": "float64",
    "correct": "bool",
    "tests_passed": "float64",
    "first_failure": "string",
    "prompt": "string",
    "decoded_tokens": "float64",
    "overthinking_tokens": "float64",
    "think_end": "string",
    "forced_text": "string",
}
# columns added after the first release: files written before them read back with these values
# think_end: how thinking ended, natural | budget | pattern | trial | open | prefilled | unopened
# (e1.engine.row_state.THINK_ENDS); null: unknown (an API that reports none; files before the column). Files
# written before this vocabulary was recorded (THINK_END_KEY, below) are read into it by e1.store.think_ends
SAMPLE_DEFAULTS = {
    "tests_passed": float("nan"),
    "first_failure": None,
    "prompt": None,
    "decoded_tokens": float("nan"),
    "overthinking_tokens": float("nan"),
    "think_end": None,
    "forced_text": None,
}
# a sample's identity: a resumed run skips rows whose key is already in samples.parquet
SAMPLE_KEY = ["dataset", "problem_id", "sample_index", "mode", "think_budget", "solve_budget"]
GROUP_KEY = ["dataset", "mode", "think_budget", "solve_budget"]
# config.json records how its mode texts read (2: a bare early-exit is DEER's recipe). A run without it
# was written before: its readers rewrite its stored texts with the modes' own legacy rewrite
# (e1.engine.modes.Mode.legacy), config and samples alike, and the first write into it records them so
MODE_FORMAT_KEY, MODE_FORMAT = "mode_format", 2
# The vocabulary of think_end (e1.engine.row_state.THINK_ENDS), recorded in the metadata of every parquet file
# that holds think_end values or the think rates computed from them (write_parquet stamps each). A file without
# it was written before it was recorded (e1 up to 1332387), maybe in the vocabulary before abf6856: "open" held
# replies that never opened thinking too (today "unopened"), and a prompt that closed thinking was left null
# (today "prefilled"). Its rows are read into today's vocabulary where their prompt shows which they were, else
# read as unknown (e1.store.think_ends); its think rates are read as unknown
THINK_END_KEY, THINK_END_VOCABULARY = "e1.think_end_vocabulary", 2
THINK_RATE_COLUMNS = ["think_rate", "empty_think_rate", "prefilled_rate", "unopened_rate"]
# each metric is defined in e1.report.metrics; rates and accuracies are fractions, *_samples are counts
SUMMARY_COLUMNS = GROUP_KEY + [
    "problems",
    "samples_per_problem",
    "accuracy",
    "accuracy_ci_low",
    "accuracy_ci_high",
    "pass_at_1",
    "pass_at_k",
    "maj_at_k",
    "k",
    "mean_think_tokens",
    "mean_solve_tokens",
    "mean_total_tokens",
    "mean_decoded_tokens",
    "forced_rate",
    *THINK_RATE_COLUMNS,
    "natural_samples",
    "natural_accuracy",
    "forced_samples",
    "forced_accuracy",
    "unanswered_rate",
    "overthinking_share",
    "tokens_per_correct",
    "censored_rate",
]


def atomic_write(
    path: Path,
    write: Callable[[Path], object],
    directory: bool = False,
    kept: str = "finished results up to here are kept",
    resume: str = RESUME,
) -> Path:
    """Call ``write(tmp)`` on a fresh sibling of ``path``, then rename it into place.

    The sibling is created as any new file or folder is (the user's umask sets its mode,
    unlike ``tempfile.mkstemp``'s 0600), so result files stay readable as the user expects.
    ``directory=True`` hands ``write`` an empty folder instead (a checkpoint) and replaces a
    folder already at ``path``. On any failure the sibling is removed and ``path`` is untouched;
    a full disk (or quota, read-only file system, ...) is a :class:`e1.store.disk.DiskError`
    naming ``path``, what is ``kept`` and how to ``resume``.

        atomic_write(run_dir / "curves.png", lambda tmp: fig.savefig(tmp, format="png"))
    """
    path = Path(path)
    check_alive(path)  # a run whose directory vanished stops here instead of writing into a new one
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with disk_errors(path, kept, resume):  # before the sibling goes: judging torch's error needs the full disk
            path.parent.mkdir(parents=True, exist_ok=True)
            if directory:
                tmp.mkdir()
            else:
                os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            write(tmp)
            if directory:
                record_files(tmp)  # what e1 wrote: all that a later replacement may remove
                replace_owned(path, "the folder")
            os.replace(tmp, path)
        check_alive(path)
    except BaseException:
        remove_owned(tmp.parent, [tmp.name], whole=True)  # the sibling e1 just made under a random name
        raise
    return path


_LEFTOVER = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")  # atomic_write's sibling: .<name>.<8 hex>.tmp


def remove_leftovers(out: Path) -> list[Path]:
    """Remove the temporary siblings that :func:`atomic_write`s killed mid-write left in run directory
    ``out`` and its folders (not in a folder that is a run of its own: its run cleans it); returns
    them. Only the process holding ``out``'s lock calls this (:func:`e1.store.lock.run_lock`), so
    none of them is a write in flight."""
    removed = []
    for folder, dirs, files in os.walk(out):
        for name in [*files, *dirs]:
            if _LEFTOVER.fullmatch(name):
                remove_owned(Path(folder), [name], whole=True)  # e1's own random name: nobody else's
                removed.append(Path(folder) / name)
        dirs[:] = [d for d in dirs if not _LEFTOVER.fullmatch(d) and not (Path(folder) / d / CONFIG).exists()]
    return removed


# Parquet files are written in row groups of at most this many rows: a reader after a few rows (one
# problem's texts in e1 view) decodes only the groups whose min/max statistics can hold them, not
# every text of the run (samples.parquet is sorted by SAMPLE_KEY, so a problem's rows sit together)
ROW_GROUP_ROWS = 4096


def write_parquet(frame, path: Path, metadata: dict[str, str] | None = None, **what_is_kept: str) -> Path:
    """``frame`` as ``path``, atomically, in row groups of :data:`ROW_GROUP_ROWS`, with ``metadata``
    added to the file's key-value metadata (read back by :func:`parquet_metadata`; a frame that holds
    ``think_end`` or a think rate gets :data:`THINK_END_KEY` too); ``what_is_kept``: :func:`atomic_write`'s
    ``kept`` and ``resume``."""
    if {"think_end", *THINK_RATE_COLUMNS} & set(frame.columns):
        metadata = {THINK_END_KEY: str(THINK_END_VOCABULARY), **(metadata or {})}
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)  # what DataFrame.to_parquet(index=False) writes
    if metadata:
        added = {key.encode(): value.encode() for key, value in metadata.items()}
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **added})
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS), **what_is_kept)


def parquet_metadata(path: Path, key: str) -> str | None:
    """The value :func:`write_parquet` stored under ``key`` in ``path`` (None: no such key); reads
    only the file's footer."""
    import pyarrow.parquet as pq

    stored = pq.read_schema(path).metadata or {}
    value = stored.get(key.encode())
    return None if value is None else value.decode()


FOREIGN_VOCABULARY = 0  # think_end_vocabulary's answer for a stamp e1 never wrote


def think_end_vocabulary(path: Path) -> int:
    """The vocabulary of the ``think_end`` values (or think rates) in ``path``: :data:`THINK_END_VOCABULARY`
    for a file e1 stamped so, 1 for one written before (no stamp), :data:`FOREIGN_VOCABULARY` for a stamp e1
    never wrote (a later e1's vocabulary, an edited file): none of its words is read, as none can be read
    right."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        stamp = (pq.read_schema(path).metadata or {}).get(THINK_END_KEY.encode())
    except (OSError, pa.ArrowException, ValueError):  # a damaged file: its reader says so in one line
        return 1
    if stamp is None:
        return 1
    return THINK_END_VOCABULARY if stamp == str(THINK_END_VOCABULARY).encode() else FOREIGN_VOCABULARY


def write_text(text: str, path: Path) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(data: dict, path: Path) -> Path:
    return write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", path)


def read_whole(read: Callable[[], object], failed: Callable[[Exception], Exception], then=None):
    """``read()`` (a pyarrow read) validated whole when it is a Table, then ``then(it)`` (a DataFrame, say):
    pyarrow reads damaged text pages without decoding them, so invalid UTF-8 would otherwise surface later, in
    whatever first touches the value. What pyarrow raises on a damaged file (often several lines) becomes
    ``failed(err)``, the caller's one-line error. The one gate every parquet read of e1 passes (run files,
    samples, local data files)."""
    import pyarrow as pa

    try:
        found = read()
        if isinstance(found, pa.Table):
            found.validate(full=True)
        return found if then is None else then(found)
    except (pa.ArrowException, OSError, ValueError) as err:  # ValueError: undecodable metadata text, bad JSON
        raise failed(err) from err


def read_parquet(path: Path, columns: Sequence[str] | None = None):
    """A parquet file as a DataFrame; with ``columns``, only those are read when the file has them
    all (else the whole file, so the caller's schema check names what is missing)."""
    import pyarrow.parquet as pq

    def read():
        wanted = list(columns) if columns is not None and set(columns) <= set(pq.read_schema(path).names) else None
        return pq.read_table(path, columns=wanted)

    failed = lambda err: ResultsError(f"cannot read {path}: {err}", hint="move the damaged file away and rerun")  # noqa: E731
    return read_whole(read, failed, then=lambda table: table.to_pandas())


# a stored sample always holds these (a null would be read as 0 or False), and its counts are not negative
_REQUIRED = [column for column, dtype in SAMPLE_DTYPES.items() if dtype in ("int64", "bool")] + [
    "dataset",
    "problem_id",
    "mode",
]


# (mode text, think budget, solve budget) -> (most think tokens, most solve tokens) e1 decodes, None: unbounded;
# each mode's own (e1.engine.modes: Mode.count_bounds), handed down here when the modes load
_COUNT_BOUNDS: list[Callable[[str, int, int], tuple[int | None, int | None]]] = []


def bound_counts(bounds: Callable[[str, int, int], tuple[int | None, int | None]]) -> None:
    """Have :func:`_check_values` read each row's token bounds from ``bounds`` (the modes' own definition)."""
    _COUNT_BOUNDS[:] = [bounds]


def _check_values(frame) -> None:
    """Refuse a samples file whose rows e1 cannot have written, in one line naming the column."""
    hint = EDITED
    for column in _REQUIRED:
        if frame[column].isna().any():
            raise ResultsError(f"a samples file with a sample without {column}", hint=hint)
        if SAMPLE_DTYPES[column] == "int64" and (frame[column] < 0).any():
            raise ResultsError(f"a samples file with a negative {column}", hint=hint)
    check_counts(frame, hint)


EDITED = "the samples file was edited or damaged: move it away and rerun into a new --out"


def check_counts(frame, hint: str = EDITED) -> None:
    """A row e1 counted (``think_end`` set: an API that counts for itself leaves it null) holds no more
    thinking or solution tokens than its mode lets e1 decode at its budgets."""
    counted = frame[frame["think_end"].notna()] if _COUNT_BOUNDS and len(frame) else frame.iloc[:0]
    for (mode, think, solve), rows in counted.groupby(["mode", "think_budget", "solve_budget"], sort=False):
        for column, most in zip(("think_tokens", "solve_tokens"), _COUNT_BOUNDS[0](mode, think, solve)):
            over = rows[rows[column] > most] if most is not None else rows.iloc[:0]
            if len(over):
                row = over.iloc[0]
                raise ResultsError(
                    f"a samples file with {column} {row[column]} over the {most} that mode {mode} writes at "
                    f"t={think} s={solve} (dataset {row['dataset']}, problem {row['problem_id']}, sample "
                    f"{row['sample_index']})",
                    hint=hint,
                )


def samples_frame(rows=None, frame=None):
    """Samples as a DataFrame with the schema's columns and dtypes, from rows (dicts keyed by
    :data:`SAMPLE_COLUMNS`) or from a frame read back (older files gain :data:`SAMPLE_DEFAULTS`;
    columns beyond the schema, a sweep's ``model`` and a local file's own fields, are kept in front)."""
    import pandas as pd

    if frame is None:
        carried: dict[str, None] = {}  # a local file's own fields (e1.data.fields), kept as text
        for row in rows or []:  # a column added later (SAMPLE_DEFAULTS) may be left out, as in older files
            if not set(SAMPLE_COLUMNS) - set(SAMPLE_DEFAULTS) <= row.keys():
                raise ValueError(f"a sample row needs the columns {SAMPLE_COLUMNS}, got {sorted(row)}")
            carried.update(dict.fromkeys(key for key in row if key not in SAMPLE_COLUMNS))
        frame = pd.DataFrame(rows or [], columns=[*carried, *SAMPLE_COLUMNS]).astype(dict.fromkeys(carried, "string"))
    missing = {column: value for column, value in SAMPLE_DEFAULTS.items() if column not in frame.columns}
    foreign = [column for column in SAMPLE_COLUMNS if column not in frame.columns and column not in missing]
    if foreign:
        raise ResultsError(
            f"a samples file without e1's columns ({', '.join(foreign[:3])}, ...)",
            hint="it is not an e1 run's samples.parquet: move it away or use another --out",
        )
    if missing:
        frame = frame.assign(**missing)
    _check_values(frame)
    extra = [column for column in frame.columns if column not in SAMPLE_COLUMNS]  # a sweep's model, first
    return frame[extra + SAMPLE_COLUMNS].astype(SAMPLE_DTYPES)
