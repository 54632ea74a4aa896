"""A run directory knows what it holds: which datasets (by name and by content), which models, which
kind of run; and a run whose directory vanished stops instead of writing a new, partial one.

Each class of input is generated (hypothesis, or every pair of a parametrized matrix), not only
the cases first reported.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import ConfigError, DataError, ResultsError
from e1.eval.run import EvalConfig, evaluate
from e1.eval.sweep import SweepConfig, sweep
from e1.store.samples import SampleStore
from tests.fakes import ScriptedModel
from tests.test_bad_inputs import run_main

# each example runs e1 end to end (a second or so): a dozen per class, no shrinking (a failure is reported
# as generated, in seconds), and no example database written into the repository
GENERATED = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def boxed(tiny_engine, answer: str = "2", batch_size: int = 8) -> HFEngine:
    """A scripted engine that thinks until forced, then answers \\boxed{answer}."""
    tok = tiny_engine.tokenizer
    solution = tok.encode(f" The answer is \\boxed{{{answer}}}.", add_special_tokens=False)
    think, solve = tok.encode("a", add_special_tokens=False)[0], tok.encode("b", add_special_tokens=False)[0]
    model = ScriptedModel(len(tok), {}, tiny_engine.markers, think, solve, solution=solution)
    return HFEngine(model, tok, tiny_engine.markers, batch_size=batch_size)


def problems(variant: int = 0, count: int = 3) -> list[dict]:
    return [{"id": f"q{i}", "problem": f"What is {i} + {variant}?", "answer": str(i + variant)} for i in range(count)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def older(record: dict) -> dict:
    """A config.json as e1 0.2 wrote it: no kind, no dataset fingerprints."""
    return {key: value for key, value in record.items() if key not in ("kind", "dataset_fingerprints")}


def eval_config(out: Path, *datasets, **kw) -> EvalConfig:
    base = dict(
        model="scripted",
        datasets=tuple(str(d) for d in datasets),
        budgets=(Budget(2, 40),),
        modes=(Mode("elastic"),),
        n=1,
        sampling=Sampling(temperature=0.0),
        out=out,
        batch_size=8,
    )
    return EvalConfig(**(base | kw))


def files_of(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` with its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


# ---- 1. a dataset's name is its identity in the results: two datasets under one name are refused ----

# (folder, file stem, content variant, spelled with a "/./"): a file's content is the first variant drawn for it
DATASET_FILES = st.lists(
    st.tuples(st.sampled_from("abc"), st.sampled_from(["probs", "other"]), st.integers(0, 1), st.booleans()),
    min_size=1,
    max_size=4,
)


@GENERATED
@given(files=DATASET_FILES)
def test_datasets_under_one_name_are_one_dataset_or_refused_naming_both(tmp_path_factory, tiny_engine, files):
    root = tmp_path_factory.mktemp("datasets")
    content, specs = {}, []
    for folder, stem, variant, dotted in files:
        variant = content.setdefault((folder, stem), variant)
        path = write_jsonl(root / folder / f"{stem}.jsonl", problems(variant))
        specs.append(f"{root}/./{folder}/{stem}.jsonl" if dotted else str(path))
    first, clash = {}, None  # the first spec of each name; the first pair of specs naming two datasets alike
    for spec in dict.fromkeys(specs):
        stem, variant = Path(spec).stem, content[(Path(spec).parent.name, Path(spec).stem)]
        if stem in first and first[stem][1] != variant and clash is None:
            clash = (first[stem][0], spec)
        first.setdefault(stem, (spec, variant))
    out = root / "run"
    if clash:
        with pytest.raises(DataError) as refused:
            evaluate(eval_config(out, *specs), engine=boxed(tiny_engine))
        assert clash[0] in str(refused.value) and clash[1] in str(refused.value) and "--name" in str(refused.value)
        assert not out.exists()
    else:
        samples, summary = evaluate(eval_config(out, *specs), engine=boxed(tiny_engine))
        assert sorted(summary["dataset"]) == sorted(first) and (summary["problems"] == 3).all()
        assert len(samples) == 3 * len(first)


def test_two_files_with_one_stem_are_one_red_line_naming_both(tmp_path, tiny_model_dir, capsys):
    a = write_jsonl(tmp_path / "a" / "probs.jsonl", problems(0))
    b = write_jsonl(tmp_path / "b" / "probs.jsonl", problems(1))
    out = tmp_path / "out"
    code, err = run_main(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--datasets",
            f"{a},{b}",
            "--n",
            "1",
            "--think",
            "4",
            "--solve",
            "4",
            "--out",
            str(out),
        ],
        capsys,
    )
    last = err.strip().splitlines()[-1]
    assert code == 1 and last.startswith("error: ") and "Traceback" not in err, err
    assert str(a) in last and str(b) in last and f"--from {b} --name probs-2" in " ".join(err.split())
    assert not out.exists()


# ---- 2. a run directory records a fingerprint of each dataset's problems: changed problems are refused ----

EDITS = ["none", "reorder", "answer", "problem", "add", "drop", "id"]


def edited(rows: list[dict], edit: str, at: int) -> list[dict]:
    rows = [dict(row) for row in rows]
    at %= len(rows)
    if edit == "reorder":  # the same problems (ids kept) in another order
        return rows[::-1]
    if edit in ("answer", "problem", "id"):
        rows[at][edit] = rows[at][edit] + "0"
    elif edit == "add":
        rows.append({"id": "new", "problem": "What is 9 + 9?", "answer": "18"})
    elif edit == "drop":
        rows.pop(at)
    return rows


@GENERATED
@given(edit=st.sampled_from(EDITS), count=st.integers(2, 5), at=st.integers(0, 4), limit=st.sampled_from([None, 1]))
def test_problems_changed_between_two_runs_into_one_out_are_refused(
    tmp_path_factory, tiny_engine, edit, count, at, limit
):
    root = tmp_path_factory.mktemp("edited")
    rows = problems(0, count)
    data, out = write_jsonl(root / "probs.jsonl", rows), root / "run"
    evaluate(eval_config(out, data, limit=limit), engine=boxed(tiny_engine))
    before = files_of(out)
    write_jsonl(data, edited(rows, edit, at))
    if edit in ("none", "reorder"):
        samples, _ = evaluate(eval_config(out, data, limit=limit), engine=boxed(tiny_engine))
        answers = {row["id"]: row["answer"] for row in rows}
        assert all(answers[pid] == gold for pid, gold in zip(samples["problem_id"], samples["gold"]))
        return
    with pytest.raises(ResultsError, match="other problems of dataset 'probs'") as refused:
        evaluate(eval_config(out, data, limit=limit), engine=boxed(tiny_engine))
    assert "another --out" in refused.value.hint
    assert files_of(out) == before  # the old rows stay as they were, alone


def test_a_benchmark_prepared_again_with_other_problems_is_refused(tmp_path, tiny_engine):
    from e1.data import get_benchmark

    data_dir = tmp_path / "data"
    data_dir.mkdir()

    def prepare(answers):
        pd.DataFrame(
            {
                "id": ["a1", "a2"],
                "dataset": "aime",
                "problem": ["p1", "p2"],
                "answer": answers,
                "task": "math",
                "task_version": get_benchmark("aime").task_version,
            }
        ).to_parquet(data_dir / "aime.parquet")

    prepare(["2", "5"])
    config = eval_config(tmp_path / "run", "aime", data_dir=data_dir)
    evaluate(config, engine=boxed(tiny_engine))
    prepare(["2", "6"])
    with pytest.raises(ResultsError, match="other problems of dataset 'aime'"):
        evaluate(config, engine=boxed(tiny_engine))


def test_old_directories_gain_the_fingerprints_of_every_dataset(tmp_path, tiny_engine):
    first, second, out = write_jsonl(tmp_path / "first.jsonl", problems(0)), tmp_path / "second.jsonl", tmp_path / "run"
    write_jsonl(second, problems(1))
    evaluate(eval_config(out, first, second), engine=boxed(tiny_engine))
    record = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(older(record)))
    evaluate(eval_config(out, second, first), engine=boxed(tiny_engine))  # nothing to generate: the record gains them
    assert json.loads((out / "config.json").read_text())["dataset_fingerprints"] == record["dataset_fingerprints"]
    with pytest.raises(ResultsError, match="holds a run of datasets first, second, not second"):  # one grid per folder
        evaluate(eval_config(out, second), engine=boxed(tiny_engine))
    write_jsonl(first, problems(2))
    with pytest.raises(ResultsError, match="other problems of dataset 'first'"):
        evaluate(eval_config(out, first, second), engine=boxed(tiny_engine))


def test_a_training_run_resumed_on_changed_problems_is_refused(tiny_model_dir, tmp_path):
    from e1.grpo.config import TrainConfig
    from e1.grpo.trainer import train

    data, out = write_jsonl(tmp_path / "p.jsonl", problems(0, 4)), tmp_path / "run"
    config = TrainConfig(
        model=str(tiny_model_dir),
        data=str(data),
        out=out,
        think=4,
        solve=4,
        steps=1,
        prompts_per_step=2,
        samples_per_prompt=2,
        mini_batch_prompts=2,
        micro_batch=4,
        temperature=1.0,
        save_every=1,
        lr=1e-2,
    )
    train(config, reward=lambda completions, answers, **_: [1.0, 0.0] * (len(completions) // 2))
    write_jsonl(data, edited(problems(0, 4), "answer", 1))
    before = files_of(out)
    with pytest.raises(ResultsError, match="other problems of dataset 'p'"):
        train(replace(config, steps=2, resume=True))
    assert files_of(out) == before


# ---- 3. a run whose directory vanished stops at its next write ----


class Vanishing:
    """Wraps an engine; on its k-th generate call the run directory is removed, replaced or moved away."""

    def __init__(self, engine, out: Path, at_call: int, action: str):
        self.engine, self.out, self.at_call, self.action, self.calls = engine, out, at_call, action, 0
        self.tokenizer, self.markers = engine.tokenizer, engine.markers

    def generate(self, *args, **kw):
        self.calls += 1
        if self.calls == self.at_call:
            if self.action == "move":
                self.out.rename(self.out.with_name("moved"))
            else:
                shutil.rmtree(self.out)
                if self.action == "replace":
                    self.out.mkdir()
        return self.engine.generate(*args, **kw)


@GENERATED
@given(
    count=st.integers(2, 6),
    per_call=st.integers(1, 3),
    at_call=st.integers(1, 6),
    action=st.sampled_from(["remove", "replace", "move"]),
)
def test_a_run_whose_directory_vanished_stops_with_an_error(
    tmp_path_factory, tiny_engine, count, per_call, at_call, action
):
    root = tmp_path_factory.mktemp("vanish")
    data, out = write_jsonl(root / "probs.jsonl", problems(0, count)), root / "run"
    calls = -(-count // per_call)
    engine = Vanishing(boxed(tiny_engine, batch_size=per_call), out, min(at_call, calls), action)
    with pytest.raises(ResultsError, match="replaced" if action == "replace" else "is gone"):
        evaluate(eval_config(out, data, batch_size=per_call), engine=engine)
    if action == "remove":
        assert not out.exists()  # not made again by the writer
    elif action == "replace":
        assert not out.exists() or list(out.iterdir()) == []  # nothing written into the new one
    else:
        assert not out.exists() and not (root / "moved" / "summary.parquet").exists()
        assert len(SampleStore(root / "moved").read()) < count  # what was written before stays there


def test_eval_whose_directory_vanished_is_one_red_line(tmp_path, tiny_model_dir, tiny_engine, capsys, monkeypatch):
    import e1.eval.run as run

    data, out = write_jsonl(tmp_path / "probs.jsonl", problems(0, 6)), tmp_path / "out"
    monkeypatch.setattr(
        run, "load_engine_for", lambda config, ranks=None: Vanishing(boxed(tiny_engine, batch_size=2), out, 2, "remove")
    )
    code, err = run_main(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--datasets",
            str(data),
            "--n",
            "1",
            "--think",
            "4",
            "--solve",
            "40",
            "--batch-size",
            "2",
            "--out",
            str(out),
        ],
        capsys,
    )
    last = err.strip().splitlines()[-1]
    assert code == 1 and last.startswith("error: ") and "is gone" in last and "Traceback" not in err, err
    assert not out.exists()


def test_a_training_run_whose_directory_vanished_stops(tiny_model_dir, tmp_path):
    from e1.grpo.config import TrainConfig
    from e1.grpo.trainer import train

    data, out = write_jsonl(tmp_path / "p.jsonl", problems(0, 4)), tmp_path / "run"

    def reward(completions, answers, **_):
        shutil.rmtree(out, ignore_errors=True)  # during step 1, before its metrics and checkpoint
        return [1.0, 0.0] * (len(completions) // 2)

    with pytest.raises(ResultsError, match="is gone"):
        train(
            TrainConfig(
                model=str(tiny_model_dir),
                data=str(data),
                out=out,
                think=4,
                solve=4,
                steps=2,
                prompts_per_step=2,
                samples_per_prompt=2,
                mini_batch_prompts=2,
                micro_batch=4,
                temperature=1.0,
                save_every=1,
                lr=1e-2,
            ),
            reward=reward,
        )
    assert not out.exists()


# ---- 4. a run directory holds one kind of run: every command refuses another kind, naming it ----


def make_eval(root: Path, tiny_engine, old: bool) -> Path:
    out = root / "held"
    evaluate(eval_config(out, write_jsonl(root / "probs.jsonl", problems(0))), engine=boxed(tiny_engine))
    return strip_kind(out) if old else out


def make_sweep(root: Path, tiny_engine, old: bool) -> Path:
    out = root / "held"
    settings_ = eval_config(out, write_jsonl(root / "probs.jsonl", problems(0)))
    sweep(SweepConfig(models=("m/A",), settings=settings_, out=out), load_engine=lambda model: boxed(tiny_engine))
    return strip_kind(out) if old else out


def make_train(root: Path, tiny_engine, old: bool) -> Path:
    from e1.grpo.config import TrainConfig

    out = root / "held"
    (out / "checkpoints").mkdir(parents=True)
    pd.DataFrame({"step": [1], "loss": [0.5]}).to_parquet(out / "metrics.parquet")
    record = TrainConfig(model="scripted", data=str(root / "probs.jsonl"), out=out).to_json()
    (out / "config.json").write_text(json.dumps(record if old else {**record, "kind": "train"}))
    return out


def make_demo(root: Path, tiny_engine, old: bool) -> Path:
    out = root / "held"
    for folder in ("data", "models/init", "sft", "eval/base-none", "curves"):
        (out / folder).mkdir(parents=True)
    if not old:  # e1 0.2 wrote no config.json at the top of a demo
        (out / "config.json").write_text(json.dumps({"kind": "demo", "seed": 0}))
    return out


def strip_kind(out: Path) -> Path:
    (out / "config.json").write_text(json.dumps(older(json.loads((out / "config.json").read_text()))))
    return out


def run_eval(out: Path, root: Path, tiny_engine):
    evaluate(eval_config(out, write_jsonl(root / "probs.jsonl", problems(0))), engine=boxed(tiny_engine))


def run_sweep(out: Path, root: Path, tiny_engine):
    settings_ = eval_config(out, write_jsonl(root / "probs.jsonl", problems(0)))
    sweep(SweepConfig(models=("m/A",), settings=settings_, out=out), load_engine=lambda model: boxed(tiny_engine))


def run_train(out: Path, root: Path, tiny_engine, resume: bool = False):
    from e1.grpo.config import TrainConfig
    from e1.grpo.trainer import train

    train(
        TrainConfig(model="scripted", data=str(write_jsonl(root / "probs.jsonl", problems(0))), out=out, resume=resume)
    )


def run_demo(out: Path, root: Path, tiny_engine):
    from e1.demo.pipeline import TINY, DemoConfig
    from e1.demo.pipeline import run_demo as demo

    demo(DemoConfig(out=out, scale=TINY))


MAKERS = {"eval": make_eval, "sweep": make_sweep, "train": make_train, "demo": make_demo}
COMMANDS = {
    "eval": run_eval,
    "sweep": run_sweep,
    "train": run_train,
    "train --resume": lambda out, root, engine: run_train(out, root, engine, resume=True),
    "demo": run_demo,
}
HELD = {"eval": "holds an eval run", "sweep": "holds a sweep", "train": "holds a training run", "demo": "holds a demo"}
PAIRS = [
    (held, old, command)
    for held in MAKERS
    for old in (False, True)
    for command in COMMANDS
    if command.split()[0] != held
]


@pytest.mark.parametrize(
    "held, old, command", PAIRS, ids=[f"{command}-into-{'old-' if old else ''}{held}" for held, old, command in PAIRS]
)
def test_every_command_refuses_a_run_directory_of_another_kind_naming_it(tmp_path, tiny_engine, held, old, command):
    out = MAKERS[held](tmp_path, tiny_engine, old)
    before = files_of(out)
    with pytest.raises(ResultsError) as refused:
        COMMANDS[command](out, tmp_path, tiny_engine)
    assert HELD[held] in str(refused.value) and "another --out" in str(refused.value), refused.value
    assert files_of(out) == before


@pytest.mark.parametrize("kind", ["eval", "sweep"])
def test_a_run_of_the_same_kind_written_before_kinds_resumes_and_records_its_kind(tmp_path, tiny_engine, kind):
    out = MAKERS[kind](tmp_path, tiny_engine, old=True)
    COMMANDS[kind](out, tmp_path, tiny_engine)
    assert json.loads((out / "config.json").read_text())["kind"] == kind


# ---- 5. a model is what it is, however spelled: one model given twice to a sweep is refused ----

SPELLINGS = {
    "as is": lambda path: str(path),
    "slash": lambda path: f"{path}/",
    "two slashes": lambda path: f"{path}//",
    "dot": lambda path: f"{path.parent}/./{path.name}",
    "relative": lambda path: os.path.relpath(path),
    "link": lambda path: link_to(path),
}


def link_to(path: Path) -> str:
    link = path.with_name(path.name + "-link")
    if not link.exists():
        link.symlink_to(path)
    return str(link)


@GENERATED
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(["T", "T-copy", "U"]), st.sampled_from(sorted(SPELLINGS))), min_size=1, max_size=4
    )
)
def test_one_model_given_twice_however_spelled_is_refused(tmp_path_factory, picks):
    root = tmp_path_factory.mktemp("models")
    for name, weights in (("T", b"t" * 4096), ("U", b"u" * 4096)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({"name": "tiny"}))
        (root / name / "model.safetensors").write_bytes(weights)
    shutil.copytree(root / "T", root / "T-copy")  # byte for byte the same model
    models = tuple(SPELLINGS[spelling](root / name) for name, spelling in picks)
    identities = [name.removesuffix("-copy") for name, _ in picks]
    grid = eval_config(Path("unused"), "aime")
    if len(set(identities)) < len(identities):
        with pytest.raises(ConfigError, match="the same --model is given twice"):
            SweepConfig(models=models, settings=grid, out=root / "sweep")
    else:
        assert SweepConfig(models=models, settings=grid, out=root / "sweep").models == models


def test_sweep_of_one_model_spelled_twice_is_one_red_line(tmp_path, tiny_model_dir, capsys):
    data, out = write_jsonl(tmp_path / "probs.jsonl", problems(0)), tmp_path / "out"
    code, err = run_main(
        [
            "sweep",
            "--model",
            str(tiny_model_dir),
            "--model",
            f"{tiny_model_dir}/",
            "--datasets",
            str(data),
            "--n",
            "1",
            "--think",
            "4",
            "--solve",
            "4",
            "--out",
            str(out),
        ],
        capsys,
    )
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "are one model" in lines[0], err
    assert not out.exists()
