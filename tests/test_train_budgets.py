"""Budget-aware training options: budget curricula, length-aware rewards, metrics reporters."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from e1.errors import BudgetError, ConfigError
from e1.grpo.config import TrainConfig
from e1.grpo.curriculum import ThinkBudgets
from e1.rewards.length import LengthShaping
from tests.test_train import contains_char, small, write_problems

# ---- budget curricula ---------------------------------------------------------------------


def test_a_set_is_drawn_per_problem_and_step_deterministically():
    budgets = ThinkBudgets.parse("512,1k,2k")
    assert budgets.choices == (512, 1024, 2048) and budgets.largest == 2048 and budgets.varies
    draws = [budgets.think(seed=0, step=step, problem=problem) for step in range(1, 6) for problem in range(20)]
    assert set(draws) == {512, 1024, 2048}  # 100 draws from 3 values: each appears
    assert draws == [budgets.think(seed=0, step=step, problem=problem) for step in range(1, 6) for problem in range(20)]
    assert draws != [budgets.think(seed=1, step=step, problem=problem) for step in range(1, 6) for problem in range(20)]


def test_a_range_is_drawn_within_its_bounds():
    budgets = ThinkBudgets.parse("4..8")
    draws = {budgets.think(seed=0, step=1, problem=problem) for problem in range(200)}
    assert draws == {4, 5, 6, 7, 8}  # uniform integers, both ends included
    assert ThinkBudgets.parse("1k").think(seed=3, step=9, problem=4) == 1024 and not ThinkBudgets.parse("1k").varies
    assert ThinkBudgets.parse([512, "1k"]).choices == (512, 1024)  # a TOML list


def test_stages_split_the_steps_equally_and_cap_every_draw():
    # 10 steps, 3 stages: stage = (step - 1) * 3 // 10 -> steps 1-4: 0, 5-7: 1, 8-10: 2
    budgets = ThinkBudgets.parse("1k,4k", "4k:2k:1k", steps=10)
    assert [budgets.cap(step) for step in range(1, 11)] == [4096] * 4 + [2048] * 3 + [1024] * 3
    assert {budgets.think(0, 9, problem) for problem in range(20)} == {1024}  # 4k draws capped to 1k
    assert {budgets.think(0, 1, problem) for problem in range(20)} == {1024, 4096}  # uncapped at first


def test_a_linear_ramp_falls_from_the_first_step_to_the_last():
    # 5 steps from 4000 to 2000: 4000 - 2000 * (step - 1) / 4 = 4000, 3500, 3000, 2500, 2000
    budgets = ThinkBudgets.parse("4000", "4000..2000", steps=5)
    assert [budgets.cap(step) for step in range(1, 6)] == [4000, 3500, 3000, 2500, 2000]
    assert ThinkBudgets.parse("8k", "2k..1k").largest == 2048  # the schedule never reaches 8k


@pytest.mark.parametrize(
    ("think", "schedule", "error", "match"),
    [
        ("2k..512", None, ConfigError, "backwards"),
        ("1k", "4k:2k", ConfigError, "above the largest --think"),
        ("512..", None, ConfigError, "cannot read"),
        ("512,,1k", None, BudgetError, "invalid think budget"),
        ("1k", "2k..1k..512", ConfigError, "cannot read"),
    ],
)
def test_bad_curricula_are_refused(think, schedule, error, match):
    with pytest.raises(error, match=match):
        TrainConfig(model="m", data="d", think=think, think_schedule=schedule)


def test_config_budget_is_the_largest_and_budget_for_draws():
    config = TrainConfig(model="m", data="d", think="2,4,6", solve=3, steps=4, think_schedule="6:4")
    assert (config.budget.think, config.budget.solve) == (6, 3)
    assert {config.budget_for(3, problem).think for problem in range(30)} == {2, 4}  # steps 3-4: capped at 4
    assert config.to_json()["think"] == "2,4,6" and config.to_json()["budget"] == {"think": 6, "solve": 3}


def test_rollouts_are_generated_per_budget_group_in_problem_order(tiny_model_dir, tmp_path):
    from e1.engine.base import Completion
    from e1.grpo.rollout import Rollout

    class Recording:  # records one call per budget
        can_sleep = False
        calls: list = []

        def generate(self, prompts, budget, mode, sampling, n=1, seeds=None):
            self.calls.append((budget.think, [p[0] for p in prompts], list(seeds)))
            return [
                Completion(p, j, "", "", 1, budget.think, 1, False, "stop", list(prompts[p]), [False])
                for p in range(len(prompts))
                for j in range(n)
            ]

    config = small(tiny_model_dir, tmp_path / "p.jsonl", tmp_path / "run", think="2,4,6", samples_per_prompt=2)
    rollouts = Rollout(Recording(), [[i] for i in range(8)], config)
    problems = [5, 1, 7, 0, 3, 2]
    completions = rollouts.sample(problems, step=1)
    budgets = {problem: config.budget_for(1, problem).think for problem in problems}
    assert len(set(budgets.values())) > 1  # this draw really mixes budgets
    assert sorted(think for think, _, _ in Recording.calls) == sorted(set(budgets.values()))  # one call per budget
    for think, prompts, _ in Recording.calls:
        assert all(budgets[problem] == think for problem in prompts)
    # back in the order asked, prompt-major: completion i*2+j is sample j of problems[i], at its own budget
    assert [(c.prompt_index, c.token_ids[0], c.think_tokens) for c in completions] == [
        (i, p, budgets[p]) for i, p in enumerate(problems) for _ in range(2)
    ]
    seeds = {problem: seed for _, prompts, call_seeds in Recording.calls for problem, seed in zip(prompts, call_seeds)}
    Recording.calls = []
    Rollout(Recording(), [[i] for i in range(8)], config).sample([3], step=1)
    assert Recording.calls[0][2] == [seeds[3]]  # a problem's seed is its own, whichever budget group it joins


def test_training_with_a_curriculum_records_the_budgets_and_respects_them(tiny_model_dir, tmp_path):
    import pandas as pd

    from e1.grpo.trainer import Trainer, train

    data = write_problems(tmp_path / "problems.jsonl")
    config = small(tiny_model_dir, data, tmp_path / "run", think="2,6", think_schedule="6:2", steps=2, kl_coef=0.0)
    train(config, reward=contains_char)
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    drawn = [sorted({config.budget_for(step, p).think for p in range(8)}) for step in (1, 2)]
    assert drawn[1] == [2]  # stage 2 caps every draw at 2
    assert metrics["think_budget_max"].iloc[1] == metrics["think_budget_min"].iloc[1] == 2
    assert {metrics["think_budget_min"].iloc[0], metrics["think_budget_max"].iloc[0]} <= {2, 6}
    trainer = Trainer.create(small(tiny_model_dir, data, tmp_path / "probe", think="1,5"))
    indices = [0, 1, 2, 3, 4, 5]
    budgets = [trainer.config.budget_for(1, problem).think for problem in indices]
    assert set(budgets) == {1, 5}
    completions = trainer.rollouts.generate(indices, step=1)
    for c in completions:  # every sample thought within its own problem's budget; a cut one used all of it
        assert c.think_tokens <= budgets[c.prompt_index]
        assert not c.forced or c.think_tokens == budgets[c.prompt_index]
    assert {c.think_tokens for c in completions if c.forced} == {1, 5}  # a random model is cut at both


# ---- length-aware rewards -----------------------------------------------------------------


def test_l1_rewards_by_hand():
    exact = LengthShaping.parse("l1-exact")  # r - 0.0003 * |N - n|
    # correct, 400 tokens short of a 1000 target: 1 - 0.0003 * 400 = 0.88; wrong, 200 over... capped at budget: 0 - 0.0003 * 0
    assert exact.shape([1.0, 0.0], [600, 1000], [1000, 1000], [True, True]) == pytest.approx([0.88, 0.0])
    l1_max = LengthShaping.parse("l1-max:alpha=0.001")  # r * clip(0.001 * (N - n) + 0.5, 0, 1)
    # N - n = 200 -> 0.7; N - n = 800 -> 1.3 -> 1; N - n = 0 -> 0.5; wrong -> 0
    assert l1_max.shape([1.0, 1.0, 1.0, 0.0], [800, 200, 1000, 100], [1000] * 4, [True] * 4) == pytest.approx(
        [0.7, 1.0, 0.5, 0.0]
    )
    assert exact.instruction(512) == "Think for 512 tokens." and str(l1_max) == "l1-max:alpha=0.001"


def test_dapo_soft_overlong_penalty_by_hand():
    dapo = LengthShaping.parse("dapo:cache_share=0.25")  # L_max = 100, L_cache = 25: free up to 75 tokens
    # 70 -> 0; 75 -> 0; 85 -> (75 - 85) / 25 = -0.4; 100 -> -1; 110 (over L_max) -> -1
    assert dapo.shape([1.0] * 5, [70, 75, 85, 100, 110], [100] * 5, [True] * 5) == pytest.approx(
        [1.0, 1.0, 0.6, 0.0, 0.0]
    )
    assert dapo.shape([0.0], [90], [100], [False]) == pytest.approx([-0.6])  # composes with a wrong answer
    assert LengthShaping.parse("dapo").instruction(512) is None


def test_cosine_length_reward_by_hand():
    cosine = LengthShaping.parse("cosine")  # long + (short - long) * (1 + cos(pi n / L)) / 2
    # correct (2 at n=0 -> 1 at n=L): n = 0 -> 2; L/3 -> 1 + 1 * 0.75 = 1.75; L -> 1
    # wrong (-10 at n=0 -> 0 at n=L): n = L/3 -> 0 - 10 * 0.75 = -7.5; not finished -> exceed -10
    assert cosine.shape(
        [1.0, 1.0, 1.0, 0.0, 1.0], [0, 30, 90, 30, 40], [90] * 5, [True, True, True, True, False]
    ) == pytest.approx([2.0, 1.75, 1.0, -7.5, -10.0])
    partial = LengthShaping.parse("cosine:wrong_short=-1:exceed=-2")
    assert partial.shape([0.5, 0.0], [0, 10], [10, 10], [True, False]) == pytest.approx([-1.0, -2.0])  # 0.5 < 1: wrong


def test_kimi_length_reward_by_hand_is_relative_to_each_group():
    kimi = LengthShaping.parse("kimi")
    # group 0: lengths 10, 20, 30 -> lambda 0.5, 0, -0.5; group 1: lengths 100, 300 -> 0.5, -0.5
    # correct: r + lambda; wrong: r + min(0, lambda)
    shaped = kimi.shape(
        [1.0, 1.0, 0.0, 0.0, 1.0], [10, 20, 30, 100, 300], [999] * 5, [True] * 5, groups=[0, 0, 0, 1, 1]
    )
    assert shaped == pytest.approx([1.5, 1.0, -0.5, 0.0, 0.5])
    assert kimi.shape([1.0, 0.0], [7, 7], [9, 9], [True, True], groups=[3, 3]) == [1.0, 0.0]  # equal lengths: lambda 0
    assert LengthShaping.parse("kimi:weight=0.2").shape(
        [1.0, 1.0], [1, 3], [9, 9], [True, True], groups=[0, 0]
    ) == pytest.approx([1.1, 0.9])


@pytest.mark.parametrize("seed", range(20))
def test_kimi_never_moves_a_reward_by_more_than_half_and_favours_the_shortest(seed):
    import random

    rng = random.Random(seed)
    size = rng.randint(1, 12)
    rewards = [float(rng.random() < 0.5) for _ in range(size)]
    tokens = [rng.randint(1, 500) for _ in range(size)]
    groups = [rng.randint(0, 2) for _ in range(size)]
    shaped = LengthShaping.parse("kimi").shape(rewards, tokens, [600] * size, [True] * size, groups=groups)
    for r, n, g, value in zip(rewards, tokens, groups, shaped):
        assert -0.5 <= value - r <= 0.5 and (r >= 1.0 or value <= r)  # a wrong answer never gains
        shortest = min(m for m, h in zip(tokens, groups) if h == g)
        if n == shortest and r >= 1.0 and len({m for m, h in zip(tokens, groups) if h == g}) > 1:
            assert value == pytest.approx(1.5)


def test_rollout_cut_zero_truncates_rollouts_and_rewards_a_cut_one_nothing(tiny_model_dir, tmp_path):
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    trainer = Trainer.create(
        small(tiny_model_dir, data, tmp_path / "run", think="4", rollout_cut="zero"),
        reward=lambda completions, answers, **_: [1.0] * len(completions),
    )
    indices = [0, 1, 2, 3]
    completions = trainer.rollouts.generate(indices, step=1)
    assert not any(c.forced for c in completions)  # nothing forced: cut at t + s
    assert all(c.total_tokens <= trainer.config.budget_for(1, 0).total for c in completions)
    scores = trainer.score(indices, completions)
    shaped = trainer.shape(scores, indices, completions, step=1)
    assert shaped.tolist() == [0.0 if c.finish_reason == "length" else 1.0 for c in completions]
    assert any(c.finish_reason == "length" for c in completions)  # a random tiny model runs long
    with pytest.raises(ConfigError, match="unknown rollout_cut"):
        TrainConfig(model="m", data="d", rollout_cut="drop")


@pytest.mark.parametrize(
    ("text", "match", "hint"),
    [
        ("cosin", "unknown length reward 'cosin'", "cosine"),
        ("cosine:exceeds=-1", "unknown option 'exceeds'", "exceed"),
        ("l1-exact:alpha=big", "invalid l1-exact option", "alpha=<number>"),
        ("dapo:cache_share=0", "cache_share must be in", "0.2"),
        ("l1-max:alpha=-1", "alpha must be >= 0", "0.0003"),
    ],
)
def test_bad_length_rewards_are_refused_with_a_hint(text, match, hint):
    with pytest.raises(ConfigError, match=match) as err:
        TrainConfig(model="m", data="d", length_reward=text)
    assert hint in err.value.hint


def test_the_trainer_trains_on_the_shaped_reward(tiny_model_dir, tmp_path):
    import torch

    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    trainer = Trainer.create(
        small(tiny_model_dir, data, tmp_path / "run", think="4,8", length_reward="dapo:cache_share=0.5"),
        reward=contains_char,
    )
    indices = [0, 1, 2, 3]
    completions = trainer.rollouts.generate(indices, step=1)
    scores = trainer.score(indices, completions)
    shaped = trainer.shape(scores, indices, completions, step=1)
    for c, score, value in zip(completions, scores.tolist(), shaped.tolist()):
        total = trainer.config.budget_for(1, indices[c.prompt_index]).total  # t + 4
        expected = score + min(0.0, (total / 2 - c.total_tokens) / (total / 2))  # free up to half the budget
        assert value == pytest.approx(expected)
    assert not torch.equal(scores, shaped)  # random rollouts run long: some are penalised


def test_l1_puts_the_target_length_in_rollout_and_training_prompts(tiny_model_dir, tmp_path):
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    trainer = Trainer.create(
        small(tiny_model_dir, data, tmp_path / "run", think="4,8", length_reward="l1-exact"), reward=contains_char
    )
    indices = [0, 1, 2, 3]
    completions = trainer.rollouts.generate(indices, step=1)
    text = trainer.tokenizer.decode(trainer.batcher.prompt_ids[0])
    assert "Think for" not in text  # the plain prompt
    batches = trainer.plan(indices, completions, __import__("torch").zeros(len(completions)), step=1)
    for mb in (mb for batch in batches for mb in batch):
        for row, prompt in zip(mb.rows[:: mb.group_size], mb.prompt_ids):
            problem = indices[completions[row].prompt_index]
            target = trainer.config.budget_for(1, problem).total  # t + s: 8 or 12
            decoded = trainer.tokenizer.decode(prompt, skip_special_tokens=False)
            assert f"What is {problem} + {problem}?" in decoded and f"Think for {target} tokens." in decoded


# ---- reporters ----------------------------------------------------------------------------


def test_report_to_tensorboard_writes_an_event_file_with_every_step(tiny_model_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (e1[tensorboard])")
    import pandas as pd
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl")
    run = train(small(tiny_model_dir, data, tmp_path / "run", steps=2, report_to="tensorboard"), reward=contains_char)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    metrics = pd.read_parquet(run / "metrics.parquet")
    for name in ("reward_mean", "accuracy", "loss", "mean_think_tokens", "think_budget_mean"):
        logged = events.Scalars(f"train/{name}")
        assert [e.step for e in logged] == [1, 2]
        assert [e.value for e in logged] == pytest.approx(metrics[name].tolist(), rel=1e-6)
    assert "train/eval_accuracy" not in events.Tags()["scalars"]  # NaN (no validation) is not logged


def _wandb_history(path: Path) -> list[dict]:
    """The history rows of an offline W&B run file."""
    from tests.wandb_records import wandb_records

    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for record in wandb_records(path)
        if record.WhichOneof("record_type") == "history"
    ]


def test_report_to_wandb_offline_logs_every_step(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install wandb (e1[wandb]) to test --report-to wandb")
    import pandas as pd

    from e1.grpo.trainer import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    data = write_problems(tmp_path / "problems.jsonl")
    run = train(small(tiny_model_dir, data, tmp_path / "run", steps=2, report_to="wandb"), reward=contains_char)
    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    history: list[dict] = []
    for _ in range(120):  # wandb's service process may still be writing the file after finish() returns
        history = [row for row in _wandb_history(run_file) if "train/reward_mean" in row]
        if len(history) == 2:
            break
        time.sleep(0.5)
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert [row["_step"] for row in history] == [1, 2]
    assert [row["train/reward_mean"] for row in history] == pytest.approx(metrics["reward_mean"].tolist())
    assert all(math.isfinite(row["train/loss"]) for row in history)


def test_unknown_reporter_is_refused():
    with pytest.raises(ConfigError, match="unknown report_to 'tensorbord'") as err:
        TrainConfig(model="m", data="d", report_to="tensorbord")
    assert "tensorboard" in err.value.hint
    assert TrainConfig(model="m", data="d", report_to="none").reporters == ()


def test_command_takes_the_new_options(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from e1.cli.app import app

    data = write_problems(tmp_path / "problems.jsonl")
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(data),
            "--think",
            "2..6",
            "--think-schedule",
            "6:3",
            "--solve",
            "4",
            "--length-reward",
            "cosine",
            "--steps",
            "2",
            "--prompts-per-step",
            "2",
            "--mini-batch-prompts",
            "2",
            "--samples-per-prompt",
            "2",
            "--out",
            "run",
        ],
        prog_name="e1",
    )
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["think"], config["think_schedule"], config["length_reward"]) == ("2..6", "6:3", "cosine")
    help_text = CliRunner().invoke(app, ["train", "--help"], prog_name="e1", env={"COLUMNS": "200"}).output
    for source in ("ThinkPrune", "Aggarwal & Welleck", "DAPO", "Yeo et al.", "Kimi k1.5", "--rollout-cut"):
        assert source in help_text
