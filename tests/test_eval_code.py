"""e1 eval on code: batch scoring in the sandbox, the code columns of samples.parquet, the run
identity of the code options, and HumanEval end to end (tiny model; scripted correct answer)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.data import load_dataset
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import ConfigError, ResultsError
from e1.eval.run import RUN_IDENTITY, EvalConfig, evaluate
from e1.rewards import scoring
from e1.rewards.scoring import Scorer, ScoringSpec
from e1.store.results import SAMPLE_COLUMNS
from tests.fakes import ScriptedModel

ADD = [{"kind": "stdio", "input": "2 3\n", "output": "5\n"}, {"kind": "stdio", "input": "2 2\n", "output": "4\n"}]
STRLEN = "def strlen(string: str) -> int:\n    return len(string)\n"


def answer(code: str) -> str:
    return f"<think>let me think</think>\n```python\n{code}```\n"


# ---- scoring ----


def test_scorer_scores_mixed_batches_in_order_with_code_details():
    tests = json.dumps(ADD)
    only_first = "a, b = map(int, input().split())\nprint(5)\n"  # passes test 1, fails test 2
    items = [
        ("code", answer("a, b = map(int, input().split())\nprint(a + b)\n"), tests),
        ("math", "<think>hm</think> so \\boxed{4}", "4"),
        ("code", answer(only_first), tests),
        ("code", "<think>hm</think> no code at all", tests),
        ("code", "```python\nprint(5)\n```", tests),  # thinking never ended
        ("code", answer("while True:\n    pass\n"), tests),
    ]
    with Scorer(workers=2, time_limit_s=3) as scorer:  # correct code passes in time on a loaded machine too
        scored = scorer.score(*map(list, zip(*items)))
    assert [s.reward for s in scored] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert scored[0].tests_passed == 1.0 and scored[0].first_failure is None
    assert scored[0].extracted == "a, b = map(int, input().split())\nprint(a + b)\n"
    assert scored[1].extracted == "4" and math.isnan(scored[1].tests_passed) and scored[1].first_failure is None
    assert scored[2].tests_passed == 0.5 and scored[2].first_failure == "test 2: wrong answer: expected '4', got '5'"
    assert (scored[3].tests_passed, scored[3].first_failure) == (0.0, "no complete python code block")
    assert scored[4].first_failure == "no end of thinking"
    assert scored[5].first_failure == "test 1: timeout after 3s"
    # one at a time (as a single call scores) agrees with the batch
    assert [scoring.score(task, completion, gold).reward for task, completion, gold in items[:5]] == [
        s.reward for s in scored[:5]
    ]
    # max_tests keeps the largest input ("2 3\n" and "2 2\n" tie: the first), so only test 1 runs
    with Scorer(max_tests=1) as scorer:
        [kept] = scorer.score(["code"], [answer(only_first)], [tests])
    assert (kept.reward, kept.tests_passed) == (1.0, 1.0)


def test_code_options_are_validated_and_part_of_the_run_identity():
    assert {"max_tests", "test_time_limit_s"} <= set(RUN_IDENTITY) and "workers" not in RUN_IDENTITY
    for bad, message in (
        ({"workers": 0}, "--workers"),
        ({"max_tests": 0}, "--max-tests"),
        ({"test_time_limit_s": 0}, "--test-time-limit"),
    ):
        with pytest.raises(ConfigError, match=message):
            EvalConfig(model="m", datasets=("humaneval",), scoring=ScoringSpec(**bad))


# ---- HumanEval through the whole eval path ----


@pytest.fixture
def humaneval_file(tmp_path):
    """Two real HumanEval rows (strlen, has_close_elements) as a prepared parquet."""
    frame = load_dataset("humaneval").set_index("id", drop=False).loc[["HumanEval/23", "HumanEval/0"]]
    path = tmp_path / "two.parquet"
    frame.to_parquet(path, index=False)
    return path


class Recording:
    """Wraps an engine; keeps the prompts it was given."""

    def __init__(self, engine):
        self.engine, self.prompts = engine, []
        self.tokenizer, self.markers = engine.tokenizer, engine.markers

    def generate(self, prompts, *args, **kw):
        self.prompts += list(prompts)
        return self.engine.generate(prompts, *args, **kw)


@pytest.fixture
def strlen_engine(tiny_engine):
    """A scripted model that thinks until forced, then writes a correct strlen in a python block."""
    tok = tiny_engine.tokenizer
    solution = tok.encode(f" Here it is:\n```python\n{STRLEN}```", add_special_tokens=False)
    think, solve = tok.encode("a", add_special_tokens=False)[0], tok.encode("b", add_special_tokens=False)[0]
    model = ScriptedModel(len(tok), {}, tiny_engine.markers, think, solve, solution=solution)
    return Recording(HFEngine(model, tok, tiny_engine.markers, batch_size=4))


def test_a_correct_solution_scores_1_through_the_whole_eval_path(tmp_path, humaneval_file, strlen_engine, monkeypatch):
    calls = []
    score = Scorer.score
    monkeypatch.setattr(Scorer, "score", lambda self, *items: calls.append(len(items[0])) or score(self, *items))
    config = EvalConfig(
        model="scripted",
        datasets=(str(humaneval_file),),
        budgets=(Budget(6, 120),),
        n=2,
        modes=(Mode("elastic"),),
        sampling=Sampling(temperature=0.0),
        out=tmp_path / "run",
        batch_size=4,
        scoring=ScoringSpec(workers=2),
    )
    _, summary = evaluate(config, engine=strlen_engine)
    assert calls == [4]  # one batch (2 problems x 2 samples), scored in one parallel call
    assert all("Complete the following Python function.\n\n```python\n" in p for p in strlen_engine.prompts)
    written = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert list(written.columns) == SAMPLE_COLUMNS
    rows = written.set_index(["problem_id", "sample_index"])
    solved, other = rows.loc[("HumanEval/23", 0)], rows.loc[("HumanEval/0", 1)]
    assert (solved.reward, solved.correct, solved.tests_passed) == (1.0, True, 1.0)
    assert pd.isna(solved.first_failure) and solved.extracted_answer == STRLEN and solved.gold == "1 test"
    assert (other.reward, other.correct, other.tests_passed) == (0.0, False, 0.0)
    assert other.first_failure == "test 1: runtime error: NameError: name 'has_close_elements' is not defined"
    assert summary.iloc[0].accuracy == pytest.approx(0.5)
    with pytest.raises(ResultsError, match="different max_tests"):
        evaluate(replace(config, scoring=replace(config.scoring, max_tests=1)), engine=strlen_engine)


def test_eval_command_on_humaneval_end_to_end(tmp_path, tiny_model_dir):
    out = tmp_path / "cli-run"
    args = [
        "eval",
        "--model",
        str(tiny_model_dir),
        "--datasets",
        "humaneval",
        "--limit",
        "3",
        "--think",
        "8",
        "--solve",
        "8",
        "--n",
        "1",
        "--workers",
        "2",
        "--test-time-limit",
        "3",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args, prog_name="e1")
    assert result.exit_code == 0, result.output
    assert "humaneval" in result.output and "avg@n" in result.output
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples["problem_id"].tolist() == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert (samples["reward"] == 0).all() and (samples["tests_passed"] == 0).all()  # a random tiny model
    assert samples["first_failure"].notna().all() and (samples["gold"] == "1 test").all()
    saved = json.loads((out / "config.json").read_text())
    assert (saved["workers"], saved["max_tests"], saved["test_time_limit_s"]) == (2, None, 3.0)


# ---- results written before the code columns ----


def test_a_run_written_before_the_code_columns_resumes(tmp_path, tiny_engine):
    from tests.test_eval import config as math_config

    problems = tmp_path / "toy.jsonl"
    problems.write_text(
        "".join(json.dumps({"id": f"q{i}", "problem": f"{i}+{i}?", "answer": "2"}) + "\n" for i in range(2))
    )
    engine = HFEngine(tiny_engine.model, tiny_engine.tokenizer, tiny_engine.markers, batch_size=4)
    out = tmp_path / "run"
    budgets = (Budget(4, 4), Budget(2, 4))
    evaluate(math_config(out, problems, budgets=budgets, n=1), engine=engine)
    # an interrupted run written before the code columns: the t=2 cell's rows are still to decode
    old = pd.read_parquet(out / "samples.parquet").drop(columns=["tests_passed", "first_failure"])
    old[old["think_budget"] == 4].to_parquet(out / "samples.parquet", index=False)
    samples, _ = evaluate(math_config(out, problems, budgets=budgets, n=1), engine=engine)
    assert len(samples) == 4 and samples["tests_passed"].isna().all() and samples["first_failure"].isna().all()
    assert list(pd.read_parquet(out / "samples.parquet").columns) == SAMPLE_COLUMNS


def test_gold_text_summarises_code_tests():
    assert scoring.gold_text("math", "42") == "42"
    assert scoring.gold_text("code", json.dumps(ADD)) == "2 tests"
