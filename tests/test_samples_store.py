"""The append-only samples store: parts written once, read as one deduplicated set, compacted."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from e1.errors import ResultsError
from e1.store.results import SAMPLE_COLUMNS, SAMPLE_KEY, SAMPLES
from e1.store.samples import PARTS_DIR, SampleStore


def row(pid: str, index: int, text: str = "t") -> dict:
    return dict(
        dataset="d",
        problem_id=pid,
        sample_index=index,
        mode="elastic",
        think_budget=8,
        solve_budget=4,
        prompt_tokens=3,
        think_tokens=8,
        solve_tokens=2,
        forced=True,
        finish_reason="stop",
        think_text=text,
        solution_text="s",
        extracted_answer="2",
        gold="2",
        reward=1.0,
        correct=True,
        tests_passed=math.nan,
        first_failure=None,
        think_end="budget",
    )


def test_each_batch_is_one_new_part_and_reads_back_as_one_set(tmp_path):
    store = SampleStore(tmp_path / "run", writer=3)
    assert len(store.keys()) == 0 and list(store.keys().columns) == SAMPLE_KEY and store.parts() == []
    first = store.append([row("p1", 0), row("p1", 1)])
    second = store.append([row("p2", 0)])
    assert store.append([]) is None
    assert first.name.startswith("part-r3-") and first.parent.name == PARTS_DIR
    assert len(store.parts()) == 2 and not (tmp_path / "run" / SAMPLES).exists()  # nothing rewritten
    assert pd.read_parquet(first)["problem_id"].tolist() == ["p1", "p1"]  # a part holds its batch only
    assert pd.read_parquet(second)["problem_id"].tolist() == ["p2"]
    keys = store.keys()
    assert list(keys.columns) == SAMPLE_KEY and len(keys) == 3
    samples = store.read()
    assert list(samples.columns) == SAMPLE_COLUMNS and sorted(samples["problem_id"]) == ["p1", "p1", "p2"]


def test_compact_writes_one_file_and_removes_the_parts(tmp_path):
    store = SampleStore(tmp_path / "run")
    store.append([row("p1", 0)])
    store.append([row("p2", 0)])
    compacted = store.compact()
    assert len(compacted) == 2 and not (tmp_path / "run" / PARTS_DIR).exists()
    assert sorted(pd.read_parquet(tmp_path / "run" / SAMPLES)["problem_id"]) == ["p1", "p2"]
    store.append([row("p3", 0)])  # a later run appends beside the compacted file
    assert sorted(store.compact()["problem_id"]) == ["p1", "p2", "p3"]


def test_compacted_samples_are_in_row_groups_so_one_problem_is_read_alone(tmp_path, monkeypatch):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from e1.store import results

    monkeypatch.setattr(results, "ROW_GROUP_ROWS", 4)
    store = SampleStore(tmp_path / "run")
    store.append([row(f"p{p}", i, text=f"{p}.{i}") for p in (3, 1, 2) for i in range(4)])  # 12 rows, out of order
    store.compact()
    path = tmp_path / "run" / SAMPLES
    assert pq.ParquetFile(path).metadata.num_row_groups == 3  # 12 rows / 4, each one problem (sorted by key)
    fragment = next(ds.dataset(path).get_fragments())
    assert len(fragment.split_by_row_group()) == 3
    (kept,) = fragment.split_by_row_group(ds.field("problem_id") == "p2")  # min/max statistics rule out the rest
    assert kept.to_table(columns=["think_text"])["think_text"].to_pylist() == ["2.0", "2.1", "2.2", "2.3"]


def test_a_kill_between_compaction_and_cleanup_duplicates_nothing(tmp_path, monkeypatch):
    store = SampleStore(tmp_path / "run")
    store.append([row("p1", 0), row("p1", 1)])
    store.append([row("p2", 0)])
    monkeypatch.setattr("e1.store.samples.remove_owned", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        store.compact()
    monkeypatch.undo()
    assert (tmp_path / "run" / SAMPLES).exists() and len(store.parts()) == 2  # both copies on disk: 6 rows
    assert len(store.keys()) == 3 and len(store.read()) == 3
    assert len(store.compact()) == 3 and len(pd.read_parquet(tmp_path / "run" / SAMPLES)) == 3


def test_a_write_in_flight_is_ignored_and_a_damaged_part_is_named(tmp_path):
    store = SampleStore(tmp_path / "run")
    store.append([row("p1", 0)])
    (store.parts_dir / ".part-r0-0123.parquet.abcd.tmp").write_bytes(b"PAR1 half a file")  # kill -9 mid-write
    assert len(store.read()) == 1
    (store.parts_dir / "part-r9-bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(ResultsError, match="cannot read the parts"):
        store.read()


def test_todays_single_file_format_reads_with_new_columns_defaulted(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = pd.DataFrame([row("p1", 0)]).drop(columns=["tests_passed", "first_failure", "think_end"])
    old.to_parquet(out / SAMPLES, index=False)
    store = SampleStore(out)
    store.append([row("p2", 0)])
    samples = store.read()
    assert list(samples.columns) == SAMPLE_COLUMNS and sorted(samples["problem_id"]) == ["p1", "p2"]
    assert samples["tests_passed"].isna().all()


def test_a_named_pipe_or_a_folder_under_a_part_s_name_is_no_part(tmp_path):
    """Only regular files are parts: a named pipe named as one would hold every reader of the run (resume, e1 view,
    e1 export) waiting forever for a writer, so it is passed over, as a link is (checked under an alarm)."""
    import os
    import signal

    store = SampleStore(tmp_path / "run")
    store.append([row("p1", 0)])
    os.mkfifo(store.parts_dir / f"part-r0-{'cd' * 8}.parquet")
    (store.parts_dir / f"part-r1-{'ef' * 8}.parquet").mkdir()

    def hung(signum, frame):
        raise TimeoutError("a reader waited on the named pipe")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        assert len(store.parts()) == 1 and store.read()["problem_id"].tolist() == ["p1"]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
