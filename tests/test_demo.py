"""The demo: its synthetic task, and the whole pipeline end to end at the smallest scale."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from e1.demo.claims import BEGIN, END, check_claims, claims_markdown, update_readme
from e1.demo.pipeline import TINY, DemoConfig, run_demo
from e1.data.digits_task import LETTERS, RECHECK, DigitSumTask, make_rows
from e1.rewards.scoring import score


def test_traces_compute_the_running_sum_and_rechecks_only_repeat_it():
    task = DigitSumTask()
    rng = random.Random(3)
    for _ in range(50):
        problem, digits = task.problem(rng)
        concise = task.trace(digits, verbose=False, rng=rng)
        assert len(concise) == 3 * len(digits)
        total = 0
        for i, digit in enumerate(digits):  # every step: letter, digit, running sum mod 10
            total = (total + digit) % 10
            assert concise[3 * i : 3 * i + 3] == f"{LETTERS[i]}{digit}{total}"
        verbose = task.trace(digits, verbose=True, rng=rng)
        assert verbose.replace(RECHECK, "").startswith(concise[:3]) and len(verbose) >= len(concise)
        assert len(verbose) - len(concise) == 4 * verbose.count(RECHECK)


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
    for path in ["data/digits.parquet", "data/digits-train.parquet", "models/init/config.json",
                 "sft/metrics.parquet", "e1/metrics.parquet", "eval/base-none/samples.parquet",
                 "eval/e1-none/samples.parquet", "curves/curves.parquet", "curves/curves.png",
                 "curves/summary.parquet", "claims.json"]:
        assert (out / path).is_file(), path
    assert result.base.parent.parent == out / "sft" and (result.base / "model.safetensors").is_file()
    assert result.e1.parent.parent == out / "e1"
    sft = json.loads((out / "sft" / "config.json").read_text())
    grpo = json.loads((out / "e1" / "config.json").read_text())
    assert sft["algo"] == "sft" and grpo["algo"] == "grpo" and grpo["model"] == str(result.base)
    assert grpo["think"] >= result.median_think and grpo["solve"] == 2  # trained at t = ceil(m)
    curves = pd.read_parquet(out / "curves" / "curves.parquet")
    assert set(curves["mode"]) == {"elastic", "truncate"} and curves["model"].nunique() == 3
    cosine = json.loads((out / "cosine" / "config.json").read_text())  # the length-penalty baseline
    assert cosine["length_reward"] == "cosine" and cosine["think"] == 2 * grpo["think"]
    assert str(result.baseline) in set(curves["model"])
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert len(claims) == 5 and all({"claim", "passed"} <= set(c) for c in claims)
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
            out / "eval" / f"{name}-none" / "samples.parquet")


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
