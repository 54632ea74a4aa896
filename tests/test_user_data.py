"""Your own data and your own code, driven through the command line as a user would.

A local file keeps its fields (carried into samples.parquet as text), honours a ``task`` column,
and --include loads a reward that a run records and a resume loads again; a run's default --out
is a new folder, and a run folder holds one grid.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.cli.app import app
from e1.data import load_dataset, load_includes
from e1.data.fields import FIELD_NAME, field_value, reserved_columns
from e1.errors import ConfigError, DataError

YELL = '''
from e1.rewards import register_reward


@register_reward("yell")
def yell(completions, answers, **columns):
    """1 when the solution (after the last </think>) is non-empty upper case text."""
    return [1.0 if c.rsplit("</think>", 1)[-1].strip().isupper() else 0.0 for c in completions]
'''


def e1(*args: str):
    return CliRunner().invoke(app, list(args), prog_name="e1")


def eval_args(model, datasets, command: str = "eval", **options) -> list[str]:
    """The words of ``e1 COMMAND --model MODEL --datasets DATASETS``, then each option by name:
    ``eval_args(m, d, think=4, n=2, out="run")`` → ``eval --model m --datasets d --think 4 --n 2 --out run``."""
    words = [command, "--model", str(model), "--datasets", str(datasets)]
    for name, value in options.items():
        words += [f"--{name.replace('_', '-')}", str(value)]
    return words


def e1_main(*args: str) -> tuple[int, str]:
    """The real entry point (``python -m e1``), whose errors are one red line: (exit code, all output)."""
    done = subprocess.run(
        [sys.executable, "-m", "e1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    return done.returncode, done.stdout + done.stderr


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def yell_file(tmp_path):
    (tmp_path / "mine").mkdir()
    path = tmp_path / "mine" / "yell_reward.py"
    path.write_text(YELL)
    return path


def test_a_jsonl_task_and_fields_reach_the_samples_through_an_included_reward(tmp_path, tiny_model_dir, yell_file):
    data = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {
                "problem": "Say hi loudly.",
                "answer": "HI",
                "task": "yell",
                "level": 3,
                "source": {"book": "x"},
            },
            {"problem": "What is 1 + 1?", "answer": "2", "level": "easy"},
        ],
    )
    run = eval_args(tiny_model_dir, data, think=4, solve=4, n=2, temperature=0, out="run")
    result = e1(*run, "--include", str(yell_file))
    assert result.exit_code == 0, result.output
    assert "e1 view run" in result.output and "e1 export run" in result.output  # the next commands
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet").sort_values(["problem_id", "sample_index"])
    by_problem = samples.groupby("problem_id").first()
    assert list(by_problem["level"]) == ["3", "easy"]  # kept, as text
    assert json.loads(by_problem.loc["mine-0", "source"]) == {"book": "x"} and pd.isna(
        by_problem.loc["mine-1", "source"]
    )
    yelled = samples[samples["problem_id"] == "mine-0"]
    expected = [1.0 if text.strip().isupper() else 0.0 for text in yelled["solution_text"]]
    assert list(yelled["reward"]) == expected  # the yell reward, not math's (the gold "HI" is never boxed)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["include"] == [str(yell_file.resolve())]
    refused = e1(*run)  # a resume without --include: e1 runs only the code the command names
    assert refused.exit_code == 1 and f"pass --include {yell_file.resolve()}" in refused.exception.hint
    again = e1(*run, "--include", str(yell_file))
    assert again.exit_code == 0, again.output
    assert len(pd.read_parquet(tmp_path / "run" / "samples.parquet")) == 4


def test_a_task_without_a_reward_is_one_line_naming_the_known_tasks(tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "p.jsonl", [{"problem": "p", "answer": "1", "task": "mathh"}])
    code, said = e1_main(*eval_args(tiny_model_dir, data, out="run"))
    assert code == 1 and "Traceback" not in said and len(said.strip().splitlines()) == 1, said
    assert "task 'mathh' has no reward" in said and "did you mean 'math'" in said and "--include" in said
    assert not (tmp_path / "run" / "samples.parquet").exists()


@pytest.mark.parametrize(
    "source, shown, commands",
    [
        (
            "raise ValueError('no key for my judge')",
            "ValueError: no key for my judge (at bad.py line 1)",
            (
                eval_args("nowhere", "aime"),
                eval_args("nowhere", "aime", "sweep"),
                ["train", "--model", "nowhere", "--data", "aime", "--out", "t"],
                ["data", "prepare", "aime", "--out", "data"],  # before any download
            ),
        ),
        (
            "def broken(:\n",
            "SyntaxError",
            (eval_args("nowhere", "aime"),),
        ),
        (
            "import not_a_module_anywhere",
            "ModuleNotFoundError",
            (eval_args("nowhere", "aime"),),
        ),
    ],
)
def test_a_broken_include_is_one_line_before_any_model_loads(tmp_path, source, shown, commands):
    (tmp_path / "bad.py").write_text(source)
    for command in commands:
        code, said = e1_main(*command, "--include", "bad.py")
        assert code == 1 and "Traceback" not in said and len(said.strip().splitlines()) == 1, said
        assert "--include bad.py" in said and shown in said
    code, said = e1_main(*eval_args("nowhere", "aime", include="nope.py"))
    assert code == 1 and "--include nope.py: no such file or folder" in said


SHOUTS = """
from e1.data import Benchmark, Fields, register


def shouts(benchmark, options):
    return [{"id": f"s{i}", "problem": f"Shout {word}.", "answer": word.upper()} for i, word in enumerate(("hi", "go", "up"))]


register(Benchmark(name="shouts", hub_id=None, split="test", description="words to shout", task="yell",
                   fields=Fields(id="id"), load=shouts, origin="written in a test"))
"""


def test_data_prepare_includes_the_datasets_the_users_code_registers(tmp_path):
    bench = tmp_path / "mine" / "shouts.py"
    bench.parent.mkdir()
    bench.write_text(SHOUTS)
    code, said = e1_main("data", "prepare", "shouts", "--out", "data")
    assert code == 1 and len(said.strip().splitlines()) == 1 and "unknown dataset 'shouts'" in said, said
    code, said = e1_main("data", "prepare", "shouts", "--include", str(bench), "--out", "data")
    assert code == 0 and "shouts: 3 rows" in said, said
    frame = pd.read_parquet(tmp_path / "data" / "shouts.parquet")
    assert list(frame["id"]) == ["s0", "s1", "s2"]
    assert list(frame["answer"]) == ["HI", "GO", "UP"]
    assert set(frame["task"]) == {"yell"}  # the registered dataset's task, not math
    # a downloaded copy prepared under the registered name keeps that dataset's task
    copy = write_jsonl(
        tmp_path / "copy.jsonl",
        [{"id": "c0", "problem": "Shout yes.", "answer": "YES"}],
    )
    code, said = e1_main(
        "data",
        "prepare",
        "--from",
        str(copy),
        "--name",
        "shouts",
        "--include",
        "mine/shouts.py",
        "--out",
        "local",
    )
    assert code == 0, said
    assert list(pd.read_parquet(tmp_path / "local" / "shouts.parquet")["task"]) == ["yell"]


def test_include_takes_a_package_or_a_folder_of_modules_once_each(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import helper\nLOADS = helper.count()\n")
    (package / "helper.py").write_text(
        "import builtins\n"
        "def count():\n"
        "    builtins.e1_test_loads = getattr(builtins, 'e1_test_loads', 0) + 1\n"
        "    return builtins.e1_test_loads\n"
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text(
        "import builtins\nbuiltins.e1_test_plain = getattr(builtins, 'e1_test_plain', '') + 'a'\n"
    )
    (plain / "b.py").write_text("import builtins\nbuiltins.e1_test_plain += 'b'\n")
    (plain / "_private.py").write_text("raise RuntimeError('never imported')\n")
    import builtins

    paths = load_includes([package, str(plain), package])
    assert paths == (str(package.resolve()), str(plain.resolve()))
    load_includes([plain, package])  # a resume in the same process registers nothing twice
    assert builtins.e1_test_loads == 1 and builtins.e1_test_plain == "ab"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no .py file"):
        load_includes([tmp_path / "empty"])


def test_sft_learns_a_jsonl_completion_column(tmp_path, tiny_model_dir):
    data = write_jsonl(
        tmp_path / "sft.jsonl",
        [
            {
                "problem": f"What is {i} + {i}?",
                "answer": str(2 * i),
                "completion": f"<think>{i}+{i}</think>\\boxed{{{2 * i}}}",
            }
            for i in range(4)
        ],
    )
    result = e1(
        "train",
        "--algo",
        "sft",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--steps",
        "1",
        "--prompts-per-step",
        "2",
        "--mini-batch-prompts",
        "2",
        "--micro-batch",
        "2",
        "--out",
        "sft",
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sft" / "checkpoints" / "step_1" / "config.json").is_file()
    assert "e1 view sft" in result.output


def test_default_out_is_a_new_folder_per_run_and_an_explicit_one_resumes(tmp_path, tiny_model_dir, problems_file):
    def args(think=4, datasets=problems_file, **more):
        return eval_args(tiny_model_dir, datasets, think=think, solve=4, n=1, limit=2, **more)

    first, second = e1(*args()), e1(*args())
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    folders = sorted((tmp_path / "runs" / "eval").iterdir())
    assert len(folders) == 2 and all(re.fullmatch(r"tiny-toy-\d{8}-\d{6}(-\d+)?", f.name) for f in folders)
    resumed = e1(*args(out=folders[0]))
    assert resumed.exit_code == 0 and "generating" not in resumed.output  # every sample was there
    other = write_jsonl(tmp_path / "other.jsonl", [{"problem": "p", "answer": "1"}])
    for refused, why in (
        (args(8, out=folders[0]), "holds a run of budgets t=4 s=4, not t=8 s=4"),
        (
            args(datasets=other, out=folders[0]),
            "holds a run of datasets toy, not other",
        ),
    ):
        code, said = e1_main(*refused)
        assert code == 1 and "Traceback" not in said and len(said.strip().splitlines()) == 1, said
        assert why in said and "leave out --out" in said
    config = json.loads((folders[0] / "config.json").read_text())
    summary = pd.read_parquet(folders[0] / "summary.parquet")
    assert [b["think"] for b in config["budgets"]] == [4] and list(summary["think_budget"]) == [4]


# ---- the gate where a local file's fields enter: generated field names and values ----

NAMES = st.one_of(
    st.sampled_from(sorted(reserved_columns() - {"id", "problem", "answer", "task"})),
    st.text(min_size=1, max_size=70),
    st.from_regex(FIELD_NAME.pattern, fullmatch=True),
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(fields=st.dictionaries(NAMES, VALUES, max_size=4), second=VALUES)
def test_a_local_file_keeps_each_field_as_text_or_refuses_it_in_one_line(tmp_path, fields, second):
    fields = {
        name: value
        for name, value in fields.items()
        if name not in ("id", "problem", "answer", "task")
        and not re.fullmatch(r"Unnamed: \d+|__index_level_\d+__", name)
    }  # a row index is no field
    rows = [
        {"problem": "p1", "answer": "1", **fields},
        {"problem": "p2", "answer": "2", **dict.fromkeys(list(fields)[:1], second)},
    ]
    path = write_jsonl(tmp_path / "gen.jsonl", rows)
    bad = [
        name for name in fields if name in reserved_columns() or not FIELD_NAME.matches(name) or keyword.iskeyword(name)
    ]
    try:
        frame = load_dataset(str(path))
    except DataError as err:
        assert bad, err
        assert "\n" not in str(err) and "field" in str(err)
        return
    assert not bad
    assert list(frame.columns) == [
        "id",
        "dataset",
        "problem",
        "answer",
        "task",
        "task_version",
        *fields,
    ]
    for index, row in enumerate(rows):
        for name in fields:
            kept = frame.loc[index, name]
            expected = field_value(row.get(name))
            assert (pd.isna(kept) and expected is None) or kept == expected


# ---- progress and endings ----


def test_a_tracker_that_cannot_log_is_refused_before_any_work(tmp_path, tiny_model_dir, problems_file, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for command in ("eval", "sweep"):
        code, said = e1_main(*eval_args(tiny_model_dir, problems_file, command, out="run", report_to="wandb"))
        assert code == 1 and len(said.strip().splitlines()) == 1 and "no W&B login" in said, said
        assert "WANDB_MODE=offline" in said and not (tmp_path / "run").exists()  # nothing loaded, nothing written


def test_a_resumed_run_says_what_it_kept_and_a_sweep_names_its_constant_columns(
    tmp_path, tiny_model_dir, problems_file
):
    run = eval_args(tiny_model_dir, problems_file, think=4, solve=4, n=2, out="run")
    assert e1(*run, "--limit", "1").exit_code == 0
    resumed = e1(*run, "--limit", "3")
    assert resumed.exit_code == 0, resumed.output
    assert "2 of 6 kept, generating 4 samples" in resumed.output
    sweep = e1(
        *eval_args(
            tiny_model_dir,
            problems_file,
            "sweep",
            think="0,4",
            solve=4,
            n=1,
            limit=2,
            out="curves",
        )
    )
    said = " ".join(sweep.output.split())
    assert sweep.exit_code == 0, sweep.output
    assert "the same in every row: dataset toy, mode elastic" in said  # not a column of the table
    assert "next: e1 view curves · e1 export curves" in said


class Recorder:
    """A progress reporter that keeps every task's total and each advance."""

    def __init__(self):
        self.tasks: list[tuple[str, int, list[float]]] = []

    @contextmanager
    def task(self, description: str, total: int):
        self.tasks.append((description, total, []))
        yield self

    @contextmanager
    def stage(self, description: str):
        yield

    def advance(self, amount: float = 1) -> None:
        self.tasks[-1][2].append(amount)


def test_a_sweep_bar_moves_within_its_first_batch_and_ends_at_its_total(tmp_path, tiny_engine, problems_file):
    from e1.budget import Budget
    from e1.engine import Mode, Sampling
    from e1.eval import EvalConfig, SweepConfig, run_sweep

    grid = EvalConfig(
        model="tiny",
        datasets=(str(problems_file),),
        budgets=(Budget(0, 4), Budget(4, 4), Budget(8, 4)),
        modes=(Mode("elastic"),),
        n=2,
        sampling=Sampling(temperature=1.0),
        batch_size=64,
        limit=3,
    )
    recorder = Recorder()
    run_sweep(
        SweepConfig(models=("tiny",), settings=grid, out=tmp_path / "s"),
        progress=recorder,
        load_engine=lambda model: tiny_engine,
    )
    ((_, total, advances),) = [task for task in recorder.tasks if "generating" in task[0]]
    assert total == 3 * 3 * 2  # problems × budgets × samples, all in one batch (64 // 2 problems per call)
    assert len(advances) > 3 and advances[0] < total / 2  # it moves as samples finish, not once at the end
    assert sum(advances) == pytest.approx(total)


class WorkRecorder(Recorder):
    """A recorder that also keeps each (work done, work in all) reported as a generate call ends."""

    def __init__(self):
        super().__init__()
        self.work_reports: list[tuple[float, float]] = []

    def work(self, done: float, total: float) -> None:
        self.work_reports.append((done, total))


@pytest.mark.parametrize(
    "shared, weights",
    [  # 2 problems a batch; each generate call reports its weight as it ends
        # independent: the 6 (budget, problem) items in order, one call per cell of a batch (t + s)
        (False, [4, 4, 12, 12]),
        # shared prefixes: all cells of a problem together; the roots (as long as t=8 s=4 can
        # follow: 12), then each cell's call, per batch
        (True, [12, 4, 12, 12, 4, 12]),
    ],
)
def test_an_eval_reports_work_as_each_call_ends_weighed_by_its_cells_budget(
    tmp_path, tiny_engine, problems_file, shared, weights
):
    from e1.budget import Budget
    from e1.engine import Mode, Sampling
    from e1.eval import EvalConfig, evaluate

    budgets = (Budget(0, 4), Budget(8, 4))
    config = EvalConfig(
        model="tiny",
        datasets=(str(problems_file),),
        budgets=budgets,
        modes=(Mode("elastic"),),
        n=2,
        sampling=Sampling(temperature=1.0),
        batch_size=4,
        limit=3,
        out=tmp_path / "e",
        share_prefixes=shared,
    )
    recorder = WorkRecorder()
    evaluate(config, engine=tiny_engine, progress=recorder)
    assert recorder.work_reports == [(sum(weights[: i + 1]), sum(weights)) for i in range(len(weights))]


def test_a_row_index_written_as_a_column_is_no_field(tmp_path):
    frame = pd.DataFrame({"problem": ["p1", "p2"], "answer": ["1", "2"], "level": [1, 2]}, index=[5, 9])
    frame.to_csv(tmp_path / "p.csv")  # header ",problem,answer,level"
    frame.to_parquet(tmp_path / "q.parquet")  # the index as __index_level_0__
    for name in ("p.csv", "q.parquet"):
        loaded = load_dataset(str(tmp_path / name))
        assert list(loaded.columns) == [
            "id",
            "dataset",
            "problem",
            "answer",
            "task",
            "task_version",
            "level",
        ]
        assert list(loaded["level"]) == ["1", "2"]
