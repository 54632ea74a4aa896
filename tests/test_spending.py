"""How a budget is spent: tokens per correct answer, censored samples, the area under a curve
and each problem's smallest solving budget, on samples whose values are derived by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.report.metrics import summarize
from e1.report.spending import area, curve_areas, solving_budgets


def rows(problem, think, solve, outcomes, think_tokens, forced=False, finish="stop", mode="elastic"):
    """One cell's samples of one problem: ``outcomes`` their correctness in sample order."""
    return [
        dict(
            dataset="d",
            problem_id=problem,
            sample_index=i,
            mode=mode,
            think_budget=think,
            solve_budget=solve,
            think_tokens=think_tokens,
            solve_tokens=10,
            forced=forced,
            finish_reason=finish,
            extracted_answer="1" if ok else "2",
            correct=ok,
            tests_passed=math.nan,
        )
        for i, ok in enumerate(outcomes)
    ]


def frame(*groups):
    return pd.DataFrame([row for group in groups for row in group])


def test_tokens_per_correct_and_censored_rate_of_a_cell():
    samples = frame(
        rows("p1", 64, 16, [True, False], 54, forced=True),  # 2 samples of 64 tokens, cut at t
        rows("p2", 64, 16, [True, True], 30, finish="length"),
    )  # 2 of 40, cut at s
    [cell] = summarize(samples).to_dict("records")
    assert cell["tokens_per_correct"] == pytest.approx((2 * 64 + 2 * 40) / 3)  # 208 tokens, 3 correct
    assert cell["censored_rate"] == 1.0
    none_right = frame(rows("p1", 64, 16, [False], 54))
    [cell] = summarize(none_right).to_dict("records")
    assert math.isnan(cell["tokens_per_correct"]) and cell["censored_rate"] == 0.0


def test_the_area_is_the_mean_accuracy_over_the_log_token_range():
    # cells at 6 and 30 mean tokens (+10 solution): x = log2(16) = 4 and log2(64) = 6 (hand-derived)
    samples = frame(
        rows("p1", 16, 16, [False, False], 6),
        rows("p2", 16, 16, [True, False], 6),
        rows("p1", 64, 16, [True, True], 54),
        rows("p2", 64, 16, [True, False], 54),
    )
    [curve] = curve_areas(samples, resamples=200).to_dict("records")
    # accuracy 0.25 at x=4, 0.75 at x=6: trapezoid (0.25 + 0.75) / 2 * 2, over a span of 2 -> 0.5
    assert curve["auc"] == pytest.approx(0.5) and curve["points"] == 2 and curve["problems"] == 2
    assert (curve["min_tokens"], curve["max_tokens"]) == pytest.approx((16, 64))
    assert curve["auc_ci_low"] <= 0.5 <= curve["auc_ci_high"]


def test_one_point_has_no_area():
    [curve] = curve_areas(frame(rows("p1", 16, 16, [True], 6)), resamples=50).to_dict("records")
    assert math.isnan(curve["auc"]) and math.isnan(curve["auc_ci_low"])


def test_b_star_is_the_smallest_budget_solving_a_problem_more_often_than_not():
    samples = frame(
        rows("p1", 16, 16, [True, False], 6),
        rows("p1", 64, 16, [True, True], 54, forced=True),
        rows("p2", 16, 16, [False, False], 6, forced=True),
        rows("p2", 64, 16, [False, True], 54),
        rows("p3", 16, 16, [False, False], 6),
        rows("p3", 64, 16, [False, False], 54),
    )
    table = solving_budgets(samples).set_index("problem_id")
    assert table.loc["p1", "b_star"] == 32 and table.loc["p1", "b_star_think"] == 16  # 1/2 solved at 16+16
    assert table.loc["p2", "b_star"] == 80 and table.loc["p2", "censored"] == 2
    assert pd.isna(table.loc["p3", "b_star"]) and table.loc["p3", "samples"] == 4


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(0, 1)), min_size=2, max_size=12))
def test_the_area_lies_within_the_accuracies_it_averages(points):
    x, y = zip(*points)
    value = area(x, y)
    if max(x) > min(x):
        assert min(y) - 1e-9 <= value <= max(y) + 1e-9
    else:
        assert math.isnan(value)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_areas_and_b_star_agree_with_the_cells_they_come_from(problems, samples_per_problem, seed):
    rng = np.random.default_rng(seed)
    budgets = [(16, 16), (64, 16), (256, 16)]
    groups = [
        rows(f"p{p}", t, s, list(rng.random(samples_per_problem) < 0.5), int(rng.integers(1, t + 1)))
        for p in range(problems)
        for t, s in budgets
    ]
    samples = frame(*groups)
    [curve] = curve_areas(samples, resamples=50).to_dict("records")
    accuracies = samples.groupby("think_budget")["correct"].mean()
    if not math.isnan(curve["auc"]):
        assert accuracies.min() - 1e-9 <= curve["auc"] <= accuracies.max() + 1e-9
    for row in solving_budgets(samples).itertuples():
        cells = samples[samples["problem_id"] == row.problem_id].groupby("think_budget")["correct"].mean()
        solving = [t + 16 for t, share in cells.items() if share >= 0.5]
        assert (row.b_star if not pd.isna(row.b_star) else None) == (min(solving) if solving else None)


def test_the_sweep_table_shows_auc_with_its_interval_and_b_star_in_80_columns():
    import pandas as pd
    from rich.console import Console

    from e1.report.curve_tables import spending_table

    areas = pd.DataFrame(
        [
            dict(
                model="m/a",
                dataset="aime",
                mode="elastic",
                points=3,
                problems=3,
                min_tokens=10,
                max_tokens=900,
                auc=0.4321,
                auc_ci_low=0.3,
                auc_ci_high=0.55,
            ),
            dict(
                model="m/a",
                dataset="aime",
                mode="soft:start=0.5:strength=8",
                points=1,
                problems=3,
                min_tokens=10,
                max_tokens=10,
                auc=float("nan"),
                auc_ci_low=float("nan"),
                auc_ci_high=float("nan"),
            ),
        ]
    )
    problems = pd.DataFrame(
        [
            dict(
                model="m/a",
                dataset="aime",
                mode="elastic",
                problem_id=p,
                b_star=b,
                b_star_think=b,
                censored=c,
                samples=4,
            )
            for p, b, c in (("p1", 1024, 0), ("p2", 3072, 2), ("p3", None, 4))
        ]
        + [
            dict(
                model="m/a",
                dataset="aime",
                mode="soft:start=0.5:strength=8",
                problem_id="p1",
                b_star=None,
                b_star_think=None,
                censored=1,
                samples=4,
            )
        ]
    ).astype({"b_star": "Int64"})
    console = Console(width=80, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(spending_table(areas, problems))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    elastic = next(line for line in lines if " elastic " in line).split()
    # AUC 43.2 [30.0, 55.0]; solved 2 of 3; median b* of 1k and 3k = 2k; cut 6 of 12 samples
    assert elastic == ["aime", "elastic", "43.2", "[30.0,", "55.0]", "2/3", "2k", "50%"]
    soft = next(line for line in lines if "soft" in line).split()
    assert soft == ["aime", "soft:start=0.5:strength=8", "–", "0/1", "–", "25%"]
