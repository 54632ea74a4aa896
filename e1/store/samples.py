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
ignored), and a kill between writing the compacted file and removing the parts only leaves
duplicates that the next read drops. Every sample is drawn from its own seed, so two copies
of one key are the same row.

Parts are named by their ``writer`` (a rank under torchrun) and a random id, so several
processes append into one run directory without coordinating.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from e1.store.results import SAMPLE_DTYPES, SAMPLE_KEY, SAMPLES, read_parquet, samples_frame, write_parquet

PARTS_DIR = "samples"


class SampleStore:
    """The samples of one run directory: ``samples.parquet`` plus the parts appended since."""

    def __init__(self, out: Path, writer: int = 0):
        self.out, self.writer = Path(out), writer
        self.parts_dir = self.out / PARTS_DIR

    def parts(self) -> list[Path]:
        """Complete parts, in name order (temporary files of a write in flight are not listed)."""
        return sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir.is_dir() else []

    def keys(self):
        """The :data:`SAMPLE_KEY` columns of every stored sample, duplicates dropped (no texts read)."""
        return self._read(SAMPLE_KEY)

    def read(self):
        """Every stored sample (schema of :func:`e1.store.results.samples_frame`), duplicates dropped."""
        return self._read(None)

    def append(self, rows: list[dict]) -> Path | None:
        """Write ``rows`` as one new part, atomically; None when there are none."""
        if not rows:
            return None
        path = self.parts_dir / f"part-r{self.writer}-{secrets.token_hex(8)}.parquet"
        return write_parquet(samples_frame(rows), path, kept="finished samples up to here are kept")

    def compact(self):
        """Fold the parts into ``samples.parquet`` (rows sorted by :data:`SAMPLE_KEY`, so the file
        is the same however many batches or ranks wrote it) and remove them; returns every sample."""
        samples = self.read().sort_values(SAMPLE_KEY, ignore_index=True)
        if self.parts_dir.exists():
            write_parquet(samples, self.out / SAMPLES,  # in row groups: a problem's texts read alone
                          kept=f"every finished sample is kept (in {self.parts_dir})")
            shutil.rmtree(self.parts_dir)  # a kill before this line leaves duplicates the next read drops
        return samples

    def _read(self, columns: list[str] | None):
        import pandas as pd

        frames = []
        if (self.out / SAMPLES).exists():
            frames.append(_whole(read_parquet(self.out / SAMPLES, columns), columns))  # keys: no texts read
        parts = self.parts()
        if parts:
            frames.append(_read_parts(parts, columns))
        if not frames:
            return _whole(samples_frame(), columns)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        return frame.drop_duplicates(SAMPLE_KEY, ignore_index=True)


def _whole(frame, columns: list[str] | None):
    """A frame read back in the schema's dtypes (older files gain their missing columns; a file
    without e1's columns is refused by :func:`e1.store.results.samples_frame`)."""
    if columns is None or not set(columns) <= set(frame.columns):
        frame = samples_frame(frame=frame)
        return frame if columns is None else frame[columns]
    return frame[columns].astype({column: SAMPLE_DTYPES[column] for column in columns})


def _read_parts(parts: list[Path], columns: list[str] | None):
    """All parts as one frame, read as one pyarrow dataset (in parallel, only ``columns``)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from e1.errors import ResultsError

    schema = pa.Schema.from_pandas(samples_frame(), preserve_index=False)
    try:
        table = ds.dataset([str(p) for p in parts], schema=schema, format="parquet").to_table(columns=columns)
    except (OSError, pa.ArrowException) as err:
        raise ResultsError(f"cannot read the parts in {parts[0].parent}: {err}",
                           hint="move the damaged part away and rerun (its samples are generated again)") from err
    return _whole(table.to_pandas(), columns)
