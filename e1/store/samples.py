"""Samples that grow linearly: each batch written once, as its own part, and compacted at the end.

    store = SampleStore(run_dir, writer=0)
    done = store.keys()                  # SAMPLE_KEY columns only: no texts in memory
    store.append(rows)                   # samples/part-r0-<id>.parquet, written atomically
    samples = store.compact()            # samples.parquet (deduplicated), parts removed

Writing a batch costs the same whether the run holds ten thousand rows or a million (the old
way rewrote the whole file after every batch: I/O grew with the square of the run). A run
directory holds ``samples.parquet`` (compacted rows; also today's single-file format) and
``samples/part-*.parquet`` (batches written since). Readers take both and drop rows whose
:data:`~e1.store.results.SAMPLE_KEY` was already seen, so a kill at any moment leaves a readable
state: a part is renamed into place only when complete (leftover ``.*.tmp`` files are
ignored, and removed when the run is next taken: :func:`e1.store.lock.run_lock`), and a kill
between writing the compacted file and removing the parts only leaves duplicates that the next
read drops. Every sample is drawn from its own seed, so two copies of one key are the same row.

Every reader of a run (a resume, ``e1 view``, ``e1 export``, ``e1 elo``) reads it through
:meth:`SampleStore.table` (a pyarrow Table: only the columns asked for, the filter pushed into
the scan) or :meth:`SampleStore.read` (a DataFrame), so each sees the same rows.

A run written before its mode texts' format was recorded (:func:`~e1.store.run_identity.mode_format`
below :data:`~e1.store.results.MODE_FORMAT`) has its ``mode`` labels rewritten as they are read, by
the ``legacy`` function its reader passes (:meth:`e1.engine.modes.Mode.legacy`: the store knows no
modes), before duplicates are dropped and ``where`` applies; :meth:`upgrade` writes them so once.

Parts are named by their ``writer`` (a rank under torchrun) and a random id, so several
processes append into one run directory without coordinating.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

from e1.errors import ResultsError
from e1.store.owned import remove_owned
from e1.store.paths import inside
from e1.store.results import (
    CONFIG,
    FOREIGN_VOCABULARY,
    MODE_FORMAT,
    SAMPLE_COLUMNS,
    SAMPLE_DEFAULTS,
    SAMPLE_DTYPES,
    SAMPLE_KEY,
    SAMPLES,
    SUMMARY,
    THINK_END_KEY,
    THINK_END_VOCABULARY,
    THINK_RATE_COLUMNS,
    check_counts,
    read_parquet,
    read_whole,
    samples_frame,
    think_end_vocabulary,
    write_parquet,
)
from e1.store.run_identity import FINGERPRINTS, mode_format, read_record
from e1.store.think_ends import read_today, stored_markers

PARTS_DIR = "samples"
_PART = re.compile(r"part-r\d+-[0-9a-f]+\.parquet")  # what append names a part: nothing else there is read or removed


class SampleStore:
    """The samples of one run directory: ``samples.parquet`` plus the parts appended since."""

    def __init__(self, out: Path, writer: int = 0, legacy: Callable[[str], str] | None = None):
        self.out, self.writer, self.legacy = Path(out), writer, legacy
        self.parts_dir = self.out / PARTS_DIR

    def relabels(self) -> bool:
        """Whether reads rewrite the ``mode`` labels: a ``legacy`` rewrite was given and the run's
        ``config.json`` records an older mode format (samples written before today's texts)."""
        if self.legacy is None or not self.files():
            return False
        try:
            return mode_format(self.out) < MODE_FORMAT
        except ResultsError:  # a damaged config.json: its own reader says so; the samples read as written
            return False

    def parts(self) -> list[Path]:
        """Complete parts, in name order (temporary files of a write in flight are not listed), each a regular
        file as e1 writes them: a link, a folder or a named pipe under a part's name is no part (a pipe would
        hold every reader of the run waiting for a writer)."""
        found = self.parts_dir.glob("part-*.parquet") if self.parts_dir.is_dir() else ()
        return sorted(path for path in found if _PART.fullmatch(path.name) and _regular(path))

    def files(self) -> list[Path]:
        """What the samples are read from: ``samples.parquet`` (if there), then the parts."""
        compacted = self.out / SAMPLES
        return ([compacted] if compacted.is_file() else []) + self.parts()

    def keys(self):
        """The :data:`SAMPLE_KEY` columns of every stored sample, duplicates dropped (no texts read)."""
        return self.read(SAMPLE_KEY)

    def read(self, columns: list[str] | None = None, where=None):
        """The stored samples (schema of :func:`e1.store.results.samples_frame`, with a sweep's
        ``model`` column), duplicates dropped; ``columns`` and ``where`` as in :meth:`table`."""
        frame = self.table(columns, where).to_pandas()
        if columns is None:
            return samples_frame(frame=frame)
        return frame.astype({column: SAMPLE_DTYPES[column] for column in frame.columns if column in SAMPLE_DTYPES})

    def names(self) -> list[str]:
        """The columns the samples have (the schema's, and a sweep's ``model``)."""
        return self._schema().names

    def table(self, columns: list[str] | None = None, where=None):
        """The stored samples as a pyarrow Table: only ``columns`` (those the samples have), only the
        rows the pyarrow expression ``where`` keeps (pushed into the scan), each sample once.

        Every reader of a run (resume, e1 view, export, elo) reads through here, so each sees the
        same rows: ``samples.parquet`` first, then the parts, and a key already seen is dropped
        (a kill between compaction and part cleanup leaves both copies on disk). ``think_end`` is read
        in today's vocabulary, from files written before it too (:mod:`e1.store.think_ends`).
        """
        import pyarrow as pa

        schema, parts, relabel = self._schema(), self.parts(), self.relabels()
        key = SAMPLE_KEY + [name for name in schema.names if name not in SAMPLE_COLUMNS]  # a sweep's model
        wanted = schema.names if columns is None else [name for name in columns if name in schema.names]
        needs = _fields(where, schema.names)
        old = self._vocabularies() if "think_end" in wanted + needs else {}
        # a filter on labels or on think_end: on today's labels and vocabulary (applied once they are read so)
        where, after = (
            (None, where) if ("mode" in needs and relabel) or ("think_end" in needs and old) else (where, None)
        )
        read = (
            list(dict.fromkeys(wanted + key + (needs if after is not None else [])))
            if parts or relabel or old
            else wanted
        )
        scans = self._scans(schema, read, where, old)
        if not scans:
            return schema.empty_table().select(wanted)
        table = pa.concat_tables([_flagged(found, vocabulary) if old else found for found, vocabulary in scans])
        if relabel:
            table = _relabeled(table, self.legacy)
        if parts or relabel:  # the compacted file holds each key once: only parts (or old labels) can repeat one
            table = _first_of_each(table, key)
        if old:
            import pyarrow.dataset as ds

            group = [name for name in key if name != "sample_index"]  # a problem in a cell: one prompt
            prompts = self.table([*group, "prompt"], where=ds.field("sample_index") == 0)
            vocabularies = table.column(_OLD).to_pylist()
            _check_stored(table, [vocabulary != THINK_END_VOCABULARY for vocabulary in vocabularies])
            table = read_today(table.drop_columns([_OLD]), vocabularies, prompts, group, self._markers())
        if after is not None:
            table = table.filter(after)
        return table.select(wanted)

    def old_files(self) -> set[Path]:
        """The samples files not of today's ``think_end`` vocabulary: written before it was recorded (read through
        :mod:`e1.store.think_ends`), or stamped with one e1 never wrote."""
        return set(self._vocabularies())

    def _vocabularies(self) -> dict[Path, int]:
        """Each samples file not of today's ``think_end`` vocabulary, with its own (:func:`think_end_vocabulary`)."""
        found = {path: think_end_vocabulary(path) for path in self.files()}
        return {path: vocabulary for path, vocabulary in found.items() if vocabulary != THINK_END_VOCABULARY}

    def _scans(self, schema, read: list[str], where, old: dict[Path, int]) -> list[tuple]:
        """(table, its files' think_end vocabulary) of ``samples.parquet``, then of the parts of each vocabulary,
        today's first (``old``: the files of another)."""
        compacted, parts = self.out / SAMPLES, self.parts()
        groups = [([compacted], f"cannot read {compacted}", "move the damaged file away and rerun")]
        groups = groups if compacted.is_file() else []
        hint = "move the damaged part away and rerun (its samples are generated again)"
        for vocabulary in (THINK_END_VOCABULARY, 1, FOREIGN_VOCABULARY):
            chosen = [part for part in parts if old.get(part, THINK_END_VOCABULARY) == vocabulary]
            groups += [(chosen, f"cannot read the parts in {self.parts_dir}", hint)] if chosen else []
        return [
            (_scan(paths, schema, read, where, failed, why), old.get(paths[0], THINK_END_VOCABULARY))
            for paths, failed, why in groups
        ]

    def _markers(self) -> tuple[str, str] | None:
        """The think markers' texts the run's ``config.json`` records (None: none, or a damaged file)."""
        try:
            return stored_markers(read_record(self.out / CONFIG))
        except ResultsError:  # its own reader says so
            return None

    def labelled(self, frame, source: Path | None = None):
        """Another of the run's frames (``summary.parquet``, a sweep's curves) with its ``mode`` and
        ``other_mode`` labels read as the samples' are (rewritten in a run of an older mode format);
        with ``source``, the file it was read from, its think rates are unknown (NaN) when that file was
        written before their vocabulary was recorded (:data:`~e1.store.results.THINK_END_KEY`)."""
        rates = [column for column in THINK_RATE_COLUMNS if column in frame.columns]
        if source is not None and rates and think_end_vocabulary(source) != THINK_END_VOCABULARY:
            frame = frame.assign(**dict.fromkeys(rates, float("nan")))
        if not self.relabels():
            return frame
        columns = [column for column in ("mode", "other_mode") if column in frame.columns]
        return frame.assign(
            **{
                column: frame[column].map(lambda label: label if label is None else self.legacy(label))
                for column in columns
            }
        )

    def upgrade(self) -> bool:
        """Write a run of an older mode format with today's labels (the parts folded into
        ``samples.parquet``, as :meth:`compact` does), before anything new is appended; True if it
        did. Its ``config.json`` is for the caller to record next (a kill in between rewrites again:
        the rewrite changes nothing twice)."""
        old = self._vocabularies()
        if not self.relabels() and not old:
            return False
        foreign = [path for path, vocabulary in old.items() if vocabulary == FOREIGN_VOCABULARY]
        if foreign:  # its words cannot be read: rewritten, they would be lost
            raise ResultsError(
                f"{foreign[0]} records a think_end vocabulary this e1 never wrote ({THINK_END_KEY})",
                hint="resume the run with the e1 that wrote it, or rerun into a new --out",
            )
        parts = self.parts()
        samples = self.read().sort_values(SAMPLE_KEY, ignore_index=True)
        write_parquet(samples, self.out / SAMPLES, kept=f"every finished sample is kept (in {self.out})")
        self._drop(parts)
        return True

    def append(self, rows: list[dict]) -> Path | None:
        """Write ``rows`` as one new part, atomically; None when there are none."""
        if not rows:
            return None
        path = self.parts_dir / f"part-r{self.writer}-{secrets.token_hex(8)}.parquet"
        return write_parquet(samples_frame(rows), path, kept="finished samples up to here are kept")

    def compact(self):
        """Fold the parts into ``samples.parquet`` (rows sorted by :data:`SAMPLE_KEY`, so the file
        is the same however many batches or ranks wrote it) and remove them; returns every sample."""
        parts = self.parts()
        samples = self.read().sort_values(SAMPLE_KEY, ignore_index=True)
        if self.parts_dir.exists():
            write_parquet(
                samples,
                self.out / SAMPLES,  # in row groups: a problem's texts read alone
                kept=f"every finished sample is kept (in {self.parts_dir})",
            )
            self._drop(parts)  # a kill before this line leaves duplicates the next read drops
        return samples

    def _drop(self, parts: list[Path]) -> None:
        """Remove the parts just folded into ``samples.parquet`` (and their folder once empty): a part
        written meanwhile, or a file the user put there, stays."""
        remove_owned(self.parts_dir, [part.name for part in parts], drop_root=True)

    def _schema(self):
        """The samples' schema: e1's columns, and the extra columns of the compacted file (a sweep's
        ``model``); a file whose columns are not e1's, or hold other types, is refused in one line."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = _with_part_columns(_e1_schema(), self.parts())
        compacted = self.out / SAMPLES
        if not compacted.is_file():
            return schema
        try:
            found = pq.read_schema(compacted)
        except (OSError, pa.ArrowException, ValueError) as err:  # ValueError: undecodable names or text
            raise ResultsError(f"cannot read {compacted}: {err}", hint="move the damaged file away and rerun") from err
        missing = [name for name in SAMPLE_COLUMNS if name not in found.names and name not in SAMPLE_DEFAULTS]
        if missing:
            raise ResultsError(
                f"{compacted} is a samples file without e1's columns ({', '.join(missing[:3])}, ...)",
                hint="it is not an e1 run's samples.parquet: move it away or use another --out",
            )
        for field in found:
            if field.name in schema.names and not _fits(field.type, schema.field(field.name).type):
                raise ResultsError(
                    f"{compacted}: column {field.name} holds {field.type}, not {schema.field(field.name).type}",
                    hint="it is not an e1 run's samples.parquet: move it away or use another --out",
                )
        extra = [field for field in found if field.name not in schema.names]
        return pa.schema(extra + list(schema))


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one)."""
    import stat

    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:  # removed meanwhile (compacted away)
        return False


def _with_part_columns(schema, parts: list[Path]):
    """``schema`` with the columns the parts add beyond it (a local file's fields), as text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    extra: dict[str, None] = {}
    for part in parts:
        try:
            names = pq.read_schema(part).names
        except (OSError, pa.ArrowException, ValueError) as err:  # ValueError: undecodable names or text
            raise ResultsError(
                f"cannot read the parts in {part.parent}: {part.name}: {err}",
                hint="move the damaged part away and rerun (its samples are generated again)",
            ) from err
        extra.update(dict.fromkeys(name for name in names if name not in schema.names))
    return pa.schema([pa.field(name, pa.string()) for name in extra] + list(schema))


def _e1_schema():
    import pyarrow as pa

    return pa.Schema.from_pandas(samples_frame(), preserve_index=False)


def _fits(found, wanted) -> bool:
    """A column type e1 reads as the schema's: the same, a string either size, or all-null."""
    import pyarrow as pa

    strings = (pa.string(), pa.large_string())
    return (
        found == wanted
        or found == pa.null()
        or (found in strings and wanted in strings)
        or (pa.types.is_floating(wanted) and (pa.types.is_integer(found) or pa.types.is_floating(found)))
    )


def _scan(paths: list[Path], schema, columns: list[str], where, failed: str, hint: str):
    """``paths`` as one pyarrow dataset in ``schema`` (a column a file lacks reads as null), validated whole."""
    import pyarrow.dataset as ds

    def read():
        return ds.dataset([str(p) for p in paths], schema=schema, format="parquet").to_table(
            columns=columns, filter=where
        )

    return read_whole(read, lambda err: ResultsError(f"{failed}: {err}", hint=hint))


def _fields(where, names: list[str]) -> list[str]:
    """The columns of ``names`` the pyarrow expression ``where`` may read: each whose name its text shows (pyarrow
    names no expression's fields; a name that only stands in a literal reads one column more, never one less)."""
    shown = "" if where is None else str(where)
    return [name for name in names if name in shown]


_OLD = "__think_end_vocabulary"  # the think_end vocabulary of the file a row was read from


def _flagged(table, vocabulary: int):
    """``table`` with a column holding the think_end vocabulary of the file its rows come from."""
    import numpy as np
    import pyarrow as pa

    return table.append_column(_OLD, pa.array(np.full(table.num_rows, vocabulary, dtype=np.int64)))


def _check_stored(table, old: list[bool]) -> None:
    """The rows of older files bounded as stored (:func:`~e1.store.results.check_counts`: a set ``think_end``
    is e1's count), before :func:`~e1.store.think_ends.read_today` may read their ``think_end`` as unknown."""
    import pyarrow as pa

    needed = ["dataset", "problem_id", "sample_index", "mode", "think_budget", "solve_budget", "think_tokens"]
    needed += ["solve_tokens", "think_end"]
    if set(needed) <= set(table.column_names):
        check_counts(table.select(needed).filter(pa.array(old, type=pa.bool_())).to_pandas())


def _relabeled(table, legacy: Callable[[str], str]):
    """``table`` with each distinct ``mode`` label rewritten by ``legacy`` (once per label, not per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    labels = table.column("mode").combine_chunks() if table.num_rows else None
    if labels is None:
        return table
    distinct = pc.unique(labels).to_pylist()
    new = pa.array([legacy(label) if label is not None else None for label in distinct], type=labels.type)
    index = table.schema.get_field_index("mode")
    return table.set_column(
        index, table.schema.field(index), pc.take(new, pc.index_in(labels, pa.array(distinct, type=labels.type)))
    )


def _first_of_each(table, key: list[str]):
    """The rows of ``table`` whose ``key`` was not seen in an earlier row, in table order."""
    import numpy as np
    import pyarrow as pa

    numbered = table.append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    first = numbered.group_by(key, use_threads=False).aggregate([("__row", "min")]).column("__row_min")
    return table.take(pa.array(np.sort(first.to_numpy())))


def held_datasets(out: Path, record: dict | None = None) -> list[str]:
    """The dataset names the run in ``out`` holds, sorted, from what the run itself recorded, never
    its ``--datasets`` read again (a relative path means another file, or none, from another
    directory): the names its ``config.json`` (``record``; read when None) keeps fingerprints under,
    which an eval run records as loaded before it writes a sample; else (a run written before
    fingerprints, or a sweep) the ``dataset`` column of its samples and summary, and of each model's
    run a sweep records. Empty: it holds no results of any dataset."""
    out = Path(out)
    record = (read_record(out / CONFIG) if record is None else record) or {}
    fingerprints = record.get(FINGERPRINTS)
    if isinstance(fingerprints, dict) and fingerprints:
        return sorted(map(str, fingerprints))
    names = set(SampleStore(out).table(["dataset"]).column("dataset").unique().to_pylist())
    if (out / SUMMARY).is_file():
        names.update(read_parquet(out / SUMMARY, columns=["dataset"]).get("dataset", ()))
    runs = record.get("runs")  # a sweep: {model: its eval run's folder, relative to out}
    for folder in runs.values() if isinstance(runs, dict) else ():
        if isinstance(folder, str) and (run := inside(out, folder)).is_dir():
            names.update(held_datasets(run))
    return sorted(str(name) for name in names if name is not None)
