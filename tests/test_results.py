"""The utility layer: the atomic writer, the run-directory identity check, sample rows, did-you-mean."""

from __future__ import annotations

import json
import os
import stat

import pandas as pd
import pytest

from e1.errors import ResultsError, did_you_mean
from e1.store.results import (
    CONFIG,
    SAMPLE_COLUMNS,
    atomic_write,
    samples_frame,
    write_json,
    write_parquet,
)
from e1.store.run_identity import check_run_dir


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it afterwards."""
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


@pytest.mark.parametrize(
    "mask, mode, folder_mode", [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775), (0o077, 0o600, 0o700)]
)
def test_written_files_and_folders_follow_the_umask(tmp_path, umask, mask, mode, folder_mode):
    umask(mask)
    write_json({"a": 1}, tmp_path / "config.json")
    write_parquet(pd.DataFrame({"x": [1]}), tmp_path / "samples.parquet")
    folder = atomic_write(tmp_path / "step_1", lambda tmp: (tmp / "model.bin").write_bytes(b"w"), directory=True)
    for path in (tmp_path / "config.json", tmp_path / "samples.parquet"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path  # mkstemp alone would give 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == folder_mode
    assert (folder / "model.bin").read_bytes() == b"w"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_json({"run": 1}, tmp_path / "config.json")

    def crash(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "step_2", lambda tmp: crash(tmp / "x"), directory=True)
    assert json.loads(path.read_text()) == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_folder_replaces_the_folder_at_its_path(tmp_path):
    atomic_write(tmp_path / "step_1", lambda tmp: (tmp / "old").write_text("1"), directory=True)
    atomic_write(tmp_path / "step_1", lambda tmp: (tmp / "new").write_text("2"), directory=True)
    assert sorted(p.name for p in (tmp_path / "step_1").iterdir()) == [".e1-files.json", "new"]  # and what e1 wrote
    (tmp_path / "step_1" / "mine.txt").write_text("the user's")  # a file e1 did not write: refused, kept
    with pytest.raises(ResultsError, match="mine.txt is not a file e1 wrote"):
        atomic_write(tmp_path / "step_1", lambda tmp: (tmp / "newer").write_text("3"), directory=True)
    assert (tmp_path / "step_1" / "mine.txt").read_text() == "the user's" and not list(tmp_path.glob(".step_1*"))


def test_run_dir_check_names_the_first_differing_key(tmp_path):
    out = tmp_path / "run"
    assert check_run_dir(out, {"model": "a", "n": 4}, ("model", "n")) is None  # nothing there yet
    write_json({"model": "a", "n": 4, "note": "x"}, out / CONFIG)
    assert check_run_dir(out, {"model": "a", "n": 4, "note": "y"}, ("model", "n"))["note"] == "x"  # not identity
    with pytest.raises(ResultsError, match=r"holds a sweep with a different n \(4, now 8\)"):
        check_run_dir(out, {"model": "a", "n": 8}, ("model", "n"), what="sweep")
    assert check_run_dir(out, {"n": 4}, ("model", "n")) is not None  # a key the current run lacks is not compared
    (out / CONFIG).write_text("{broken")
    with pytest.raises(ResultsError, match="cannot read"):
        check_run_dir(out, {}, ("model",))
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultsError, match="is a file"):
        check_run_dir(tmp_path / "file", {}, ())


def test_sample_rows_are_built_by_column_name():
    row = dict(
        dataset="d",
        problem_id="p",
        sample_index=0,
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
        extracted_answer="2",
        gold="2",
        reward=1.0,
        correct=True,
        tests_passed=float("nan"),
        first_failure=None,
        think_end="budget",
    )
    frame = samples_frame([dict(reversed(row.items()))])  # the order of the keys does not matter
    assert list(frame.columns) == SAMPLE_COLUMNS and frame.iloc[0]["think_budget"] == 8
    assert frame.iloc[0]["solution_text"] == "s" and bool(frame.iloc[0]["forced"])
    with pytest.raises(ValueError, match="needs the columns"):
        samples_frame([{k: v for k, v in row.items() if k != "gold"}])


def test_did_you_mean_offers_the_closest_names_else_all():
    assert did_you_mean("trunc", ["elastic", "truncate", "none"]) == "did you mean 'truncate'?"
    assert did_you_mean("aime2", ["aime", "aime25", "amc"]) == "did you mean 'aime25' or 'aime'?"  # closest first
    assert did_you_mean("zzz", ["train", "mask"]) == "choose one of train, mask"
    assert did_you_mean("zzz", ["a"], listing="known datasets:") == "known datasets: a"


def test_a_run_is_its_model_however_the_path_is_typed_or_moved(tmp_path, tiny_model_dir, monkeypatch):
    """Identity by what the model is: the same folder typed relative or absolute, or moved, resumes;
    another checkpoint (other weights, same shapes) is refused."""
    import shutil

    import pytest

    from e1.errors import ResultsError
    from e1.store.results import write_json
    from e1.store.run_identity import check_run_dir, model_identity

    out = tmp_path / "run"
    write_json(
        {"model": str(tiny_model_dir), "model_identity": model_identity(str(tiny_model_dir))}, out / "config.json"
    )
    monkeypatch.chdir(tiny_model_dir.parent)
    typed = {"model": f"./{tiny_model_dir.name}", "model_identity": model_identity(f"./{tiny_model_dir.name}")}
    assert check_run_dir(out, typed, ("model",)) is not None  # relative spelling: the same run
    moved = shutil.copytree(tiny_model_dir, tmp_path / "elsewhere" / "tiny")
    assert check_run_dir(out, {"model": str(moved), "model_identity": model_identity(str(moved))}, ("model",))
    weights = next(moved.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-100:] = bytes(100)  # same file, same size, other weights: another checkpoint
    weights.write_bytes(bytes(data))
    with pytest.raises(ResultsError, match="different model"):
        check_run_dir(out, {"model": str(moved), "model_identity": model_identity(str(moved))}, ("model",))
    assert model_identity("Salesforce/E1-Math-1.5B") == "Salesforce/E1-Math-1.5B"  # hub ids as typed
