"""e1 eval: metrics, the results format, resume, and the command end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import DataError, ResultsError
from e1.eval.run import EvalConfig, evaluate
from e1.store.results import SAMPLE_COLUMNS
from e1.store.samples import SampleStore
from tests.fakes import Interrupting, ScriptedModel


@pytest.fixture
def boxed_engine(tiny_engine):
    """A scripted model that thinks until forced, then answers \\boxed{2}."""
    tok = tiny_engine.tokenizer
    solution = tok.encode(" The answer is \\boxed{2}.", add_special_tokens=False)
    think, solve = tok.encode("a", add_special_tokens=False)[0], tok.encode("b", add_special_tokens=False)[0]
    model = ScriptedModel(len(tok), {}, tiny_engine.markers, think, solve, solution=solution)
    return HFEngine(model, tok, tiny_engine.markers, batch_size=4)


def config(out, problems, **kw):
    base = dict(
        model="scripted",
        datasets=(str(problems),),
        budgets=(Budget(6, 40),),
        modes=(Mode("elastic"),),
        n=2,
        sampling=Sampling(temperature=0.0),
        out=out,
        batch_size=4,
    )
    return EvalConfig(**(base | kw))


def test_eval_writes_the_results_format_with_rewards(tmp_path, problems_file, boxed_engine):
    out = tmp_path / "run"
    samples, summary = evaluate(config(out, problems_file), engine=boxed_engine)
    written = pd.read_parquet(out / "samples.parquet")
    assert list(written.columns) == SAMPLE_COLUMNS
    assert len(written) == 5 * 2
    assert set(written["extracted_answer"]) == {"2"}
    # gold is "2" for odd ids: exactly those are correct
    assert written.groupby("problem_id")["correct"].all().to_dict() == {f"q{i}": bool(i % 2) for i in range(5)}
    assert written["forced"].all() and (written["think_tokens"] == 6).all()
    assert (written["finish_reason"] == "stop").all()
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary.iloc[0].accuracy == pytest.approx(0.4)  # 2 of 5 problems, both samples each
    saved = json.loads((out / "config.json").read_text())
    assert saved["n"] == 2 and saved["sampling"]["seed"] == 0 and "e1_version" in saved


def test_resume_after_a_kill_equals_an_uninterrupted_run(tmp_path, problems_file, tiny_engine):
    sampling = Sampling(temperature=1.0, top_p=0.9, seed=5)
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    engine = HFEngine(tiny_engine.model, tiny_engine.tokenizer, tiny_engine.markers, batch_size=4)
    full, _ = evaluate(config(full_dir, problems_file, sampling=sampling, budgets=(Budget(5, 5),)), engine=engine)
    with pytest.raises(KeyboardInterrupt):
        evaluate(
            config(cut_dir, problems_file, sampling=sampling, budgets=(Budget(5, 5),)),
            engine=Interrupting(engine, fail_on=2),
        )
    partial = SampleStore(cut_dir).read()  # the parts written before the kill
    assert len(partial) == 4  # the first batch (2 problems × 2 samples) survived, nothing half-written
    counter = Interrupting(engine, fail_on=-1)
    resumed, _ = evaluate(config(cut_dir, problems_file, sampling=sampling, budgets=(Budget(5, 5),)), engine=counter)
    assert counter.calls == 2  # only the 3 missing problems were generated (in 2 batches)
    pd.testing.assert_frame_equal(resumed, full)
    # a rerun of a finished run generates nothing and duplicates nothing
    done = Interrupting(engine, fail_on=1)
    again, _ = evaluate(config(cut_dir, problems_file, sampling=sampling, budgets=(Budget(5, 5),)), engine=done)
    assert done.calls == 0 and len(pd.read_parquet(cut_dir / "samples.parquet")) == 10


def test_run_dir_of_another_model_is_refused(tmp_path, problems_file, boxed_engine):
    out = tmp_path / "run"
    evaluate(config(out, problems_file), engine=boxed_engine)
    with pytest.raises(ResultsError, match="different model"):
        evaluate(config(out, problems_file, model="other"), engine=boxed_engine)


def test_a_new_budget_in_the_same_dir_is_refused_and_the_run_kept_whole(tmp_path, problems_file, boxed_engine):
    out = tmp_path / "run"
    evaluate(config(out, problems_file), engine=boxed_engine)
    with pytest.raises(ResultsError, match="holds a run of budgets t=6 s=40, not t=0 s=40") as refused:
        evaluate(config(out, problems_file, budgets=(Budget(0, 40),)), engine=boxed_engine)
    assert "leave out --out" in refused.value.hint
    assert set(pd.read_parquet(out / "samples.parquet")["think_budget"]) == {6}  # summary, config and samples agree
    assert set(pd.read_parquet(out / "summary.parquet")["think_budget"]) == {6}


def test_another_dataset_in_the_same_dir_is_refused_and_the_same_one_resumes(
    tmp_path, problems_file, boxed_engine, monkeypatch
):
    out = tmp_path / "run"
    evaluate(config(out, problems_file), engine=boxed_engine)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "o0", "problem": "What is 5 + 5?", "answer": "10"}) + "\n")
    with pytest.raises(ResultsError) as refused:
        evaluate(config(out, other), engine=boxed_engine)
    assert refused.value.message == f"{out} holds a run of datasets toy, not other"
    assert "leave out --out" in refused.value.hint and "same datasets resumes it" in refused.value.hint
    with pytest.raises(ResultsError) as refused:  # one more is another grid too
        evaluate(config(out, problems_file, datasets=(str(problems_file), str(other))), engine=boxed_engine)
    assert refused.value.message.endswith("holds a run of datasets toy, not other, toy")
    monkeypatch.chdir(problems_file.parent)  # the same file typed another way is the same dataset: it resumes
    counting = Interrupting(boxed_engine, fail_on=10**6)
    samples, summary = evaluate(config(out, problems_file, datasets=("./toy.jsonl",)), engine=counting)
    assert counting.calls == 0 and set(samples["dataset"]) == set(summary["dataset"]) == {"toy"}
    assert set(pd.read_parquet(out / "samples.parquet")["dataset"]) == {"toy"}  # nothing of the other mixed in


def prepared(path: Path, name: str) -> Path:
    """A prepared (canonical) parquet at ``path`` whose rows say dataset ``name``: its name is read
    from inside the file, not from the file's name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "id": ["a1", "a2"],
            "dataset": name,
            "problem": ["What is 1 + 1?", "What is 2 + 0?"],
            "answer": "2",
            "task": "math",
            "task_version": 1,
        }
    ).to_parquet(path)
    return path


def without_fingerprints(out: Path) -> None:
    """``out``'s config.json as a run written before dataset fingerprints were recorded."""
    record = json.loads((out / "config.json").read_text())
    record.pop("dataset_fingerprints")
    (out / "config.json").write_text(json.dumps(record))


@pytest.mark.parametrize("old_record", [False, True], ids=["fingerprinted", "before-fingerprints"])
def test_a_run_resumes_from_another_directory_and_another_dataset_is_still_refused(
    tmp_path, boxed_engine, monkeypatch, old_record
):
    """The names a run folder holds are what its run recorded, not its old relative paths read from
    today's directory: a prepared file of dataset ``aime`` run as ``data/aime_2024.parquet`` from one
    directory resumes from another by its absolute path (from a relative path that now names nothing,
    the folder would have seemed to hold ``aime_2024``), and a file of another dataset typed with the
    very same relative path is refused."""
    first, second, out = tmp_path / "a", tmp_path / "b", tmp_path / "run"
    data = prepared(first / "data" / "aime_2024.parquet", "aime")
    second.mkdir()
    monkeypatch.chdir(first)
    evaluate(config(out, "data/aime_2024.parquet", n=1), engine=boxed_engine)
    if old_record:
        without_fingerprints(out)
    monkeypatch.chdir(second)
    counting = Interrupting(boxed_engine, fail_on=10**6)
    samples, summary = evaluate(config(out, data, n=1), engine=counting)
    assert counting.calls == 0 and set(samples["dataset"]) == set(summary["dataset"]) == {"aime"}
    if old_record:
        without_fingerprints(out)  # the resume recorded them: an old run again
    prepared(second / "data" / "aime_2024.parquet", "other")  # the old spelling, from here: another dataset
    with pytest.raises(ResultsError) as refused:
        evaluate(config(out, "data/aime_2024.parquet", n=1), engine=counting)
    assert refused.value.message == f"{out} holds a run of datasets aime, not other" and counting.calls == 0
    assert set(pd.read_parquet(out / "samples.parquet")["dataset"]) == {"aime"}


def test_an_unreadable_dataset_file_is_one_line_naming_it(tmp_path, boxed_engine, monkeypatch):
    """A damaged prepared parquet, whether a new run loads it or a resume reads its names, is one
    DataError line naming the file (pyarrow's own error runs over several lines)."""
    monkeypatch.chdir(tmp_path)
    out, data = tmp_path / "run", prepared(tmp_path / "aime_2024.parquet", "aime")
    evaluate(config(out, data, n=1), engine=boxed_engine)
    damaged = tmp_path / "damaged.parquet"
    raw = bytearray(data.read_bytes())
    raw[4:200] = b"\xff" * 196  # the first column pages: the footer, and so the schema, still read
    damaged.write_bytes(bytes(raw))
    for run in (out, tmp_path / "new"):  # the grid check of a resume reads its names; a new run loads it
        with pytest.raises(DataError) as unreadable:
            evaluate(config(run, damaged, n=1), engine=boxed_engine)
        message = unreadable.value.message
        assert message.startswith(f"{damaged}: not a readable parquet file (") and "\n" not in message, message
        assert message.isprintable()


SPELLINGS = ("absolute", "relative", "dotted", "home", "detour", "linked-folder", "linked-file")


def spelled(path: Path, how: str, root: Path) -> str:
    """``path`` as a user might type it from the current directory: ``root`` is $HOME, and holds
    ``linked`` (a symlink to ``path``'s folder) and ``link-<folder>/<name>`` (one to ``path`` itself)."""
    relative = os.path.relpath(path)
    return {
        "absolute": str(path),
        "relative": relative,
        "dotted": os.path.join(".", relative),
        "home": f"~/{path.relative_to(root)}",
        "detour": os.path.join(os.path.relpath(path.parent), "..", path.parent.name, path.name),
        "linked-folder": os.path.relpath(root / "linked" / path.name),
        "linked-file": str(root / f"link-{path.parent.name}" / path.name),
    }[how]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(kind="prepared", other=False, old_record=False, typed=("relative", "absolute"), cwds=("a", "b"))  # the report
@given(
    kind=st.sampled_from(["prepared", "jsonl"]),
    other=st.booleans(),
    old_record=st.booleans(),
    typed=st.tuples(st.sampled_from(SPELLINGS), st.sampled_from(SPELLINGS)),
    cwds=st.tuples(st.sampled_from(["root", "a", "data", "b"]), st.sampled_from(["root", "a", "data", "b"])),
)
def test_the_same_file_however_typed_and_from_wherever_resumes(
    tmp_path_factory, boxed_engine, monkeypatch, kind, other, old_record, typed, cwds
):
    """A run of a file resumed with the same file, spelled any way from any directory (relative,
    absolute, ``./``, ``~``, through ``..``, a symlinked folder, a symlink to the file; a config.json
    with or without fingerprints), resumes and generates nothing; a file of another dataset, spelled
    the same way, is refused and the folder keeps only its own samples."""
    root = tmp_path_factory.mktemp("home")
    folders = {"root": root, "a": root / "a", "data": root / "a" / "data", "b": root / "b"}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(root))
    if kind == "prepared":
        data, elsewhere = prepared(folders["data"] / "aime_2024.parquet", "aime"), root / "b" / "aime_2025.parquet"
        prepared(elsewhere, "other")
    else:
        data, elsewhere = folders["data"] / "toy.jsonl", root / "b" / "toy-2.jsonl"
        for path, answer in ((data, "2"), (elsewhere, "3")):
            path.write_text(json.dumps({"id": "q0", "problem": "What is 1 + 1?", "answer": answer}) + "\n")
    (root / "linked").symlink_to(folders["data"])  # the file's folder under another name
    for path in (data, elsewhere):  # the file itself, under the same name (a file's stem is its name)
        (root / f"link-{path.parent.name}").mkdir()
        (root / f"link-{path.parent.name}" / path.name).symlink_to(path)
    out = root / "run"
    monkeypatch.chdir(folders[cwds[0]])
    evaluate(config(out, spelled(data, typed[0], root), n=1), engine=boxed_engine)
    if old_record:
        without_fingerprints(out)
    monkeypatch.chdir(folders[cwds[1]])
    target = elsewhere if other else data
    how = "absolute" if other and typed[1] == "linked-folder" else typed[1]  # the link is to the first's folder
    counting = Interrupting(boxed_engine, fail_on=10**6)
    if other:
        with pytest.raises(ResultsError, match="holds a run of datasets"):
            evaluate(config(out, spelled(target, how, root), n=1), engine=counting)
    else:
        samples, _ = evaluate(config(out, spelled(target, how, root), n=1), engine=counting)
        assert set(samples["dataset"]) == ({"aime"} if kind == "prepared" else {"toy"})
    assert counting.calls == 0
    assert set(pd.read_parquet(out / "samples.parquet")["dataset"]) == ({"aime"} if kind == "prepared" else {"toy"})


def test_registry_name_uses_the_prepared_parquet(tmp_path, boxed_engine, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    frame = pd.DataFrame(
        {
            "id": ["a1", "a2"],
            "dataset": ["aime", "aime"],
            "problem": ["p1", "p2"],
            "answer": ["2", "5"],
            "task": ["math", "math"],
            "task_version": [1, 1],
        }
    )
    from e1.data import get_benchmark

    frame["task_version"] = get_benchmark("aime").task_version
    frame.to_parquet(data_dir / "aime.parquet")
    samples, _ = evaluate(
        config(tmp_path / "run", "unused", datasets=("aime",), data_dir=data_dir, n=1), engine=boxed_engine
    )
    assert list(samples["problem_id"]) == ["a1", "a2"] and list(samples["correct"]) == [True, False]


def test_eval_command_end_to_end(tmp_path, problems_file, tiny_model_dir):
    out = tmp_path / "cli-run"
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--datasets",
            str(problems_file),
            "--think",
            "8",
            "--solve",
            "8",
            "--n",
            "2",
            "--limit",
            "3",
            "--out",
            str(out),
        ],
        prog_name="e1",
    )
    assert result.exit_code == 0, result.output
    assert "avg@n" in result.output and str(out.name) in result.output
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == 6 and (samples["think_tokens"] <= 8).all() and (samples["solve_tokens"] <= 8).all()
