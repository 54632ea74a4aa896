"""Every reader of a run reads it the same way: resume (SampleStore), e1 view, e1 export and e1 elo,
over generated run states (parts and the compacted file overlapping, leftovers of killed writes,
damaged parts); taking the run again leaves no temporary file behind."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import E1Error
from e1.report.elo import load_results
from e1.report.export import load_run
from e1.report.metrics import summarize
from e1.store import SampleStore, run_lock
from e1.store.results import SAMPLES, samples_frame, write_json, write_parquet
from e1.view.runs import Run
from e1.view.tables import SampleFilter, facets, sample_page

KEYS = [(f"p{p}", i) for p in range(4) for i in range(3)]


def row(key: tuple[str, int]) -> dict:
    """One sample; every copy of a key is the same row (each sample is drawn from its own seed)."""
    pid, index = key
    correct = (int(pid[1:]) + index) % 2 == 0
    return dict(
        dataset="toy",
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
        think_text="t",
        solution_text="s",
        extracted_answer="1" if correct else "0",
        gold="1",
        reward=float(correct),
        correct=correct,
        tests_passed=math.nan,
        first_failure=None,
        think_end="budget",
    )


# where each stored key lies: in samples.parquet (0) and/or in parts 1..3 (a kill between compaction and cleanup
# leaves a key in both)
STATES = st.dictionaries(st.sampled_from(KEYS), st.sets(st.integers(0, 3), min_size=1), min_size=1)


def write_state(out: Path, where: dict, leftovers: bool) -> None:
    write_json({"model": "org/m", "kind": "eval", "datasets": ["toy"]}, out / "config.json")
    for place in range(4):
        rows = [row(key) for key, places in sorted(where.items()) if place in places]
        if rows:
            path = out / SAMPLES if place == 0 else out / "samples" / f"part-r0-{place}.parquet"
            write_parquet(samples_frame(rows), path)
    write_parquet(summarize(samples_frame([row(key) for key in where])), out / "summary.parquet")
    if leftovers:  # kill -9 during the summary write and during a part's write
        (out / ".summary.parquet.0badc0de.tmp").write_bytes(b"PAR1 half")
        (out / "samples").mkdir(exist_ok=True)
        (out / "samples" / ".part-r0-9.parquet.0123abcd.tmp").write_bytes(b"PAR1 half")


def seen_by_every_reader(out: Path) -> dict[str, list[tuple[str, int]]]:
    """The (problem, sample) keys each reader sees, sorted."""
    keys = sorted(map(tuple, SampleStore(out).keys()[["problem_id", "sample_index"]].itertuples(index=False)))
    run = Run(str(out), out)
    page = sample_page(run, SampleFilter(), limit=200)
    assert page["total"] == facets(run)["samples"] == len(page["rows"])  # the page's counts and the run's facets
    seen = {"resume": keys, "view": sorted((r["problem_id"], r["sample_index"]) for r in page["rows"])}
    if (out / SAMPLES).is_file():  # export reads finished runs only
        seen["export"] = sorted(
            (str(r.problem_id), int(r.sample_index)) for cell in load_run(out).cells for r in cell.samples.itertuples()
        )
    attempts = load_results(out)
    seen["elo"] = sorted((pid, index) for pid, tries in attempts.items() for index in range(len(tries)))
    return seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STATES, st.booleans())
def test_every_reader_sees_each_stored_sample_once(where, leftovers):
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        write_state(out, where, leftovers)
        stored = sorted(where)
        for reader, keys in seen_by_every_reader(out).items():
            if reader == "elo":  # elo numbers a problem's attempts 0.. in sample order
                assert sorted({k[0] for k in keys}) == sorted({k[0] for k in stored}) and len(keys) == len(stored)
            else:
                assert keys == stored, reader
        with run_lock(out, "e1 eval"):  # what a resume does first
            assert not list(out.rglob("*.tmp"))
        assert seen_by_every_reader(out)["resume"] == stored


def test_a_damaged_part_is_one_line_from_every_reader(tmp_path):
    out = tmp_path / "run"
    write_state(out, {key: {0, 1} for key in KEYS[:4]}, leftovers=False)
    (out / "samples" / "part-r0-7.parquet").write_bytes(b"not parquet")
    readers = {
        "resume": lambda: SampleStore(out).keys(),
        "view": lambda: facets(Run(str(out), out)),
        "export": lambda: load_run(out),
        "elo": lambda: load_results(out),
    }
    for reader, read in readers.items():
        with pytest.raises(E1Error, match="cannot read the parts") as caught:
            read()
        assert "\n" not in caught.value.message, reader


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.floats(0, 1), byte=st.sampled_from([0x00, 0x80, 0xFF, 0x22]))
def test_damage_anywhere_in_the_samples_file_is_read_or_one_line(start, byte):
    """One damaged byte anywhere in samples.parquet (text pages included: pyarrow reads those
    undecoded): every reader reads the run or raises one printable e1 line, never a decode error."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        write_state(out, {key: {0} for key in KEYS}, leftovers=False)
        path = out / SAMPLES
        raw = bytearray(path.read_bytes())
        raw[int(start * (len(raw) - 1))] = byte
        path.write_bytes(bytes(raw))
        readers = {
            "resume": lambda: SampleStore(out).read(),
            "view": lambda: sample_page(Run(str(out), out), SampleFilter()),
            "export": lambda: load_run(out),
            "elo": lambda: load_results(out),
        }
        for reader, read in readers.items():
            try:
                read()
            except E1Error as err:
                assert "\n" not in err.message and err.message.isprintable(), (reader, err.message)


def test_a_sweep_keeps_each_model_s_samples(tmp_path):
    """A sweep's samples.parquet holds every model's rows under the same keys: the model is part of the key."""
    out = tmp_path / "sweep"
    import pandas as pd

    rows = samples_frame([row(key) for key in KEYS])
    frame = pd.concat([rows.assign(model="a"), rows.assign(model="b")], ignore_index=True)
    write_parquet(frame[["model", *rows.columns]], out / SAMPLES)
    write_json({"models": ["a", "b"], "kind": "sweep"}, out / "config.json")
    assert len(SampleStore(out).read()) == 2 * len(KEYS) and SampleStore(out).read()["model"].tolist()[:1] == ["a"]
    assert facets(Run(str(out), out))["models"] == ["a", "b"]
    assert sample_page(Run(str(out), out), SampleFilter(model="b"))["total"] == len(KEYS)
