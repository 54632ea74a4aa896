"""samples.parquet stores the prompt exactly as the model saw it, once per problem and cell, and the
viewer shows the one of the sample's cell."""

from __future__ import annotations

import pandas as pd

from e1.budget import Budget
from e1.data.prompts import PromptOptions, build_prompt
from e1.engine.base import Mode, Sampling
from e1.eval.run import EvalConfig, evaluate
from e1.view.runs import find_runs
from e1.view.tables import SampleFilter, problem_text


def test_each_cell_stores_the_prompt_the_model_saw_on_its_first_sample(tiny_engine, problems_file, tmp_path):
    options = PromptOptions(system="Be brief.", budget="tale")  # the stated budget makes each cell's prompt differ
    config = EvalConfig(
        model="tiny",
        datasets=(str(problems_file),),
        budgets=(Budget(4, 8), Budget(8, 8)),
        modes=(Mode("elastic"),),
        n=3,
        sampling=Sampling(temperature=0.0),
        out=tmp_path / "run",
        prompt=options,
    )
    evaluate(config, engine=tiny_engine)
    stored = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    problems = {row["id"]: row for row in pd.read_json(problems_file, lines=True, dtype=False).to_dict("records")}
    for row in stored.to_dict("records"):
        if row["sample_index"] != 0:
            assert row["prompt"] is None  # once per problem and cell, not per sample
            continue
        problem = {**problems[row["problem_id"]], "dataset": row["dataset"]}
        expected = build_prompt(
            tiny_engine.tokenizer,
            problem,
            "math",
            options=options,
            budget_tokens=row["think_budget"] + row["solve_budget"],
        )
        assert row["prompt"] == expected and "Be brief." in expected
    assert stored["prompt"].notna().sum() == 5 * 2  # 5 problems × 2 cells

    (run,) = find_runs([tmp_path / "run"])
    for think in (4, 8):
        shown = problem_text(run, "toy", "q1", cell=SampleFilter(mode="elastic", think=think, solve=8))
        assert shown["source"] == "prompt" and str(think + 8) in shown["text"]  # the cell's own stated budget
    assert problem_text(run, "toy", "q1")["source"] == "prompt"  # no cell named: one of the problem's prompts
