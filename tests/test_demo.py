"""The demo: its synthetic task, and the whole pipeline end to end at the smallest scale."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.data.digits_task import LETTERS, RECHECK, DigitSumTask, make_rows
from e1.demo.claims import BEGIN, END, check_claims, claims_markdown, paired_difference, update_readme
from e1.demo.pipeline import TINY, DemoConfig, run_demo
from e1.rewards.scoring import score


@given(seed=st.integers(0, 2**32 - 1), backward=st.booleans())
@settings(max_examples=200, deadline=None)
def test_traces_compute_the_running_sum_and_rechecks_only_repeat_it(seed, backward):
    task = DigitSumTask()
    rng = random.Random(seed)
    problem, digits = task.problem(rng)
    assert task.min_digits <= len(digits) <= task.max_digits
    assert problem == "".join(f"{LETTERS[i]}{d}" for i, d in enumerate(digits)) + ":"
    concise = task.trace(digits, verbose=False, rng=rng, backward=backward)
    assert len(concise) == 3 * len(digits) <= task.longest_concise_trace
    order = list(reversed(range(len(digits)))) if backward else list(range(len(digits)))
    total = 0
    for step, i in enumerate(order):  # every step: letter, digit, running sum mod 10, each digit once
        total = (total + digits[i]) % 10
        assert concise[3 * step : 3 * step + 3] == f"{LETTERS[i]}{digits[i]}{total}"
    verbose = task.trace(digits, verbose=True, rng=rng, backward=backward)
    assert verbose.replace(RECHECK, "").startswith(concise[:3]) and len(verbose) >= len(concise)
    assert len(verbose) - len(concise) == 4 * verbose.count(RECHECK)
    assert "".join(step for step in _steps(verbose) if not step.startswith(RECHECK)) == concise


def _steps(trace: str) -> list[str]:
    """A trace's steps: 3 characters each, 4 for a re-check."""
    steps, at = [], 0
    while at < len(trace):
        width = 4 if trace[at] == RECHECK else 3
        steps.append(trace[at : at + width])
        at += width
    return steps


def test_a_backward_trace_cut_early_holds_the_answer_more_often():
    """Why adding backward pays under a cut: the first digits often cancel out, so a trace cut
    after its first steps holds the answer far more often backward than forward, at the same length."""
    task = DigitSumTask()
    rng = random.Random(0)
    held = {False: 0, True: 0}
    problems = [task.problem(rng)[1] for _ in range(4000)]
    for digits in problems:
        for backward in held:
            cut = task.trace(digits, verbose=False, rng=rng, backward=backward)[:6]  # two steps
            held[backward] += int(cut[-1]) == sum(digits) % 10
    assert held[True] > 1.5 * held[False]
    rows = make_rows("train", 4000)
    backward = sum(row["completion"][0] != "a" for row in rows) / len(rows)
    assert abs(backward - task.backward_share) < 0.03  # both orders are in the SFT data, backward the rarer


def test_rows_are_deterministic_and_train_excludes_test():
    assert make_rows("test", 20, seed=1) == make_rows("test", 20, seed=1)
    assert make_rows("test", 20, seed=1) != make_rows("test", 20, seed=2)
    test = {row["problem"] for row in make_rows("test", 200)}
    train = make_rows("train", 2000, exclude=test)
    assert not test & {row["problem"] for row in train}
    row = train[0]
    digits = [int(c) for c in row["problem"][1::2] if c.isdigit()]
    assert row["answer"] == str(sum(digits) % 10) and row["completion"].endswith("</think>" + row["answer"])
    assert score("exact", row["completion"], row["answer"]).reward == 1.0


def test_pipeline_runs_every_stage_and_writes_every_file(tmp_path):
    out = tmp_path / "demo"
    result = run_demo(DemoConfig(out=out, scale=TINY))
    for path in [
        "data/digits.parquet",
        "data/digits-train.parquet",
        "models/init/config.json",
        "sft/metrics.parquet",
        "e1/metrics.parquet",
        "eval/base-none/samples.parquet",
        "eval/e1-none/samples.parquet",
        "curves/curves.parquet",
        "curves/curves.png",
        "curves/summary.parquet",
        "claims.json",
    ]:
        assert (out / path).is_file(), path
    assert result.base.parent.parent == out / "sft" and (result.base / "model.safetensors").is_file()
    assert result.e1.parent.parent == out / "e1"
    sft = json.loads((out / "sft" / "config.json").read_text())
    grpo = json.loads((out / "e1" / "config.json").read_text())
    assert sft["algo"] == "sft" and grpo["algo"] == "grpo" and grpo["model"] == str(result.base)
    low, high = map(int, grpo["think"].split(".."))  # t drawn per prompt: from m/2 up to ceil(m) or more,
    assert low == max(1, round(result.median_think / 2)) and grpo["solve"] == 2
    assert high >= max(result.median_think, DigitSumTask().longest_concise_trace)  # every problem can finish
    curves = pd.read_parquet(out / "curves" / "curves.parquet")
    assert set(curves["mode"]) == {"elastic", "truncate"} and curves["model"].nunique() == 3
    cosine = json.loads((out / "cosine" / "config.json").read_text())  # the length-penalty baseline
    assert cosine["length_reward"] == "cosine" and cosine["think"] == 2 * high  # never cut
    assert str(result.baseline) in set(curves["model"])
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert len(claims) == 6 and all({"claim", "passed"} <= set(c) for c in claims)
    against = claims[-1]  # E1 vs the length-penalty baseline at the tightest budget, with its interval
    assert against["against"] == "cosine-length GRPO" and against["ci_low"] <= against["value"] <= against["ci_high"]
    # a rerun resumes: nothing is trained again
    before = (out / "e1" / "metrics.parquet").stat().st_mtime_ns
    run_demo(DemoConfig(out=out, scale=TINY))
    assert (out / "e1" / "metrics.parquet").stat().st_mtime_ns == before


def _curves_and_free_runs(out: Path) -> None:
    """Hand-made results of a demo: base and E1 curves at t = 16 and 32 (m = 32), both unconstrained."""
    rows = []
    for model, acc in (("base", {16: 0.20, 32: 0.50}), ("e1", {16: 0.36, 32: 0.90})):
        for think, value in acc.items():
            rows.append(dict(model=model, mode="elastic", think_budget=think, solve_budget=2, accuracy=value))
            rows.append(dict(model=model, mode="truncate", think_budget=think, solve_budget=2, accuracy=value - 0.1))
    (out / "curves").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(out / "curves" / "curves.parquet")
    for name, think, correct in (("base", 40, [True, True, False, True]), ("e1", 20, [True, True, True, False])):
        (out / "eval" / f"{name}-none").mkdir(parents=True)
        pd.DataFrame({"think_tokens": [think] * 4, "correct": correct}).to_parquet(
            out / "eval" / f"{name}-none" / "samples.parquet"
        )


def test_claims_are_fractions_in_the_file_and_points_in_the_table(tmp_path):
    _curves_and_free_runs(tmp_path)
    claims = check_claims(tmp_path, Path("base"), Path("e1"), median=32)
    saved = json.loads((tmp_path / "claims.json").read_text())["claims"]
    assert saved == claims
    at_half, at_m, shorter, same, elastic_wins = claims
    # t = 16: 0.36 - 0.20 = 0.16 >= 0.10; t = 32: 0.90 - 0.50 = 0.40 >= 0.25
    assert (at_half["base"], at_half["e1"], at_half["passed"]) == (0.2, 0.36, True)
    assert at_half["value"] == pytest.approx(0.16) and at_m["value"] == pytest.approx(0.4) and at_m["passed"]
    # thinking 40 -> 20 tokens: a cut of 0.5; accuracy 3/4 both: a gap of 0
    assert (shorter["unit"], shorter["base"], shorter["e1"], shorter["value"]) == ("tokens", 40.0, 20.0, 0.5)
    assert (same["base"], same["e1"], same["value"], same["passed"]) == (0.75, 0.75, 0.0, True)
    assert elastic_wins["value"] == pytest.approx(0.1) and elastic_wins["passed"]
    table = claims_markdown(claims, median=32)
    assert "| 20 | 36 | 16 | yes |" in table and "| 40 | 20 | 50 | yes |" in table and "| 75 | 75 | 0 | yes |" in table


def test_readme_block_is_replaced_between_markers(tmp_path):
    claims = [{"claim": "c", "unit": "fraction", "base": 0.01, "e1": 0.02, "value": 0.01, "passed": True}]
    block = claims_markdown(claims, median=31.0, seconds=300)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold table\n{END}\noutro\n")
    assert update_readme(readme, block)
    text = readme.read_text()
    assert "old table" not in text and "| c | 1 | 2 | 1 | yes |" in text and text.endswith("outro\n")
    assert "m = 31" in text and "5.0 min" in text
    plain = Path(tmp_path / "plain.md")
    plain.write_text("no markers")
    assert not update_readme(plain, block)


def _samples(correct: dict[str, list[list[bool]]], think: int = 16) -> pd.DataFrame:
    """Sweep samples at one elastic budget: ``correct[model][problem]`` lists its samples' correctness."""
    rows = [
        {
            "model": model,
            "problem_id": f"p{problem}",
            "sample_index": index,
            "mode": "elastic",
            "think_budget": think,
            "solve_budget": 2,
            "correct": value,
        }
        for model, problems in correct.items()
        for problem, values in enumerate(problems)
        for index, value in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_paired_difference_is_the_mean_per_problem_gap():
    # per problem: e1 1.0, 0.5, 0.0; cosine 0.5, 0.5, 0.0 -> gaps 0.5, 0, 0: mean 1/6
    samples = _samples(
        {"e1": [[True, True], [True, False], [False, False]], "cos": [[True, False], [False, True], [False, False]]}
    )
    paired = paired_difference(samples, "e1", "cos")
    assert paired["difference"] == pytest.approx(1 / 6) and paired["problems"] == 3
    assert (paired["accuracy"], paired["other_accuracy"]) == (pytest.approx(0.5), pytest.approx(1 / 3))
    low, high = paired["ci"]
    assert 0 <= low <= 1 / 6 <= high <= 0.5  # resampled gaps are means of {0.5, 0, 0}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.booleans(), min_size=1, max_size=4), st.lists(st.booleans(), min_size=1, max_size=4)),
        min_size=1,
        max_size=30,
    )
)
def test_paired_difference_properties(problems):
    e1 = [a for a, _ in problems]
    other = [b for _, b in problems]
    paired = paired_difference(_samples({"e1": e1, "cos": other}), "e1", "cos")
    means = [sum(a) / len(a) - sum(b) / len(b) for a, b in problems]
    assert paired["difference"] == pytest.approx(sum(means) / len(means))
    low, high = paired["ci"]
    assert min(means) - 1e-9 <= low <= high <= max(means) + 1e-9  # a mean of resampled gaps
    swapped = paired_difference(_samples({"e1": e1, "cos": other}), "cos", "e1")
    assert swapped["difference"] == pytest.approx(-paired["difference"])
    same = paired_difference(_samples({"e1": e1, "cos": e1}), "e1", "cos")
    assert same["difference"] == 0 and same["ci"] == (0, 0)  # one model against itself: no gap, no spread


@pytest.mark.parametrize("better, holds", [(True, True), (False, False)])
def test_claim_against_the_length_penalty_reads_the_tightest_budget(tmp_path, better, holds):
    _curves_and_free_runs(tmp_path)
    wins = [[True, True]] * 30 + [[False, False]] * 10  # E1: 30 of 40 problems
    tight = _samples({"e1": wins, "cos": wins if not better else [[False, False]] * 40}, think=16)
    loose = _samples({"e1": [[False, False]] * 40, "cos": [[True, True]] * 40}, think=32)  # must be ignored
    pd.concat([tight, loose]).to_parquet(tmp_path / "curves" / "samples.parquet")
    claims = check_claims(tmp_path, Path("base"), Path("e1"), median=32, baseline=Path("cos"))
    against = claims[-1]
    assert len(claims) == 6 and "t=16" in against["claim"] and against["passed"] is holds
    assert against["e1"] == 0.75 and against["base"] == (0.0 if better else 0.75)
    assert against["value"] == pytest.approx(0.75 if better else 0.0)
    assert against["ci_low"] <= against["value"] <= against["ci_high"]
    table = claims_markdown(claims, median=32)
    assert (
        f"| 0 | 75 | 75 [{round(100 * against['ci_low'], 1):g}, {round(100 * against['ci_high'], 1):g}] | yes |"
        in table
    ) is better
