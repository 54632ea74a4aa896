"""A run folder's truth is its samples: exports are computed from them, its grid is read from them, and a
sweep grows cell by cell. Each test feeds generated edits and would fail on code that trusts the other files."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import E1Error, ResultsError
from e1.eval.run import EvalConfig, evaluate
from e1.eval.sweep import SweepConfig, sweep
from e1.report.export import export, task_name
from e1.report.metrics import summarize
from tests.fakes import ScriptedModel

SLOW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    path = tmp_path_factory.mktemp("problems") / "toy.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": a}) + "\n"
            for i, a in enumerate("2322")
        )
    )
    return path


@pytest.fixture(scope="module")
def boxed(tiny_engine):
    """A scripted model that thinks until forced, then answers \\boxed{2} (right on q0 and q2)."""
    tok = tiny_engine.tokenizer
    solution = tok.encode(" The answer is \\boxed{2}.", add_special_tokens=False)
    think, solve = tok.encode("a", add_special_tokens=False)[0], tok.encode("b", add_special_tokens=False)[0]
    return HFEngine(
        ScriptedModel(len(tok), {}, tiny_engine.markers, think, solve, solution=solution),
        tok,
        tiny_engine.markers,
        batch_size=8,
    )


def grid(out, problems, **kw):
    base = dict(
        model="scripted",
        datasets=(str(problems),),
        budgets=(Budget(2, 40), Budget(6, 40)),
        modes=(Mode("elastic"), Mode("truncate")),
        n=2,
        sampling=Sampling(temperature=0.0),
        out=out,
        batch_size=8,
    )
    return EvalConfig(**(base | kw))


@pytest.fixture(scope="module")
def run(tmp_path_factory, problems, boxed):
    out = tmp_path_factory.mktemp("truth") / "run"
    evaluate(grid(out, problems), engine=boxed)
    return out


# ---- 11: exports are computed from the samples -------------------------------------------------------


def _lm_eval_results(run_dir, out) -> dict:
    written, _ = export(run_dir, "lm-eval", out)
    (results,) = [p for p in written if p.name.startswith("results_")]
    return json.loads(results.read_text())["results"]


SUMMARY_EDITS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "accuracy",
                "pass_at_1",
                "pass_at_k",
                "maj_at_k",
                "problems",
                "k",
                "samples_per_problem",
                "mean_think_tokens",
                "forced_rate",
            ]
        ),
        st.integers(0, 3),
        st.sampled_from([-5.0, 7.0, float("nan"), float("inf"), 0.5, 1e9]),
    ),
    min_size=1,
    max_size=6,
)


@SLOW
@given(edits=SUMMARY_EDITS)
def test_no_edit_of_summary_parquet_changes_an_export_and_every_number_is_the_samples(run, tmp_path, edits):
    folder = tmp_path / "edited"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(run, folder)
    summary = pd.read_parquet(folder / "summary.parquet")
    for column, row, value in edits:
        summary[column] = summary[column].astype("float64")
        summary.loc[row % len(summary), column] = value
    summary.to_parquet(folder / "summary.parquet")
    results = _lm_eval_results(folder, tmp_path / "edited-export")
    assert results == _lm_eval_results(run, tmp_path / "clean-export")
    samples = pd.read_parquet(run / "samples.parquet")
    for row in summarize(samples).to_dict("records"):  # e1.report.metrics, as e1 eval computes them
        task = results[task_name(row["dataset"], row["mode"], row["think_budget"], row["solve_budget"])]
        assert task["exact_match,none"] == pytest.approx(row["accuracy"])
        assert task["pass@1,none"] == pytest.approx(row["pass_at_1"])
        assert task[f"maj@{row['k']},none"] == pytest.approx(row["maj_at_k"])
        assert 0 <= task["exact_match,none"] <= 1


@pytest.mark.parametrize("fmt", ["lm-eval", "lighteval"])
@pytest.mark.parametrize("column", ["think_tokens", "correct", "sample_index", "problem_id"])
def test_a_damaged_samples_file_is_one_line_in_every_export(run, tmp_path, fmt, column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "damaged"
    shutil.copytree(run, folder)
    table = pq.read_table(folder / "samples.parquet")
    values = table.column(column).to_pylist()
    values[1] = None
    pq.write_table(
        table.set_column(
            table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
        ),
        folder / "samples.parquet",
    )
    with pytest.raises(E1Error, match=f"sample without {column}") as refused:
        export(folder, fmt, tmp_path / "out")
    assert "\n" not in str(refused.value.message)


# ---- 9: a run folder's grid is read from what it holds -----------------------------------------------

CONFIG_EDITS = st.one_of(
    st.tuples(st.just("budgets"), st.lists(st.tuples(st.integers(0, 64), st.integers(1, 64)), min_size=1, max_size=3)),
    st.tuples(
        st.just("modes"),
        st.lists(
            st.sampled_from(["elastic", "truncate", "budget-forcing:wait=1", "soft"]),
            min_size=1,
            max_size=2,
            unique=True,
        ),
    ),
)


@pytest.mark.parametrize(
    "key, value",
    [
        ("budgets", "t=2"),
        ("budgets", [{"think": "2", "solve": 40}]),
        ("budgets", [[2, 40]]),
        ("budgets", [{"think": -1, "solve": 40}]),
        ("modes", [1]),
        ("modes", "elastic"),
        ("modes", [{"name": "elastic"}]),
        ("modes", ["no-such-mode"]),
    ],
)
def test_a_config_json_holding_what_e1_never_writes_is_one_line(run, swept, tmp_path, boxed, problems, key, value):
    for name, folder, again in (
        ("eval", run, lambda out: evaluate(grid(out, problems), engine=boxed)),
        ("sweep", swept, lambda out: sweep(_sweep(out, problems), load_engine=lambda m: boxed)),
    ):
        edited = tmp_path / name
        shutil.copytree(folder, edited)
        record = json.loads((folder / "config.json").read_text())
        (edited / "config.json").write_text(json.dumps({**record, key: value}))
        with pytest.raises(ResultsError, match=f"config.json records {key} e1 did not write"):
            again(edited)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, problems, boxed):
    out = tmp_path_factory.mktemp("truth") / "sweep"
    sweep(_sweep(out, problems), load_engine=lambda model: boxed)
    return out


@SLOW
@given(edit=CONFIG_EDITS)
def test_a_config_json_that_disagrees_with_the_stored_rows_is_refused_and_nothing_is_appended(
    run, tmp_path, boxed, problems, edit
):
    key, value = edit
    recorded = json.loads((run / "config.json").read_text())
    held = {"budgets": {(2, 40), (6, 40)}, "modes": {"elastic", "truncate"}}[key]
    given_cells = {tuple(v) for v in value} if key == "budgets" else set(value)
    if held <= given_cells:
        return  # a record that still names every stored cell is not a lie about them
    folder = tmp_path / "edited"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(run, folder)
    record = {**recorded, key: [{"think": t, "solve": s} for t, s in value] if key == "budgets" else value}
    (folder / "config.json").write_text(json.dumps(record))
    before = pd.read_parquet(folder / "samples.parquet")
    request = (
        {"budgets": tuple(Budget(t, s) for t, s in value)}
        if key == "budgets"
        else {"modes": tuple(Mode.parse(m) for m in value)}
    )
    with pytest.raises(ResultsError, match=f"config.json records {key} that its samples disagree with") as refused:
        evaluate(grid(folder, problems, **request), engine=boxed)
    assert "restore config.json" in refused.value.hint
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "samples.parquet"), before)


ERASURES = st.tuples(
    st.sampled_from([("config.json",), ("budgets",), ("modes",), ("budgets", "modes")]),
    st.sets(st.sampled_from([(2, 40), (6, 40), (9, 40)]), min_size=1),
    st.sets(st.sampled_from(["elastic", "truncate", "soft"]), min_size=1),
)


@SLOW
@given(erasure=ERASURES)
def test_a_folder_whose_record_was_erased_is_refused_another_grid_and_nothing_is_appended(
    run, tmp_path, boxed, problems, erasure
):
    erased, budgets, modes = erasure
    if budgets >= {(2, 40), (6, 40)} and modes >= {"elastic", "truncate"}:
        return  # a grid holding every stored cell grows into them, as a sweep does
    folder = tmp_path / "erased"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(run, folder)
    record = json.loads((run / "config.json").read_text())
    if erased == ("config.json",):
        (folder / "config.json").unlink()
    else:
        (folder / "config.json").write_text(json.dumps({k: v for k, v in record.items() if k not in erased}))
    before = pd.read_parquet(folder / "samples.parquet")
    request = dict(budgets=tuple(Budget(t, s) for t, s in sorted(budgets)), modes=tuple(map(Mode.parse, sorted(modes))))
    with pytest.raises(ResultsError, match="disagree with|and no config.json naming them"):
        evaluate(grid(folder, problems, **request), engine=boxed)
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "samples.parquet"), before)


# ---- a sweep that grows --------------------------------------------------------------------------------


def _sweep(out, problems, **kw):
    return SweepConfig(models=("scripted",), settings=grid(out, problems, **kw), out=out)


GROWTH = st.tuples(
    st.sets(st.sampled_from([(2, 40), (6, 40), (9, 40), (4, 20)]), min_size=1),
    st.sets(st.sampled_from(["elastic", "truncate", "budget-forcing:wait=1"]), min_size=1),
    st.booleans(),
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=GROWTH, second=GROWTH)
def test_a_sweep_grows_cell_by_cell_into_what_a_fresh_run_of_the_whole_grid_writes(
    tmp_path, problems, boxed, first, second
):
    other = tmp_path / "more.jsonl"
    other.write_text(json.dumps({"id": "m0", "problem": "What is 1 + 1?", "answer": "2"}) + "\n")

    def settings_of(budgets, modes, more):
        return dict(
            budgets=tuple(Budget(t, s) for t, s in sorted(budgets)),
            modes=tuple(map(Mode.parse, sorted(modes))),
            datasets=(str(problems), *([str(other)] if more else [])),
        )

    grown, fresh = tmp_path / "grown", tmp_path / "fresh"
    shutil.rmtree(grown, ignore_errors=True), shutil.rmtree(fresh, ignore_errors=True)
    loads = lambda model: boxed  # noqa: E731
    sweep(_sweep(grown, problems, **settings_of(*first)), load_engine=loads)
    samples, summary, curves = sweep(_sweep(grown, problems, **settings_of(*second)), load_engine=loads)
    union = settings_of(first[0] | second[0], first[1] | second[1], first[2] or second[2])
    whole, whole_summary, whole_curves = sweep(_sweep(fresh, problems, **union), load_engine=loads)
    key = ["dataset", "problem_id", "sample_index", "mode", "think_budget", "solve_budget"]
    for mine, theirs in ((samples, whole), (summary, whole_summary), (curves, whole_curves)):
        by = [c for c in key if c in mine.columns]
        pd.testing.assert_frame_equal(
            mine.sort_values(by, ignore_index=True), theirs.sort_values(by, ignore_index=True)
        )
    recorded, expected = (json.loads((folder / "config.json").read_text()) for folder in (grown, fresh))
    assert {json.dumps(b) for b in recorded["budgets"]} == {json.dumps(b) for b in expected["budgets"]}
    assert set(recorded["modes"]) == set(expected["modes"]) and set(recorded) == set(expected)
    exported = _lm_eval_results(grown, tmp_path / "grown-export")
    assert set(exported) == set(_lm_eval_results(fresh, tmp_path / "fresh-export"))


def test_a_grown_sweep_keeps_its_computed_cells_and_refuses_what_would_change_them(tmp_path, problems, boxed):
    out = tmp_path / "sweep"
    first, _, _ = sweep(_sweep(out, problems), load_engine=lambda model: boxed)
    counted = []
    samples, _, _ = sweep(
        _sweep(out, problems, budgets=(Budget(9, 40),)), load_engine=lambda model: counted.append(model) or boxed
    )
    assert counted == ["scripted"]
    kept = samples[samples["think_budget"] != 9].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first)  # bit for bit: the computed cells were not drawn again
    assert sorted(set(samples["think_budget"])) == [2, 6, 9]
    for change, said in (
        (dict(n=3), "different n"),
        (dict(sampling=Sampling(temperature=0.0, seed=7)), "different sampling"),
    ):
        with pytest.raises(ResultsError, match=said) as refused:
            sweep(_sweep(out, problems, **change), load_engine=lambda model: boxed)
        assert "use another --out" in refused.value.hint
    with pytest.raises(ResultsError, match="holds a run of budgets"):  # e1 eval keeps one grid per folder
        evaluate(grid(tmp_path / "eval", problems), engine=boxed)
        evaluate(grid(tmp_path / "eval", problems, budgets=(Budget(9, 40),)), engine=boxed)


def test_a_sampled_sweep_grown_by_a_budget_is_the_fresh_sweep_of_the_whole_grid(tmp_path, tiny_engine, problems):
    """Sampling (t=1, shared prefixes): the new budget's rows are the fresh run's, the old ones kept as they were."""

    def config(out, budgets):
        settings = grid(
            out,
            problems,
            budgets=tuple(Budget(t, 6) for t in budgets),
            modes=(Mode("elastic"),),
            sampling=Sampling(temperature=1.0, seed=3),
        )
        return SweepConfig(models=("tiny",), settings=settings, out=out)

    first, _, _ = sweep(config(tmp_path / "grown", (4,)), load_engine=lambda model: tiny_engine)
    grown, _, _ = sweep(config(tmp_path / "grown", (4, 12)), load_engine=lambda model: tiny_engine)
    fresh, _, _ = sweep(config(tmp_path / "fresh", (4, 12)), load_engine=lambda model: tiny_engine)
    pd.testing.assert_frame_equal(grown, fresh)
    pd.testing.assert_frame_equal(grown[grown["think_budget"] == 4].reset_index(drop=True), first)


def _every_byte(out) -> dict:
    """Each entry under ``out``: kind, size, modification time and a regular file's bytes (nothing else opened)."""
    import stat as kinds

    found = {}
    for path in sorted(out.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if kinds.S_ISREG(info.st_mode) else None
        found[path.relative_to(out).as_posix()] = (kinds.S_IFMT(info.st_mode), info.st_mtime_ns, data)
    return found


GROW_REFUSALS = st.sampled_from(["dataset changed", "model folder's n", "model folder's modes", "model folder's seed"])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refusal=GROW_REFUSALS, budget=st.sampled_from([(9, 40), (4, 20), (2, 40)]), more_mode=st.booleans())
def test_a_refused_sweep_grow_leaves_every_file_in_out_as_it_was(
    tmp_path_factory, problems, boxed, refusal, budget, more_mode
):
    """A sweep grown into a folder that one of its models' runs refuses (the dataset's content changed, that
    run's record disagrees) is refused in one line, and every file in --out is byte for byte (and time) as it was."""
    root = tmp_path_factory.mktemp("refused")
    data = root / "toy.jsonl"
    shutil.copy(problems, data)
    out = root / "sweep"
    sweep(_sweep(out, data), load_engine=lambda model: boxed)
    model_config = next(out.glob("models/*/config.json"))
    record = json.loads(model_config.read_text())
    if refusal == "dataset changed":
        data.write_text(data.read_text().replace('"answer": "3"', '"answer": "4"'))
    elif refusal == "model folder's n":
        model_config.write_text(json.dumps({**record, "n": 3}))
    elif refusal == "model folder's modes":
        model_config.write_text(json.dumps({**record, "modes": record["modes"][:1]}))
    else:
        model_config.write_text(json.dumps({**record, "sampling": {**record["sampling"], "seed": 99}}))
    before = _every_byte(out)
    modes = (Mode("elastic"), Mode("truncate"), *([Mode.parse("budget-forcing:wait=1")] if more_mode else []))
    with pytest.raises(E1Error) as refused:
        sweep(_sweep(out, data, budgets=(Budget(*budget),), modes=modes), load_engine=lambda model: boxed)
    assert "\n" not in refused.value.message
    assert _every_byte(out) == before
