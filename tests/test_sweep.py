"""e1 sweep: budget grids, one load per model, the aggregated results, plots, resume, the command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import BudgetError, ConfigError, ResultsError
from e1.eval.axes import budget_grid, parse_modes
from e1.eval.run import EvalConfig
from e1.eval.sweep import CURVE_COLUMNS, SweepConfig, display_names, model_slug, sweep
from e1.store.results import SAMPLE_COLUMNS, SUMMARY_COLUMNS
from e1.store.samples import SampleStore
from tests.fakes import Interrupting, ScriptedModel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_budget_grid_crosses_think_and_solve_lists():
    assert budget_grid(think="0,512,1k", solve="1k") == (Budget(0, 1024), Budget(512, 1024), Budget(1024, 1024))
    assert budget_grid(think="1k", solve="512,1k") == (Budget(1024, 512), Budget(1024, 1024))
    assert budget_grid() == tuple(Budget(t, 1024) for t in (0, 512, 1024, 2048, 3072))  # the defaults
    assert budget_grid(think="1k,1k") == (Budget(1024, 1024),)  # duplicates collapse


def test_budget_grid_takes_explicit_pairs():
    assert budget_grid(pairs="512+1k, 1k+1k,1.5k+2K") == (Budget(512, 1024), Budget(1024, 1024), Budget(1536, 2048))


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(think="1k", pairs="1k+1k"), ConfigError, "cannot be combined"),
        (dict(solve="1k", pairs="1k+1k"), ConfigError, "cannot be combined"),
        (dict(think=""), ConfigError, "empty think budget list"),
        (dict(think="512,,1k"), ConfigError, "empty item"),
        (dict(think="1x"), BudgetError, "think budget"),
        (dict(solve="0"), BudgetError, "solve budget must be >= 1"),
        (dict(pairs="1k"), ConfigError, "invalid budget pair"),
        (dict(pairs="+1k"), ConfigError, "invalid budget pair"),
        (dict(pairs=" , "), ConfigError, "empty budget list"),
    ],
)
def test_bad_budgets_are_refused(kw, error, match):
    with pytest.raises(error, match=match):
        budget_grid(**kw)


def test_modes_parse_and_unknown_mode_suggests():
    assert parse_modes("elastic, truncate,budget-forcing:wait=1,elastic") == (
        Mode("elastic"),
        Mode("truncate"),
        Mode("budget-forcing", wait=1),
    )
    with pytest.raises(ConfigError, match="did you mean 'truncate'"):
        parse_modes("elastic,trunc")
    with pytest.raises(ConfigError, match="empty mode list"):
        parse_modes("")


def test_slugs_are_distinct_folder_names_and_labels_drop_shared_folders():
    assert model_slug("Salesforce/E1-Math-1.5B") == "Salesforce--E1-Math-1.5B"
    assert model_slug("./ckpt/step_1").startswith("ckpt--step_1-")  # lossy (./ dropped): a hash keeps it apart
    assert len({model_slug(m) for m in ("a b", "a-b", "/x/a", "x/a", "x" * 100)}) == 5
    assert display_names(["/r/e1/step_1", "/r/e1/step_2"]) == {"/r/e1/step_1": "step_1", "/r/e1/step_2": "step_2"}
    assert display_names(["/r/a/model", "/r/b/model"]) == {"/r/a/model": "a/model", "/r/b/model": "b/model"}


@pytest.fixture
def problems_file(tmp_path):
    path = tmp_path / "toy.jsonl"
    rows = [{"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": answer} for i, answer in enumerate("232")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class Loader:
    """Stands in for HFEngine.load: scripted engines that think until forced, then box a fixed answer
    ("A" answers 2, "B" answers 3); counts loads and can interrupt a model's k-th generate call."""

    def __init__(self, tiny_engine, interrupt: dict[str, int] | None = None):
        self.tiny, self.interrupt, self.loads = tiny_engine, interrupt or {}, []

    def __call__(self, model: str):
        self.loads.append(model)
        tok = self.tiny.tokenizer
        answer = "2" if model.endswith("A") else "3"
        solution = tok.encode(f" The answer is \\boxed{{{answer}}}.", add_special_tokens=False)
        think, solve = tok.encode("a", add_special_tokens=False)[0], tok.encode("b", add_special_tokens=False)[0]
        scripted = ScriptedModel(len(tok), {}, self.tiny.markers, think, solve, solution=solution)
        engine = HFEngine(scripted, tok, self.tiny.markers, batch_size=8)
        return Interrupting(engine, self.interrupt[model]) if model in self.interrupt else engine


SOLVE = 40  # room for the scripted solution


def grid(**kw):
    return EvalConfig(**(dict(model="a", datasets=("aime",), budgets=(Budget(1, 1),)) | kw))


def sweep_config(out, problems, **kw):
    grid = dict(
        model="m/A",
        datasets=(str(problems),),
        budgets=tuple(Budget(t, SOLVE) for t in (0, 4, 8)),
        modes=(Mode("elastic"), Mode("truncate")),
        n=2,
        sampling=Sampling(temperature=0.0),
        batch_size=4,
    )
    return SweepConfig(models=("m/A", "m/B"), settings=EvalConfig(**(grid | kw)), out=out)


def test_sweep_runs_the_grid_once_per_model_and_aggregates(tmp_path, problems_file, tiny_engine):
    out, loader = tmp_path / "sweep", Loader(tiny_engine)
    sweep(sweep_config(out, problems_file), load_engine=loader)
    assert loader.loads == ["m/A", "m/B"]  # each model loaded once for its whole grid
    for name in ("samples.parquet", "summary.parquet", "curves.parquet", "config.json", "curves.png"):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "models").iterdir()) == ["m--A", "m--B"]
    assert (out / "models" / "m--A" / "samples.parquet").is_file()  # each model's run is in the eval format

    written = pd.read_parquet(out / "samples.parquet")
    assert list(written.columns) == ["model", *SAMPLE_COLUMNS]
    assert len(written) == 2 * 2 * 3 * 3 * 2  # models × modes × budgets × problems × samples
    summary = pd.read_parquet(out / "summary.parquet")
    assert list(summary.columns) == ["model", *SUMMARY_COLUMNS]
    curves = pd.read_parquet(out / "curves.parquet")
    assert list(curves.columns) == CURVE_COLUMNS
    assert len(summary) == len(curves) == 2 * 1 * 2 * 3  # models × datasets × modes × budgets
    assert list(curves["model"].drop_duplicates()) == ["m/A", "m/B"]  # the order given

    elastic = curves[curves["mode"] == "elastic"].set_index(["model", "think_budget"])
    # A boxes 2 (gold of q0, q2), B boxes 3 (gold of q1): 2/3 and 1/3 at every think budget
    assert elastic.loc["m/A", "accuracy"].tolist() == pytest.approx([2 / 3] * 3)
    assert elastic.loc["m/B", "accuracy"].tolist() == pytest.approx([1 / 3] * 3)
    assert elastic.loc["m/A", "mean_think_tokens"].tolist() == [0, 4, 8]  # thinking cut at t
    assert (elastic.loc["m/A", "forced_rate"] == 1.0).all()
    areas = pd.read_parquet(out / "areas.parquet").set_index(["model", "mode"])
    assert len(areas) == 2 * 2 and (areas["points"] == 3).all()  # a curve per model × mode
    assert areas.loc[("m/A", "elastic"), "auc"] == pytest.approx(2 / 3)  # flat at 2/3: its mean is 2/3
    solved = pd.read_parquet(out / "problems.parquet").set_index(["model", "mode", "problem_id"])
    assert len(solved) == 2 * 2 * 3 and solved["b_star"].notna().sum() > 0
    truncate = curves[curves["mode"] == "truncate"]
    # truncate gets one budget t + s: the model thinks through all of it and never answers
    assert truncate["mean_total_tokens"].tolist() == [t + SOLVE for t in (0, 4, 8)] * 2
    assert (truncate["accuracy"] == 0).all() and (truncate["forced_rate"] == 0).all()
    assert (truncate["think_budget"].tolist(), truncate["solve_budget"].tolist()) == ([0, 4, 8] * 2, [SOLVE] * 6)

    assert (out / "curves.png").read_bytes()[:8] == PNG_MAGIC
    saved = json.loads((out / "config.json").read_text())
    assert saved["models"] == ["m/A", "m/B"] and saved["runs"]["m/A"] == "models/m--A" and "e1_version" in saved


def test_interrupted_sweep_resumes_without_redoing_finished_points(tmp_path, problems_file, tiny_engine):
    full, _, full_curves = sweep(sweep_config(tmp_path / "full", problems_file), load_engine=Loader(tiny_engine))
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        sweep(
            sweep_config(out, problems_file), load_engine=Loader(tiny_engine, interrupt={"m/B": 9})
        )  # B: a root + 6 cells per batch of 2 problems
    assert len(pd.read_parquet(out / "models" / "m--A" / "samples.parquet")) == 36  # A finished
    partial = len(SampleStore(out / "models" / "m--B").read())  # B's parts written before the kill
    assert 0 < partial < 36 and not (out / "curves.parquet").exists()

    loader = Loader(tiny_engine, interrupt={"m/B": -1})  # never fires; counts B's generate calls
    samples, _, curves = sweep(sweep_config(out, problems_file), load_engine=loader)
    assert loader.loads == ["m/B"]  # A's grid was complete: not even loaded
    b_rows = pd.read_parquet(out / "models" / "m--B" / "samples.parquet")
    assert len(b_rows) == 36 and not b_rows.duplicated(["problem_id", "sample_index", "mode", "think_budget"]).any()
    pd.testing.assert_frame_equal(samples, full)
    pd.testing.assert_frame_equal(curves, full_curves)

    # a finished sweep loads nothing on rerun, and refuses other sampling settings before any load
    again = Loader(tiny_engine)
    sweep(sweep_config(out, problems_file), load_engine=again)
    assert again.loads == []
    with pytest.raises(ResultsError, match="different n"):
        sweep(sweep_config(out, problems_file, n=3), load_engine=again)
    assert again.loads == []


def test_a_sweep_resumes_from_another_directory_and_refuses_another_dataset(tmp_path, tiny_engine, monkeypatch):
    """A sweep's dataset names are what its models' runs recorded: one run as ``data/aime_2024.parquet``
    (a prepared file of dataset ``aime``) from one directory resumes from another by its absolute
    path, loading no model; a file of another dataset under that relative path there grows the sweep."""
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, name in ((first, "aime"), (second, "other")):
        (folder / "data").mkdir(parents=True)
        pd.DataFrame(
            {
                "id": ["a1", "a2"],
                "dataset": name,
                "problem": ["What is 1 + 1?", "What is 2 + 1?"],
                "answer": ["2", "3"],
                "task": "math",
                "task_version": 1,
            }
        ).to_parquet(folder / "data" / "aime_2024.parquet")
    out = tmp_path / "sweep"
    monkeypatch.chdir(first)
    sweep(sweep_config(out, "data/aime_2024.parquet"), load_engine=Loader(tiny_engine))
    monkeypatch.chdir(second)
    again = Loader(tiny_engine)
    samples, _, _ = sweep(sweep_config(out, first / "data" / "aime_2024.parquet"), load_engine=again)
    assert again.loads == [] and set(samples["dataset"]) == {"aime"}
    # the relative path names another dataset here: the sweep grows by it, its aime cells kept as they were
    grown, _, _ = sweep(sweep_config(out, "data/aime_2024.parquet"), load_engine=again)
    assert again.loads == ["m/A", "m/B"] and set(grown["dataset"]) == {"aime", "other"}
    pd.testing.assert_frame_equal(grown[grown["dataset"] == "aime"].reset_index(drop=True), samples)


def test_sweep_config_validation():
    with pytest.raises(ConfigError, match="no model"):
        SweepConfig(models=(), settings=grid())
    with pytest.raises(ConfigError, match="twice"):
        SweepConfig(models=("a", "a"), settings=grid())
    with pytest.raises(ConfigError, match="no dataset"):
        SweepConfig(models=("a",), settings=grid(datasets=()))
    with pytest.raises(ConfigError, match="no budget"):
        SweepConfig(models=("a",), settings=grid(budgets=()))
    with pytest.raises(ConfigError, match="--n"):
        SweepConfig(models=("a",), settings=grid(n=0))


RATES = ("accuracy", "pass_at_1", "pass_at_k", "forced_rate")


def test_every_rate_in_every_file_is_a_fraction(tmp_path, problems_file, tiny_engine):
    out = tmp_path / "sweep"
    sweep(sweep_config(out, problems_file), load_engine=Loader(tiny_engine))
    samples = pd.read_parquet(out / "samples.parquet")
    # A is right on q0 and q2 in elastic mode: 2 of 3 problems, both samples each -> 2/3, not 66.7
    elastic_a = samples[(samples["model"] == "m/A") & (samples["mode"] == "elastic")]
    assert elastic_a["correct"].mean() == pytest.approx(2 / 3)
    files = [out / "summary.parquet", out / "curves.parquet", *sorted((out / "models").glob("*/summary.parquet"))]
    assert len(files) == 4
    for path in files:
        frame = pd.read_parquet(path)
        assert "avg_at_n" not in frame.columns, path  # the old percent column is gone, not reinterpreted
        for column in (c for c in RATES if c in frame.columns):
            assert frame[column].between(0, 1).all(), (path, column)
    curves = pd.read_parquet(out / "curves.parquet").set_index(["model", "mode", "think_budget"])
    assert curves.loc[("m/A", "elastic", 4), "accuracy"] == pytest.approx(2 / 3)
    assert curves.loc[("m/A", "elastic", 4), "forced_rate"] == 1.0


def test_curves_table_fits_80_columns():
    from rich.console import Console

    from e1.report.ui import curves_table

    rows = [
        dict(
            model=m,
            dataset="aime",
            mode=mode,
            think_budget=t,
            solve_budget=1024,
            accuracy=acc,
            pass_at_k=0.5,
            mean_total_tokens=t + 700.0,
            mean_think_tokens=float(t),
            mean_solve_tokens=700.0,
            forced_rate=0.5,
        )
        for m in ("Salesforce/E1-Math-1.5B", "agentica-org/DeepScaleR-1.5B-Preview")
        for mode in ("elastic", "truncate", "budget-forcing")
        for t, acc in zip((0, 512, 1024, 2048, 3072), (0.1, 0.2, 0.3, 0.4, 1.0))
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(curves_table(pd.DataFrame(rows), names=display_names(["Salesforce/E1-Math-1.5B", "x/y"])))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "█ 100.0" in text and "▂ 20.0" in text and "3k" in text and "budget-forcing" in text


@pytest.fixture
def counted_loads(monkeypatch):
    """Counts HFEngine.load calls (the real loader still runs)."""
    loads, original = [], HFEngine.load

    def load(model, *spec, **kw):
        loads.append(model)
        return original(model, *spec, **kw)

    monkeypatch.setattr(HFEngine, "load", load)
    return loads


def other_model(model, path):
    """A copy of ``model`` that is another model by its fingerprint (its config has one more key)."""
    shutil.copytree(model, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "e1_test_variant": 1}))
    return path


def test_sweep_command_end_to_end_on_two_tiny_models(tmp_path, problems_file, tiny_model_dir, counted_loads):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "tiny").symlink_to(tiny_model_dir)
    other_model(tiny_model_dir, tmp_path / "b" / "tiny")  # two models (one model twice is refused)
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--model",
        str(tmp_path / "a" / "tiny"),
        "--model",
        str(tmp_path / "b" / "tiny"),
        "--datasets",
        str(problems_file),
        "--think",
        "0,8",
        "--solve",
        "8",
        "--modes",
        "elastic,truncate",
        "--n",
        "1",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args, prog_name="e1")
    assert result.exit_code == 0, result.output
    assert counted_loads == [str(tmp_path / "a" / "tiny"), str(tmp_path / "b" / "tiny")]
    assert "accuracy % by budget" in result.output and "a/tiny" in result.output and "avg@n" in result.output
    curves = pd.read_parquet(out / "curves.parquet")
    assert len(curves) == 2 * 2 * 2 and (curves["mean_total_tokens"] <= 16).all()
    assert (out / "curves.png").read_bytes()[:8] == PNG_MAGIC
    # a finished sweep loads nothing
    result = CliRunner().invoke(app, args, prog_name="e1")
    assert result.exit_code == 0, result.output
    assert len(counted_loads) == 2


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--think", "0,512", "--budgets", "1k+1k"], "cannot be combined"),
        (["--modes", "elastic,fast"], "unknown mode"),
        (["--think", "1k,"], "empty item"),
    ],
)
def test_bad_input_fails_before_any_model_loads(extra, match, counted_loads):
    result = CliRunner().invoke(app, ["sweep", "--model", "nowhere", "--datasets", "aime", *extra], prog_name="e1")
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    assert match in str(result.exception) and counted_loads == []


def test_bad_input_is_one_red_line():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "e1",
            "sweep",
            "--model",
            "m",
            "--datasets",
            "aime",
            "--budgets",
            "512+1k",
            "--solve",
            "1k",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be combined" in lines[0] and "Traceback" not in result.stderr
