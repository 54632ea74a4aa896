"""A full disk (quota, read-only file system, file too large, I/O error) says so in one line:
which file, what was kept, and that rerunning the same command resumes, which it does."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import E1Error
from e1.store.disk import DISK_ERRNOS, DiskError, disk_errno
from e1.store.results import SAMPLE_KEY, SAMPLES, atomic_write, write_json, write_parquet
from e1.store.samples import SampleStore
from tests.test_bad_inputs import run_main
from tests.test_samples_store import row

ERRNOS = sorted(DISK_ERRNOS)
EVAL = ["--datasets", "{data}", "--n", "2", "--think", "8", "--solve", "4", "--batch-size", "2", "--temperature", "1"]


def refuse(code: int):
    """What the file system raises: an OSError with the errno and the system's text."""
    return OSError(code, os.strerror(code))


def library_refusals(code: int) -> list[BaseException]:
    """How the libraries that write for e1 report it: pyarrow, safetensors, a wrapped cause."""
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = refuse(code)
    return [
        OSError(code, f"Error writing bytes to file. Detail: [errno {code}] {os.strerror(code)}"),
        RuntimeError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})"),
        wrapped,
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    code=st.sampled_from(ERRNOS),
    stage=st.sampled_from(["open", "write", "replace"]),
    writer=st.sampled_from(["parquet", "json", "part"]),
    before=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
)
def test_every_errno_of_the_class_is_one_line_naming_the_file_and_keeping_it(
    tmp_path_factory, monkeypatch, code, stage, writer, before
):
    out = tmp_path_factory.mktemp("run")
    path = out / {"parquet": SAMPLES, "json": "config.json", "part": "samples"}[writer]
    if writer != "part":
        write_json({"before": before}, path)  # what was there: it must stay whole
    kept = path.read_bytes() if path.is_file() else None
    real = {"open": os.open, "replace": os.replace}
    with monkeypatch.context() as patch:
        if stage == "write":  # the library's own writer fails (pyarrow, pathlib)
            patch.setattr(pq, "write_table", lambda *a, **k: (_ for _ in ()).throw(refuse(code)))
            patch.setattr(Path, "write_text", lambda *a, **k: (_ for _ in ()).throw(refuse(code)))
        else:
            patch.setattr(
                os,
                stage,
                lambda *a, **k: (_ for _ in ()).throw(refuse(code)) if str(out) in str(a[0]) else real[stage](*a, **k),
            )
        with pytest.raises(DiskError) as caught:
            if writer == "part":
                SampleStore(out).append([row("p1", 0)])
            elif writer == "parquet":
                write_parquet(pd.DataFrame({"x": [before]}), path)
            else:
                write_json({"after": before}, path)
    line = str(caught.value)
    assert isinstance(caught.value, E1Error) and caught.value.errno == code and "\n" not in line
    assert DISK_ERRNOS[code][0] in line and "rerun the same command to resume" in line
    named = caught.value.path
    assert named.parent == path if writer == "part" else named == path
    assert str(named) in line and (
        "finished samples up to here are kept" in line if writer == "part" else "kept" in line
    )
    if kept is not None:
        assert path.read_bytes() == kept
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left behind"


@pytest.mark.parametrize("code", ERRNOS)
def test_each_library_way_of_saying_it_is_recognised(code):
    for err in library_refusals(code):
        assert disk_errno(err) == code, err
    assert disk_errno(ValueError("no space for the answer in the prompt")) is None
    assert disk_errno(OSError(errno.ENOENT, os.strerror(errno.ENOENT))) is None


@pytest.mark.parametrize(
    "flag, free, expected", [(0, 0, errno.ENOSPC), (os.ST_RDONLY, 10 << 30, errno.EROFS), (0, 10 << 30, None)]
)
def test_torch_writer_failure_is_judged_by_the_file_system(tmp_path, monkeypatch, flag, free, expected):
    """torch.save on a full disk says only "unexpected pos": the file system decides."""
    stats = os.statvfs(tmp_path)
    fake = type("Stats", (), {"f_flag": flag, "f_bavail": free // stats.f_frsize, "f_frsize": stats.f_frsize})
    monkeypatch.setattr(os, "statvfs", lambda path: fake)
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 340032 vs 339920")
    assert disk_errno(torch_error, tmp_path / "a" / "step_1") == expected

    def save(tmp):
        raise torch_error

    raised = DiskError if expected else RuntimeError
    with pytest.raises(raised):
        atomic_write(tmp_path / "state.pt", save)


def command(name: str, model: Path, data: Path, out: Path) -> list[str]:
    if name == "train":
        return [
            "train",
            "--model",
            str(model),
            "--data",
            str(data),
            "--steps",
            "3",
            "--prompts-per-step",
            "2",
            "--mini-batch-prompts",
            "2",
            "--samples-per-prompt",
            "2",
            "--think",
            "8",
            "--solve",
            "4",
            "--save-every",
            "1",
            "--out",
            str(out),
        ]
    return [name, "--model", str(model), *[a.format(data=data) for a in EVAL], "--out", str(out)]


def fail_once(monkeypatch, code: int, hit) -> dict:
    """``os.replace`` refuses with ``code`` the first time its target matches ``hit``, and only then
    (so the rerun finds the space freed)."""
    real, state = os.replace, {"failed": None}

    def replace(src, dst, *args, **kwargs):
        if state["failed"] is None and hit(Path(dst)):
            state["failed"] = Path(dst)
            raise refuse(code)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return state


def stored(name: str, out: Path) -> pd.DataFrame:
    """What a run holds: its samples (eval, sweep) or its metrics rows (train)."""
    if name == "train":
        return pd.read_parquet(out / "metrics.parquet")
    if name == "sweep":
        return pd.read_parquet(out / SAMPLES)
    return SampleStore(out).read()


@pytest.mark.slow
@pytest.mark.parametrize("name, code", [("eval", errno.ENOSPC), ("sweep", errno.EDQUOT), ("train", errno.EROFS)])
def test_a_command_stopped_by_a_full_disk_says_so_and_the_rerun_resumes(
    name, code, tiny_model_dir, problems_file, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    third = {"n": 0}

    def hit(dst: Path) -> bool:  # the third sample part, or train's second checkpoint
        if name == "train":
            return dst.name == "step_2"
        third["n"] += dst.name.startswith("part-")
        return dst.name.startswith("part-") and third["n"] == 3

    state = fail_once(monkeypatch, code, hit)
    exit_code, err = run_main(command(name, tiny_model_dir, problems_file, out), capsys)
    assert exit_code == 1 and state["failed"] is not None, err
    assert "Traceback" not in err and "please report it" not in err, err
    last = err.strip().splitlines()[-1]
    line = " ".join(err.split()[err.split().index("error:") :])
    assert last.startswith("error: cannot write ") and DISK_ERRNOS[code][0] in line, err
    assert str(state["failed"].parent) in line, err
    assert ("checkpoints up to step_1 are kept" if name == "train" else "finished samples up to here are kept") in line
    assert "rerun the same command" in line
    before = stored(name, out) if name != "sweep" else SampleStore(next((out / "models").iterdir())).read()
    assert len(before) > 0  # what finished is on disk

    again = command(name, tiny_model_dir, problems_file, out) + (["--resume"] if "--resume" in line else [])
    exit_code, err = run_main(again, capsys)
    assert exit_code == 0, err
    after = stored(name, out)
    if name == "train":  # every step once, the kept checkpoint's steps unchanged
        assert after["step"].tolist() == [1, 2, 3]
        assert after[after["step"] == 1]["reward_mean"].tolist() == before[before["step"] == 1]["reward_mean"].tolist()
        return
    problems = sum(1 for _ in problems_file.open())
    per_problem = 2 * (len(after.groupby(["mode", "think_budget", "solve_budget"])) if name == "sweep" else 1)
    keys = SAMPLE_KEY + (["model"] if "model" in after else [])
    assert len(after) == problems * per_problem and not after.duplicated(keys).any()  # nothing lost, nothing twice
    merged = before.merge(after, on=SAMPLE_KEY, suffixes=("", "_after"))
    assert len(merged) == len(before) and (merged["think_text"] == merged["think_text_after"]).all()


# a real file system that fills up: a small tmpfs (needs root and mount; skipped elsewhere)
@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Take all of ``disk``'s space but ``leave`` bytes."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


@pytest.mark.slow
def test_a_real_full_disk_stops_eval_and_train_with_one_line_and_both_resume(
    small_disk, tiny_model_dir, problems_file, capsys
):
    out = small_disk / "eval"
    filler = fill(small_disk, 40 << 10)  # config.json and a couple of parts fit
    code, err = run_main(command("eval", tiny_model_dir, problems_file, out), capsys)
    line = " ".join(err.split())
    assert code == 1 and "Traceback" not in err and "please report it" not in err, err
    assert f"cannot write {out / 'samples'}/part-" in line and "no space left on device" in line, err
    assert "finished samples up to here are kept" in line and "rerun the same command to resume" in line
    kept = SampleStore(out).read()
    filler.unlink()
    code, err = run_main(command("eval", tiny_model_dir, problems_file, out), capsys)
    assert code == 0, err
    samples = pd.read_parquet(out / SAMPLES)
    assert len(samples) == 2 * sum(1 for _ in problems_file.open()) and not samples.duplicated(SAMPLE_KEY).any()
    assert len(kept.merge(samples, on=SAMPLE_KEY)) == len(kept)
    shutil.rmtree(out)

    # a checkpoint: torch.save says only "unexpected pos" (a model folder weighs about 1.2 MB here)
    out = small_disk / "train"
    filler = fill(small_disk, 800 << 10)
    code, err = run_main(command("train", tiny_model_dir, problems_file, out), capsys)
    line = " ".join(err.split())
    assert code == 1 and "Traceback" not in err and "inline_container" not in line, err
    assert f"cannot write {out / 'checkpoints' / 'step_1'}: no space left on device" in line, err
    assert "no checkpoint is kept yet" in line and "--resume" in line
    assert [p.name for p in (out / "checkpoints").iterdir()] == []  # the half-written one is gone
    filler.unlink()
    code, err = run_main(command("train", tiny_model_dir, problems_file, out) + ["--resume"], capsys)
    assert code == 0, err
    assert pd.read_parquet(out / "metrics.parquet")["step"].tolist() == [1, 2, 3]
    assert json.loads((out / "checkpoints" / "step_3" / "config.json").read_text())


@pytest.mark.parametrize("code", ERRNOS)
def test_a_library_writing_for_itself_on_a_full_disk_is_one_line_too(code):
    """Where no e1 writer stood in between (a hub cache, a lock file), the CLI's last resort still
    names the cause and exits 1, not "unexpected error ... please report it" (2)."""
    from e1.cli.app import unexpected

    line, exit_code = unexpected(OSError(code, os.strerror(code), "/cache/hub/model.bin"))
    assert exit_code == 1 and "please report it" not in line
    assert line.startswith("cannot write /cache/hub/model.bin: ") and DISK_ERRNOS[code][0] in line
    assert "rerun the same command to resume" in line
    line, exit_code = unexpected(ValueError("a bug"))
    assert exit_code == 2 and "please report it" in line
