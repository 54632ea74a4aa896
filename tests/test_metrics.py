"""e1.report.metrics: pass@k, maj@k, forced vs natural, unanswered, bootstrap intervals, paired differences."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from e1.report import metrics
from e1.report.metrics import (
    DIFFERENCE_COLUMNS,
    bootstrap_interval,
    majority_correct,
    mode_differences,
    pass_at_k,
    summarize,
    vote_key,
)
from e1.store.results import SUMMARY_COLUMNS
from tests.test_sweep import Loader, problems_file, sweep_config  # noqa: F401 - problems_file is a fixture

NAN = float("nan")


def sample(pid, index, correct, answer=None, forced=False, mode="elastic", tests_passed=NAN, **kw):
    """One samples row with only the columns the metrics read."""
    return (
        dict(
            dataset="d",
            problem_id=pid,
            sample_index=index,
            mode=mode,
            think_budget=8,
            solve_budget=4,
            think_tokens=10,
            solve_tokens=5,
            forced=forced,
            finish_reason="stop",
            correct=bool(correct),
            extracted_answer=answer,
            tests_passed=tests_passed,
        )
        | kw
    )


def test_pass_at_k_unbiased_estimator_by_hand():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a correct one
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_summarize_by_hand():
    rows = []
    # problem p1: 2 of 4 correct; p2: 0 of 4; think tokens 10, solve 5, half forced
    for pid, correct in (("p1", [1, 1, 0, 0]), ("p2", [0, 0, 0, 0])):
        for i, c in enumerate(correct):
            rows.append(sample(pid, i, c, answer="7" if c else "5", forced=i % 2 == 0))
    summary = summarize(pd.DataFrame(rows))
    row = summary.iloc[0]
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert row.problems == 2 and row.samples_per_problem == 4 and row.k == 4
    assert row.accuracy == pytest.approx(0.25)  # 2 of 8 samples, a fraction like every rate in a file
    assert row.pass_at_1 == pytest.approx((0.5 + 0.0) / 2)
    assert row.pass_at_k == pytest.approx((1.0 + 0.0) / 2)
    assert (row.mean_think_tokens, row.mean_solve_tokens, row.mean_total_tokens) == (10, 5, 15)
    assert row.forced_rate == pytest.approx(0.5)
    # resampling 2 problems: {p1, p1} 4/8, {p1, p2} 2/8, {p2, p2} 0/8 with chances 1/4, 1/2, 1/4;
    # each end holds 25% > 2.5% of the mass, so the interval is the extremes
    assert (row.accuracy_ci_low, row.accuracy_ci_high) == (0.0, 0.5)


def test_maj_at_k_votes_on_normalised_answers_first_answer_wins_ties():
    rows = [
        # p1: "7" twice, "5" twice: a tie, "5" came first -> the vote is wrong although 2 of 4 are right
        *(sample("p1", i, a == "7", answer=a) for i, a in enumerate(["5", "7", "7", "5"])),
        # p2: two wrong "3" against one right answer written three ways: normalised, the three are
        # one answer with 3 votes against 2 -> right
        *(
            sample("p2", i, ok, answer=a)
            for i, (a, ok) in enumerate(
                [("3", False), (r"$\dfrac{1}{2}$", True), (r"\frac{1}{2}.", True), ("3", False), (r"\frac{1}{2}", True)]
            )
        ),
        # p3: unanswered samples do not vote: one "4" (right) against none
        *(sample("p3", i, i == 2, answer="4" if i == 2 else None) for i in range(4)),
        # p4: nobody answers: wrong
        *(sample("p4", i, False) for i in range(2)),
    ]
    row = summarize(pd.DataFrame(rows)).iloc[0]
    assert row.maj_at_k == pytest.approx((0 + 1 + 1 + 0) / 4)
    assert row.accuracy == pytest.approx((2 + 3 + 1 + 0) / 15)
    assert row.unanswered_rate == pytest.approx(5 / 15)  # p3: 3 of 4, p4: 2 of 2
    assert row.samples_per_problem == row.k == 2  # the fewest samples any problem has


def test_majority_ties_and_code_keys():
    assert majority_correct(["a", "b", "b", "a"], [True, False, False, True])  # tie: "a" given first
    assert not majority_correct(["b", "a", "b", "a"], [False, True, False, True])
    assert not majority_correct([None, None, None], [False, False, False])
    # code: blank lines and trailing spaces do not split a vote; indentation does
    assert vote_key("def f():\n    return 1  \n\n", code=True) == vote_key("def f():\n    return 1", code=True)
    assert vote_key("def f():\n    return 1", code=True) != vote_key("def f():\nreturn 1", code=True)
    rows = [
        sample("c", i, ok, answer=code, tests_passed=1.0 if ok else 0.0)
        for i, (code, ok) in enumerate([("print(2)", False), ("print(1)\n", True), ("print(1)  \n\n", True)])
    ]
    assert summarize(pd.DataFrame(rows)).iloc[0].maj_at_k == 1.0  # two votes for print(1)


def test_forced_and_natural_split():
    # p1: samples 0, 1 end by themselves (right, right), 2, 3 are forced (wrong, right)
    # p2: sample 0 natural (wrong), 1 forced (wrong), and in truncate mode nothing is forced
    rows = [sample("p1", i, ok, answer="x", forced=i >= 2) for i, ok in enumerate([1, 1, 0, 1])]
    rows += [sample("p2", i, 0, answer="x", forced=i == 1) for i in range(2)]
    rows += [sample("p1", i, 1, answer="x", mode="truncate") for i in range(2)]
    summary = summarize(pd.DataFrame(rows)).set_index("mode")
    elastic, truncate = summary.loc["elastic"], summary.loc["truncate"]
    assert (elastic.natural_samples, elastic.forced_samples) == (3, 3)
    assert elastic.natural_accuracy == pytest.approx(2 / 3)  # p1 s0, p1 s1 right; p2 s0 wrong
    assert elastic.forced_accuracy == pytest.approx(1 / 3)  # p1 s3 right; p1 s2, p2 s1 wrong
    assert elastic.forced_rate == pytest.approx(0.5) and elastic.unanswered_rate == 0.0
    assert (truncate.natural_samples, truncate.forced_samples) == (2, 0)
    assert truncate.natural_accuracy == 1.0 and math.isnan(truncate.forced_accuracy)


def test_bootstrap_interval_by_hand():
    assert bootstrap_interval([3], [4]) == (0.75, 0.75)  # one problem: nothing to resample
    assert bootstrap_interval([1, 1, 1], [2, 2, 2]) == (0.5, 0.5)
    assert bootstrap_interval([0, 1]) == (0.0, 1.0)  # {0,0}, {0,1}, {1,1}: 1/4 of the mass at each end
    assert all(math.isnan(x) for x in bootstrap_interval([]))
    # weights count: problem a has 1 of 1 right, b 0 of 9: the mean of resamples is sum/sum, not
    # the mean of fractions; {a,a} 1.0, {a,b} 0.1, {b,b} 0.0
    assert bootstrap_interval([1, 0], [1, 9]) == (0.0, 1.0)
    assert bootstrap_interval([1, 0], [1, 9], level=0.4) == (0.1, 0.1)  # the middle 40% is all {a,b}


def test_bootstrap_interval_matches_the_normal_approximation():
    # 400 problems, half right, one sample each: standard error sqrt(.5 * .5 / 400) = 0.025, so the
    # 95% interval is about 0.5 ± 1.96 * 0.025 = [0.451, 0.549]
    values = [1, 0] * 200
    low, high = bootstrap_interval(values)
    assert low == pytest.approx(0.451, abs=0.01) and high == pytest.approx(0.549, abs=0.01)
    assert bootstrap_interval(values) == (low, high)  # seeded: the same every time
    assert bootstrap_interval(values, seed=1) != (low, high)
    narrow = bootstrap_interval(values, level=0.5)  # ± 0.674 * 0.025 = ± 0.017
    assert narrow[0] == pytest.approx(0.483, abs=0.006) and narrow[1] == pytest.approx(0.517, abs=0.006)


def test_bootstrap_interval_in_chunks(monkeypatch):
    """Fewer indices per chunk than resamples × units: the same draws in the same order, so the
    interval does not depend on how much memory a chunk may take."""
    values = [1, 0, 0] * 133 + [1]
    whole = bootstrap_interval(values)
    monkeypatch.setattr(metrics, "_CELLS_PER_CHUNK", 400 * 7)  # 7 resamples per chunk, 143 chunks (the last 6)
    assert bootstrap_interval(values) == whole
    monkeypatch.setattr(metrics, "_CELLS_PER_CHUNK", 1)  # at least one resample per chunk
    assert bootstrap_interval(values) == whole


def test_mode_differences_are_paired_over_problems():
    # per problem (2 samples each), elastic − truncate is 0.5 everywhere though the problems differ
    # widely: paired, the interval has no width; each mode's own interval is wide
    elastic, truncate = [[1, 1], [1, 0], [1, 1], [1, 0]], [[1, 0], [0, 0], [1, 0], [0, 0]]
    rows = [
        sample(f"p{p}", i, ok, model="m", mode=mode)
        for mode, table in (("elastic", elastic), ("truncate", truncate))
        for p, oks in enumerate(table)
        for i, ok in enumerate(oks)
    ]
    rows.append(sample("only-elastic", 0, 1, model="m"))  # no partner: left out of the pairs
    samples = pd.DataFrame(rows)
    by = ["model", "dataset", "mode", "think_budget", "solve_budget"]
    differences = mode_differences(samples, by=by)
    assert list(differences.columns) == ["model", *DIFFERENCE_COLUMNS]
    row = differences.iloc[0]
    assert (len(differences), row.model, row["mode"], row.other_mode, row.problems) == (
        1,
        "m",
        "elastic",
        "truncate",
        4,
    )
    assert (row.accuracy, row.other_accuracy, row.accuracy_difference) == (0.75, 0.25, 0.5)
    assert (row.difference_ci_low, row.difference_ci_high) == (0.5, 0.5)
    alone = summarize(samples[samples["problem_id"] != "only-elastic"], by=by).set_index("mode")
    assert alone.loc["truncate", "accuracy_ci_high"] - alone.loc["truncate", "accuracy_ci_low"] >= 0.25

    # the order of first appearance decides which mode comes first; one mode alone gives no rows
    flipped = mode_differences(
        pd.concat([samples[samples["mode"] == "truncate"], samples[samples["mode"] == "elastic"]]), by=by
    ).iloc[0]
    assert (flipped["mode"], flipped.accuracy_difference) == ("truncate", -0.5)
    assert mode_differences(samples[samples["mode"] == "elastic"]).empty


def test_sweep_writes_intervals_and_paired_differences(tmp_path, problems_file, tiny_engine):  # noqa: F811
    from e1.eval.sweep import sweep

    out = tmp_path / "sweep"
    sweep(sweep_config(out, problems_file), load_engine=Loader(tiny_engine))
    differences = pd.read_parquet(out / "differences.parquet")
    assert list(differences.columns) == ["model", *DIFFERENCE_COLUMNS]
    assert len(differences) == 2 * 3  # models × budgets, one pair of modes (elastic before truncate)
    assert set(zip(differences["mode"], differences["other_mode"])) == {("elastic", "truncate")}
    at = differences.groupby("model")["accuracy_difference"]
    # A boxes 2: right on q0, q2 in elastic; truncate never answers -> 2/3 - 0; B boxes 3: 1/3 - 0
    assert at.min()["m/A"] == at.max()["m/A"] == pytest.approx(2 / 3)
    assert at.min()["m/B"] == at.max()["m/B"] == pytest.approx(1 / 3)
    # per problem A's differences are (1, 0, 1): resamples of 3 with all three 0 or all 1 have
    # chances 1/27 and 8/27, both > 2.5%, so the interval is [0, 1]
    a = differences[differences["model"] == "m/A"]
    assert (a["difference_ci_low"] == 0).all() and (a["difference_ci_high"] == 1).all()

    summary = pd.read_parquet(out / "summary.parquet").set_index(["model", "mode"])
    assert summary.loc[("m/A", "elastic"), "maj_at_k"].tolist() == pytest.approx([2 / 3] * 3)
    assert (summary.loc[("m/A", "truncate"), "unanswered_rate"] == 1.0).all()  # thinking never ends
    assert (summary.loc[("m/A", "elastic"), "natural_samples"] == 0).all()  # every sample forced at t
    curves = pd.read_parquet(out / "curves.parquet")
    assert (curves["accuracy_ci_low"] <= curves["accuracy"]).all() and (
        curves["accuracy"] <= curves["accuracy_ci_high"]
    ).all()
    for column in (
        "accuracy_ci_low",
        "accuracy_ci_high",
        "maj_at_k",
        "natural_accuracy",
        "forced_accuracy",
        "unanswered_rate",
    ):
        assert summary[column].dropna().between(0, 1).all(), column  # fractions, not percent


def test_summary_table_shows_the_new_metrics_in_percent():
    from rich.console import Console

    from e1.report.ui import summary_table

    rows = [sample("p1", i, ok, answer="7" if ok else "5", forced=i >= 2) for i, ok in enumerate([1, 1, 0, 0])]
    rows += [sample("p2", i, 0, answer=None if i == 0 else "5", forced=i >= 2) for i in range(4)]
    rows += [sample("p1", i, 1, answer="7", mode="truncate") for i in range(4)]
    rows += [sample("p2", i, 0, answer="5", mode="truncate") for i in range(4)]
    console = Console(width=160, record=True, color_system=None)
    console.print(summary_table(summarize(pd.DataFrame(rows)), title="m"))
    text = console.export_text()
    elastic, elastic_below = next(
        (line, below) for line, below in zip(text.splitlines(), text.splitlines()[1:]) if "elastic" in line
    )  # a row and the line below it
    # avg@n 2/8, its interval (0, 50 %) below; pass@4 1/2; maj@4: p1 tie 7/5, 7 first -> 1/2
    # forced: samples 2, 3 of each problem, all wrong; natural: p1 s0, s1 right of 4; 1 of 8
    # tok/✓: 8 samples x 15 tokens / 2 correct = 60; cut: the 4 forced of 8 (none hit a length limit);
    # unanswered (12.5 % rounds half to even)
    # columns with one value in every row leave the table for its caption: dataset, problems, pass@4, maj@4, t, s
    assert elastic.split() == ["elastic", "8+4", "25.0", "60", "50%", "50%", "50%", "12%"]
    assert "dataset d, probs 2, pass@4 50.0, maj@4 50.0, think 10, solve 5" in " ".join(text.split())
    assert elastic_below.split() == ["0.0–50.0", "✓", "0.0", "✓", "50.0"]
    lines = text.splitlines()
    truncate_below = lines[next(i for i, line in enumerate(lines) if "truncate" in line) + 1]
    # p1 4 of 4, p2 0 of 4: {p1, p1} gives 100 %; nothing forced: no accuracy to show there
    assert truncate_below.split() == ["0.0–100.0", "✓", "–", "✓", "50.0"]
    assert "maj@4" in text and "no ans." in text


def test_pass_at_every_asked_k_by_hand():
    rows = []
    # p1: 1 of 4 correct; p2: 2 of 4. pass@2 = mean(1 - C(3,2)/C(4,2), 1 - C(2,2)/C(4,2)) = mean(1/2, 5/6)
    for pid, correct in (("p1", [1, 0, 0, 0]), ("p2", [1, 1, 0, 0])):
        rows += [sample(pid, i, c, answer=str(c)) for i, c in enumerate(correct)]
    row = summarize(pd.DataFrame(rows), ks=(1, 2, 8)).iloc[0]
    assert row.pass_at_1 == pytest.approx((1 / 4 + 2 / 4) / 2) and row.pass_at_2 == pytest.approx((1 / 2 + 5 / 6) / 2)
    assert math.isnan(row.pass_at_8)  # more than the 4 samples a problem has
    assert list(summarize(pd.DataFrame(rows)).columns)[-1] == "censored_rate"  # no extra columns unless asked


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("0", "--k must be >= 1"),
        ("5", "--k must be <= 4"),
        ("1,x", "whole numbers"),
        ("-1", "whole numbers"),
        ("9" * 30, "whole numbers"),
    ],
)
def test_bad_k_lists_are_refused_naming_k(given, error):
    from e1.errors import ConfigError
    from e1.eval import parse_ks
    from e1.eval.run import EvalConfig

    with pytest.raises(ConfigError, match=error):
        EvalConfig(model="m", datasets=("d",), n=4, ks=parse_ks(given))


def test_eval_and_sweep_report_the_asked_k(tmp_path, problems_file, tiny_model_dir):
    from typer.testing import CliRunner

    from e1.cli.app import app

    common = [
        "--model",
        str(tiny_model_dir),
        "--datasets",
        str(problems_file),
        "--solve",
        "2",
        "-n",
        "2",
        "--temperature",
        "1",
        "--backend",
        "hf",
        "--k",
        "2,1",
    ]
    result = CliRunner().invoke(app, ["eval", *common, "--think", "4", "--out", str(tmp_path / "e")], prog_name="e1")
    assert result.exit_code == 0, result.output
    summary = pd.read_parquet(tmp_path / "e" / "summary.parquet")
    assert list(summary.columns)[-1] == "pass_at_2" and summary["pass_at_2"].equals(summary["pass_at_k"])  # k = n
    result = CliRunner().invoke(app, ["sweep", *common, "--think", "0,4", "--out", str(tmp_path / "s")], prog_name="e1")
    assert result.exit_code == 0, result.output
    assert "pass_at_2" in pd.read_parquet(tmp_path / "s" / "summary.parquet").columns
