"""Prepared rows are the rows of the source on disk now: a mirror corrected in place or copied
elsewhere is read afresh (never from ``datasets``' cache), each prepared file records its source's
fingerprint and options, and ``load_dataset`` prepares again exactly when the mirror has changed."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import e1.data
from e1.data import load_dataset, preparation, prepare_benchmark, prepare_file, registry
from tests.test_data_choice import GPQA_README

GSM8K_README = """---
configs:
- config_name: main
  data_files:
  - split: test
    path: main/test-*
---
"""


def write_gsm8k(root: Path, answers: list[int]) -> list[tuple[str, str]]:
    """openai/gsm8k in its layout and schema; returns the (problem, answer) rows it should prepare to."""
    folder = root / "openai/gsm8k"
    (folder / "main").mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(GSM8K_README)
    questions = [f"Sam has {n} marbles. How many?" for n in answers]
    pd.DataFrame({"question": questions, "answer": [f"He has {n}.\n#### {n:,}" for n in answers]}).to_parquet(
        folder / "main/test-00000-of-00001.parquet", index=False
    )
    return [(question, str(n)) for question, n in zip(questions, answers)]


def write_gpqa(root: Path, answers: list[int]) -> list[tuple[str, str]]:
    """Idavidrein/gpqa's diamond csv; returns the (id, correct option) rows it should prepare to."""
    folder = root / "Idavidrein/gpqa"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(GPQA_README)
    rows = [
        {
            "Question": f"What is {n} + 0?",
            "Correct Answer": str(n),
            "Incorrect Answer 1": f"{n}a",
            "Incorrect Answer 2": f"{n}b",
            "Incorrect Answer 3": f"{n}c",
            "Record ID": f"rec{n}",
        }
        for n in answers
    ]
    pd.DataFrame(rows).to_csv(folder / "gpqa_diamond.csv", index=False)
    return [(f"rec{n}", str(n)) for n in answers]


WRITERS = {"gsm8k": write_gsm8k, "gpqa-diamond": write_gpqa}


def prepared_rows(name: str, frame: pd.DataFrame) -> list[tuple[str, str]]:
    if name == "gsm8k":
        return list(zip(frame["problem"], frame["answer"]))
    shown = [json.loads(choices)[ord(letter) - ord("A")] for choices, letter in zip(frame["choices"], frame["answer"])]
    return list(zip(frame["id"], shown))


def test_a_mirror_corrected_in_place_or_elsewhere_prepares_its_new_rows(tmp_path, monkeypatch):
    """The reported case: mirrors of 2, then 4 (same folder), then 3 rows (another folder)."""
    for root, count in ((tmp_path / "m1", 2), (tmp_path / "m1", 4), (tmp_path / "m2", 3)):
        expected = write_gsm8k(root, list(range(1, count + 1)))
        monkeypatch.setenv("E1_HUB_MIRROR", str(root))
        result = prepare_benchmark("gsm8k", tmp_path / "out")
        assert result.rows == count
        assert prepared_rows("gsm8k", pd.read_parquet(result.path)) == expected


step = st.tuples(
    st.sampled_from(sorted(WRITERS)),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=4, unique=True),  # the mirror's rows
    st.booleans(),  # True: write into another folder; False: rewrite the current one in place
    st.booleans(),  # True: read through load_dataset (prepares when needed); False: e1 data prepare
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=2, max_size=4))
def test_prepared_rows_equal_the_current_mirror_every_time(steps, monkeypatch):
    with tempfile.TemporaryDirectory() as folder:
        work, roots = Path(folder), 0
        for name, answers, elsewhere, through_load in steps:
            roots += elsewhere
            root = work / f"mirror{roots}"
            expected = WRITERS[name](root, answers)
            monkeypatch.setenv("E1_HUB_MIRROR", str(root))
            if through_load:
                frame = load_dataset(name, work / "data")
            else:
                frame = pd.read_parquet(prepare_benchmark(name, work / "data").path)
            assert prepared_rows(name, frame) == expected


def test_an_unchanged_mirror_is_not_read_again(mirror_rows, monkeypatch, tmp_path):
    reads = []
    real = preparation.hub_records
    monkeypatch.setattr(preparation, "hub_records", lambda *args, **kw: reads.append(args) or real(*args, **kw))
    assert len(load_dataset("gsm8k")) == 2 and len(reads) == 1
    assert len(load_dataset("gsm8k")) == 2 and len(reads) == 1  # the prepared file, as it is
    (mirror_rows / "openai/gsm8k/.cache").mkdir()  # hf download's bookkeeping is not the data
    (mirror_rows / "openai/gsm8k/.cache/x.metadata").write_text("etag")
    assert len(load_dataset("gsm8k")) == 2 and len(reads) == 1
    write_gsm8k(mirror_rows, [5, 6, 7])
    assert len(load_dataset("gsm8k")) == 3 and len(reads) == 2
    monkeypatch.delenv("E1_HUB_MIRROR")  # no mirror to compare with: the prepared file is used
    assert len(load_dataset("gsm8k")) == 3 and len(reads) == 2


@pytest.fixture
def mirror_rows(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "mirror"
    write_gsm8k(root, [1, 2])
    monkeypatch.setenv("E1_HUB_MIRROR", str(root))
    return root


def test_prepared_file_records_its_source_and_options(mirror_rows, tmp_path):
    path = prepare_benchmark("gsm8k").path
    recorded = preparation.prepared_source(path)
    assert recorded["source"] == preparation.source_fingerprint(e1.data.get_benchmark("gsm8k"))
    assert recorded["source"].startswith(f"mirror {(mirror_rows / 'openai/gsm8k').resolve()} sha256:")
    assert recorded["options"] == {}
    digits = prepare_benchmark("digits", options={"rows": "5"}).path
    assert preparation.prepared_source(digits) == {
        "source": "generated by e1 (e1.data.digits_task)",
        "options": {"seed": "0", "rows": "5"},
    }


def test_preparing_again_keeps_the_recorded_options(monkeypatch):
    prepare_benchmark("digits", options={"rows": "5"})
    bumped = replace(e1.data.get_benchmark("digits"), task_version=99)  # a new row mapping: prepare again
    monkeypatch.setattr(registry, "_REGISTRY", {**registry._REGISTRY, "digits": bumped})  # past the registry's gate
    frame = load_dataset("digits")
    assert len(frame) == 5 and set(frame["task_version"]) == {99}  # not the default 500 rows


def test_a_file_prepared_under_a_registered_name_is_not_replaced_by_the_mirror(mirror_rows, tmp_path):
    own = tmp_path / "mine.jsonl"
    own.write_text(json.dumps({"question": "Mine?", "answer": "#### 9"}) + "\n")
    prepare_file(own, name="gsm8k")
    assert load_dataset("gsm8k")["problem"].tolist() == ["Mine?"]


def test_a_file_prepared_before_sources_were_recorded_is_prepared_again_from_the_mirror(mirror_rows):
    path = prepare_benchmark("gsm8k").path
    pd.read_parquet(path).head(1).to_parquet(path, index=False)  # no e1.source metadata, one row
    assert preparation.prepared_source(path) == {}
    assert len(load_dataset("gsm8k")) == 2


def _replace_keeping_size_and_times(path: Path, content: bytes) -> None:
    """Rewrite ``path`` in place (same inode) with ``content`` of its size, then set its times back
    (what ``cp -p``, ``rsync -t`` and ``touch -r`` leave behind)."""
    before = path.stat()
    assert len(content) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(content)
    import os

    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(st.integers(10**5, 10**6 - 1), min_size=2, max_size=4, unique=True), data=st.data())
def test_a_mirror_file_replaced_by_one_of_equal_size_and_time_is_prepared_again(first, data, monkeypatch):
    """Fingerprints by content: the same size and modification time is not the same file."""
    second = data.draw(
        st.lists(st.integers(10**5, 10**6 - 1), min_size=len(first), max_size=len(first), unique=True).filter(
            lambda answers: answers != first
        )
    )
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        write_gsm8k(work / "new", second)  # the replacement, written beside the mirror
        expected = write_gsm8k(work / "mirror", first) and write_gsm8k(work / "new", second)
        file = Path("openai/gsm8k/main/test-00000-of-00001.parquet")
        replacement = (work / "new" / file).read_bytes()
        assume((work / "mirror" / file).stat().st_size == len(replacement))
        monkeypatch.setenv("E1_HUB_MIRROR", str(work / "mirror"))
        assert [a for _, a in prepared_rows("gsm8k", load_dataset("gsm8k", work / "data"))] == list(map(str, first))
        _replace_keeping_size_and_times(work / "mirror" / file, replacement)
        assert prepared_rows("gsm8k", load_dataset("gsm8k", work / "data")) == expected
