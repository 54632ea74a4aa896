"""--report-to for e1 eval and e1 sweep: what TensorBoard and W&B hold is read back with their own readers
(TensorBoard's EventAccumulator; an offline W&B run's summary and table files) and compared with
summary.parquet, cell by cell."""

from __future__ import annotations

import json
import math
import time

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.errors import ConfigError
from e1.eval.run import EvalConfig, evaluate
from e1.report.reporting import CELL_KEY, REPORT_TO, markdown_table, parse_report_to
from tests.wandb_records import wandb_records

NAMES = st.sampled_from(["tensorboard", "wandb", "none", " tensorboard ", ""])


@given(st.lists(NAMES, max_size=5))
def test_report_to_parses_any_list_of_known_names(items):
    expected = tuple(dict.fromkeys(i.strip() for i in items if i.strip() not in ("", "none")))
    assert parse_report_to(",".join(items)) == expected


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12))
def test_report_to_refuses_any_unknown_name_with_a_suggestion(name):
    if name in (*REPORT_TO, "none"):
        return
    with pytest.raises(ConfigError, match=f"unknown report_to '{name}'") as err:
        parse_report_to(f"tensorboard,{name}")
    assert any(known in err.value.hint for known in (*REPORT_TO, "none"))  # the closest name, or the list


@given(st.lists(st.tuples(st.text(max_size=30), st.floats(allow_nan=True), st.none()), max_size=6))
def test_markdown_table_keeps_one_line_and_one_cell_per_value(rows):
    frame = pd.DataFrame(rows, columns=["text", "number", "missing"])
    lines = markdown_table(frame).split("\n")
    assert len(lines) == 2 + len(frame)  # header, rule, one line per row: newlines in texts never split a row
    for line in lines[2:]:
        assert line.replace("\\|", "").count("|") == 4  # pipes in texts are escaped: 3 cells


def _eval(tiny_engine, problems_file, out, report_to):
    config = EvalConfig(
        model="tiny",
        datasets=(str(problems_file),),
        budgets=(Budget(4, 8), Budget(8, 8)),
        modes=(Mode("elastic"), Mode("truncate")),
        n=2,
        sampling=Sampling(temperature=0.0),
        out=out,
        report_to=report_to,
    )
    return evaluate(config, engine=tiny_engine)


def _numbers(row: dict) -> dict:
    return {
        k: float(v)
        for k, v in row.items()
        if k not in CELL_KEY and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    }


def _scalars(folder) -> dict[tuple[str, int], list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    found: dict = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            found.setdefault((tag, event.step), []).append(event.value)
    return found, events


def test_eval_reports_every_cell_to_tensorboard_once(tiny_engine, problems_file, tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (e1[tensorboard])")
    out = tmp_path / "run"
    _, summary = _eval(tiny_engine, problems_file, out, "tensorboard")
    _eval(tiny_engine, problems_file, out, "tensorboard")  # a rerun replaces the report, never doubles it
    found, events = _scalars(out / "tensorboard")
    expected = {}
    for row in summary.to_dict(orient="records"):
        cell = f"eval/{row['dataset']}/{row['mode']}/s={row['solve_budget']}"
        expected |= {(f"{cell}/{name}", row["think_budget"]): value for name, value in _numbers(row).items()}
    assert set(found) == set(expected)  # every finite number of every cell, and nothing else
    for key, value in expected.items():
        assert found[key] == pytest.approx([value], rel=1e-6), key  # once
    texts = events.Tags()["tensors"]
    assert {"eval/summary/text_summary", "eval/samples/text_summary"} <= set(texts)
    table = events.Tensors("eval/samples/text_summary")[0].tensor_proto.string_val[0].decode()
    assert len(table.split("\n")) == 2 + len(summary) * 5  # one row per problem and cell (5 problems: sample 0)


def _wandb_run(out):
    """The run summary (as its offline file records it) and the tables of an offline W&B run."""
    (run,) = (out / "wandb").glob("offline-run-*")
    summary: dict = {}
    for _ in range(120):  # wandb's service process may still be writing after finish() returns
        summary = {}
        for record in wandb_records(next(run.glob("run-*.wandb"))):
            if record.WhichOneof("record_type") == "summary":
                summary |= {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.summary.update
                }
        if summary:
            break
        time.sleep(0.5)
    tables = {
        path.name.split("_")[0]: json.loads(path.read_text())
        for path in (run / "files" / "media" / "table").rglob("*.table.json")
    }
    return summary, tables


def test_sweep_reports_every_model_and_cell_to_wandb(tiny_engine, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install wandb (e1[wandb])")
    from e1.eval.sweep import display_names, sweep
    from tests.test_sweep import Loader, sweep_config

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    problems = tmp_path / "toy.jsonl"
    problems.write_text(
        "".join(json.dumps({"id": f"q{i}", "problem": f"What is {i}?", "answer": "2"}) + "\n" for i in range(3))
    )
    out = tmp_path / "sweep"
    _, summary, _ = sweep(sweep_config(out, problems, report_to="wandb"), load_engine=Loader(tiny_engine))
    logged, tables = _wandb_run(out)
    names = display_names(["m/A", "m/B"])  # the labels of the sweep's tables and plots: A, B
    for row in summary.to_dict(orient="records"):
        cell = (
            f"eval/{names[row['model']]}/{row['dataset']}/{row['mode']}/s={row['solve_budget']}/t={row['think_budget']}"
        )
        for name, value in _numbers(row).items():
            assert logged[f"{cell}/{name}"] == pytest.approx(value, rel=1e-9), (cell, name)
    table = pd.DataFrame(tables["summary"]["data"], columns=tables["summary"]["columns"])
    assert len(table) == len(summary) and table["accuracy"].tolist() == pytest.approx(summary["accuracy"].tolist())
    assert sorted(set(table["model"])) == ["A", "B"]
    samples = pd.DataFrame(tables["samples"]["data"], columns=tables["samples"]["columns"])
    assert set(samples["sample_index"]) == {0} and len(samples) == len(summary) * 3
    assert not list((out / "models").rglob("offline-run-*"))  # the per-model evals do not report on their own


def test_report_to_typo_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="unknown report_to 'tensorbord'") as err:
        EvalConfig(model="m", datasets=("aime",), out=tmp_path / "x", report_to="tensorbord")
    assert "did you mean 'tensorboard'" in err.value.hint
    assert not (tmp_path / "x").exists()
