"""GRPO training loop: it learns, resumes exactly, checkpoints load, bad input fails early."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e1.errors import ConfigError, DataError, E1Error, ModelError
from e1.grpo.config import TrainConfig, from_flat
from e1.grpo.config_file import build_config, load_config_file

CHAR = "e"  # the trivially learnable reward: 1 when the solution contains this character


def contains_char(completions: list[str], answers: list[str], **columns) -> list[float]:
    return [1.0 if CHAR in text.split("</think>")[-1] else 0.0 for text in completions]


def write_problems(path: Path, count: int = 8, answers: bool = True) -> Path:
    rows = [{"problem": f"What is {i} + {i}?", **({"answer": str(2 * i)} if answers else {})} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def small(model: Path, data: Path, out: Path, **overrides) -> TrainConfig:
    """A config that trains in well under a second per step on a tiny model (flat keys, as in a config file)."""
    values = {
        "model": str(model),
        "data": str(data),
        "out": out,
        "think": 4,
        "solve": 4,
        "steps": 3,
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "mini_batch_prompts": 2,
        "micro_batch": 4,
        "lr": 1e-2,
        "temperature": 1.0,
        "save_every": 1,
        "seed": 0,
    }
    return from_flat(values | overrides)


@pytest.fixture(scope="module")
def resumed_runs(tiny_model_dir, tmp_path_factory):
    """Run A: 3 steps uninterrupted. Run B: 2 steps, then resumed to 3. Both validate at step 3."""
    from e1.grpo.trainer import train

    root = tmp_path_factory.mktemp("runs")
    data = write_problems(root / "problems.jsonl", count=6)  # 4 per step: step 2 crosses an epoch
    common = {"entropy_coef": 0.01, "eval_every": 3, "eval_data": str(data), "eval_limit": 2}
    run_a = train(small(tiny_model_dir, data, root / "a", **common), reward=contains_char)
    train(small(tiny_model_dir, data, root / "b", steps=2, **common), reward=contains_char)
    run_b = train(
        small(tiny_model_dir, data, root / "b", steps=3, resume=True, keep_last=2, **common), reward=contains_char
    )
    return run_a, run_b


def test_learns_a_trivial_reward(tiny_model_dir, tmp_path):
    import pandas as pd

    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl")
    config = small(
        tiny_model_dir,
        data,
        tmp_path / "run",
        steps=30,
        samples_per_prompt=8,
        micro_batch=8,
        kl_coef=0.0,
        save_every=100,
    )
    train(config, reward=contains_char)
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert list(metrics["step"]) == list(range(1, 31))
    first, last = metrics["reward_mean"].head(5).mean(), metrics["reward_mean"].tail(5).mean()
    assert last >= first + 0.3, (first, last)
    assert metrics["forced_rate"].iloc[0] > 0.5  # think=4 cuts a random model's thinking: the marker is forced
    assert (tmp_path / "run" / "checkpoints" / "step_30").is_dir()  # saved at the end


def test_resume_reproduces_the_uninterrupted_run(resumed_runs):
    import pandas as pd

    run_a, run_b = resumed_runs
    a, b = pd.read_parquet(run_a / "metrics.parquet"), pd.read_parquet(run_b / "metrics.parquet")
    assert list(a["step"]) == list(b["step"]) == [1, 2, 3]
    same = [c for c in a.columns if not c.endswith("_s")]  # everything but wall-clock seconds
    for column in same:
        assert a[column].tolist() == pytest.approx(b[column].tolist(), abs=1e-6, nan_ok=True), column
    assert a["loss"].iloc[2] != 0.0 and not math.isnan(a["kl"].iloc[2])  # the compared step really trained
    assert json.loads((run_b / "config.json").read_text())["steps"] == 3


def test_checkpoints_are_model_folders_that_eval_loads(resumed_runs, tmp_path):
    from e1.budget import Budget
    from e1.engine.base import Sampling
    from e1.engine.hf.hf_engine import HFEngine
    from e1.eval.run import EvalConfig, evaluate
    from e1.grpo.trainer import checkpoints

    run_a, run_b = resumed_runs
    assert [p.name for p in checkpoints(run_a)] == ["step_1", "step_2", "step_3"]
    assert [p.name for p in checkpoints(run_b)] == ["step_2", "step_3"]  # keep_last=2
    step_3 = run_a / "checkpoints" / "step_3"
    assert (step_3 / "model.safetensors").is_file() and (step_3 / "trainer_state.pt").is_file()
    engine = HFEngine.load(str(step_3))
    data = write_problems(tmp_path / "eval.jsonl", count=2)
    config = EvalConfig(
        model=str(step_3),
        datasets=(str(data),),
        budgets=(Budget(4, 4),),
        sampling=Sampling(temperature=0),
        out=tmp_path / "eval",
    )
    samples, summary = evaluate(config, engine=engine)
    assert len(samples) == 2 and len(summary) == 1


def test_validation_runs_during_training(resumed_runs):
    import pandas as pd

    run_a, _ = resumed_runs
    assert (run_a / "eval" / "step_3" / "summary.parquet").is_file()
    metrics = pd.read_parquet(run_a / "metrics.parquet")
    assert math.isnan(metrics["eval_accuracy"].iloc[0]) and not math.isnan(metrics["eval_accuracy"].iloc[2])


def test_forced_tokens_mask_removes_forced_positions_from_the_loss(tiny_model_dir, tmp_path):
    from e1.grpo.core import group_advantages
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    masks = {}
    for option in ("train", "mask"):
        config = small(tiny_model_dir, data, tmp_path / option, forced_tokens=option, kl_coef=0.0)
        trainer = Trainer.create(config)
        indices = trainer.next_problems(config.prompts_per_step)
        completions = trainer.rollouts.generate(indices, step=1)
        advantages = group_advantages(trainer.score(indices, completions), config.samples_per_prompt)
        batches = trainer.plan(indices, completions, advantages, step=1)
        masks[option] = sum(int(mb.mask.sum()) for batch in batches for mb in batch)
        forced = sum(sum(c.forced_mask) for c in completions)
        total = sum(len(c.token_ids) for c in completions)
    assert forced > 0  # think=4 forces the end marker on the random model
    assert masks["train"] == total  # every completion token gets gradient
    assert masks["mask"] == total - forced  # ... except the forced markers


def planned_step(trainer):
    """Step 1's problems, rollouts and mini-batches, as ``Trainer.step`` plans them before its update."""
    from e1.grpo.core import group_advantages

    indices = trainer.next_problems(trainer.config.prompts_per_step)
    completions = trainer.rollouts.generate(indices, step=1)
    advantages = group_advantages(trainer.score(indices, completions), trainer.config.samples_per_prompt)
    return indices, completions, trainer.plan(indices, completions, advantages, step=1)


def one_by_one_log_probs(model, prompt: list[int], completion: list[int]):
    """The plain reference: one unpadded sequence, one full forward, its completion's log-probs."""
    import torch

    from e1.grpo.core import token_log_probs

    ids = torch.tensor([prompt + completion])  # [1, P+C]
    logits = model(input_ids=ids).logits[:, len(prompt) - 1 : -1]  # [1, C, V]  position P-1+c predicts token c
    return token_log_probs(logits, torch.tensor([completion]))[0]  # [C]


@pytest.mark.parametrize("micro_batch, group_size", [(8, 4), (2, 1)])  # whole groups share a prompt; split ones cannot
def test_completion_log_probs_match_full_forwards(tiny_model_dir, tmp_path, micro_batch, group_size):
    import torch

    from e1.grpo.core import token_log_probs
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    config = small(tiny_model_dir, data, tmp_path / "run", micro_batch=micro_batch, kl_coef=0.0)
    trainer = Trainer.create(config, reward=contains_char)
    indices, completions, batches = planned_step(trainer)
    micro_batches = [mb for batch in batches for mb in batch]
    assert {mb.group_size for mb in micro_batches} == {group_size}
    trainer.fill_log_probs(batches, trainer.model, "old_log_probs")
    for mb in micro_batches:
        logits = trainer.completion_logits(trainer.model, mb)  # [B, C, V]  with grad, as in the update
        log_probs = token_log_probs(logits, mb.completion_ids)  # [B, C]
        assert log_probs.requires_grad
        # the no-grad pass gives the same numbers: why the first mini-batch can skip it
        torch.testing.assert_close(mb.old_log_probs, log_probs.detach(), rtol=0, atol=1e-6)
        for b, row in enumerate(mb.rows):
            c = completions[row]
            expected = one_by_one_log_probs(
                trainer.model, trainer.prompt_ids[indices[c.prompt_index]], list(c.token_ids)
            )
            torch.testing.assert_close(log_probs[b, : len(expected)].detach(), expected.detach(), rtol=0, atol=1e-5)
            assert not mb.mask[b, len(expected) :].any()  # right padding never enters the loss


def test_one_mini_batch_per_step_needs_no_old_log_prob_pass(tiny_model_dir, tmp_path):
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl")
    config = small(tiny_model_dir, data, tmp_path / "run", mini_batch_prompts=4, kl_coef=0.0, save_every=100)
    trainer = Trainer.create(config, reward=contains_char)
    calls = []
    original = trainer.completion_logits
    trainer.completion_logits = lambda model, mb: calls.append(mb) or original(model, mb)
    row = trainer.step()
    assert len(calls) == 4  # 16 completions / micro-batch 4: the update's forwards only
    # old log-probs are the update's own, detached: ratio 1 everywhere, so nothing is clipped
    assert row["clip_fraction"] == 0.0 and row["old_logprob_s"] < 1e-3


def test_ranks_of_one_vllm_engine_decode_together_and_keep_their_own(tiny_model_dir, tmp_path):
    """tp=2 over 4 ranks: rank 1 shares an engine with rank 0, submits both shards, keeps the second."""
    import dataclasses

    from e1.engine.base import Completion
    from e1.grpo.rollout import Rollout

    class Recording:  # a vLLM-like engine that echoes its prompts
        can_sleep = False

        def generate(self, prompts, budget, mode, sampling, n=1, seeds=None):
            self.prompts, self.seeds = prompts, seeds
            return [
                Completion(p, j, "", "", 1, 0, 1, False, "stop", list(prompts[p]), [False])
                for p in range(len(prompts))
                for j in range(n)
            ]

    config = small(
        tiny_model_dir,
        tmp_path / "p.jsonl",
        tmp_path / "run",
        prompts_per_step=8,
        mini_batch_prompts=8,
        samples_per_prompt=2,
        backend="vllm",
        tp=2,
    )
    rollouts = Rollout(Recording(), [[i] for i in range(8)], config, rank=1, world=4, tp=2)
    problems = [7, 6, 5, 4, 3, 2, 1, 0]
    mine = problems[1::4]  # [6, 2]
    completions = rollouts.generate(mine, step=1, problems=problems)
    assert rollouts.engine.prompts == [[7], [3], [6], [2]]  # rank 0's shard, then rank 1's
    # each problem's seed is its own: the same as a one-rank run would give problem 3 at step 1
    alone = Rollout(Recording(), [[i] for i in range(8)], config, rank=0, world=1, tp=1)
    alone.generate([3], step=1, problems=[3])
    assert rollouts.engine.seeds[1] == alone.engine.seeds[0] and len(set(rollouts.engine.seeds)) == 4
    assert [(c.prompt_index, c.token_ids) for c in completions] == [(0, [6]), (0, [6]), (1, [2]), (1, [2])]
    assert dataclasses.replace(rollouts, rank=2).peers == [2, 3]


@pytest.fixture(scope="module")
def reason_model_dir(tmp_path_factory):
    """A tiny model whose thinking markers are <reason> and </reason> (its tokenizer has no </think>)."""
    from e1.models.tiny import DEFAULT_CORPUS, build_tiny_model, build_tokenizer

    tokenizer = build_tokenizer(
        DEFAULT_CORPUS,
        opens_thinking=False,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<reason>", "</reason>"],
    )
    return build_tiny_model(tmp_path_factory.mktemp("models") / "reason", tokenizer=tokenizer)


def test_training_scores_a_custom_marker_model_exactly_like_eval(reason_model_dir, tmp_path):
    """Bug: the trainer joined completions with the model's own end marker, which no reward splits
    on, so with --think-end "</reason>" every training reward was 0 while eval scored 1."""
    import dataclasses

    from e1.engine.base import Completion
    from e1.engine.spec import EngineSpec
    from e1.eval.run import EvalConfig, evaluate
    from e1.grpo.trainer import Trainer

    # thinking closed by the model's </reason> (Completion keeps the texts apart), then the right answer
    right = Completion(
        0, 0, "2 + 2 makes", r" so \boxed{4}", 3, 3, 4, False, "stop", [1, 2, 3], [False] * 3, closed=True
    )

    class Answering:  # an engine whose every sample is `right`
        def __init__(self, engine):
            self.tokenizer, self.markers = engine.tokenizer, engine.markers

        def generate(self, prompts, budget, mode, sampling, n=1, progress=None, seeds=None):
            return [
                dataclasses.replace(right, prompt_index=p, sample_index=j)
                for p in range(len(prompts))
                for j in range(n)
            ]

    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"problem": "What is 2 + 2?", "answer": "4"}) + "\n")
    markers = {"think_start": "<reason>", "think_end": "</reason>"}
    trainer = Trainer.create(small(reason_model_dir, data, tmp_path / "run", kl_coef=0.0, **markers))
    assert trainer.engine.markers.end_text == "</reason>"
    assert trainer.score([0], [right]).tolist() == [1.0]
    config = EvalConfig(
        model=str(reason_model_dir), datasets=(str(data),), out=tmp_path / "eval", engine=EngineSpec(**markers)
    )
    samples, _ = evaluate(config, engine=Answering(trainer.engine))
    assert samples["reward"].tolist() == [1.0]


def test_vllm_settings_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="backend"):
        build_config(model="m", data="d", backend="vlm")
    with pytest.raises(ConfigError, match="gpu-memory-utilization"):
        build_config(model="m", data="d", gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="tp"):
        build_config(model="m", data="d", tp=0)
    with pytest.raises(ConfigError, match="--backend openai cannot train"):  # a backend eval takes, training not
        build_config(model="m", data="d", backend="openai")
    with pytest.raises(ConfigError, match="unknown dtype 'auto'"):  # eval's default; training names its dtype
        build_config(model="m", data="d", dtype="auto")


# ---- bad input: one E1Error before any weights load ----------------------------------------------


@pytest.fixture
def no_weights(monkeypatch):
    """Fail the test if the trainer gets as far as loading weights."""
    import e1.engine.hf.hf_engine

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded before the input was checked")

    monkeypatch.setattr(e1.engine.hf.hf_engine, "load_model", refuse)


def test_dataset_without_answers_is_refused(tiny_model_dir, tmp_path, no_weights):
    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl", answers=False)
    with pytest.raises(DataError):
        train(small(tiny_model_dir, data, tmp_path / "run"))


def test_blank_answer_is_refused(tiny_model_dir, tmp_path, no_weights):
    import pandas as pd

    from e1.grpo.trainer import train

    frame = pd.DataFrame(
        {
            "id": ["a", "b"],
            "dataset": "p",
            "problem": ["1+1?", "2+2?"],
            "answer": ["2", ""],
            "task": "math",
            "task_version": 1,
        }
    )
    frame.to_parquet(tmp_path / "p.parquet")
    with pytest.raises(DataError, match="no answer"):
        train(small(tiny_model_dir, tmp_path / "p.parquet", tmp_path / "run"))


def test_prompts_per_step_must_divide_into_mini_batches(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="not divisible"):
        small(tiny_model_dir, tmp_path / "p.jsonl", tmp_path / "run", prompts_per_step=6, mini_batch_prompts=4)


def test_existing_run_needs_resume(tiny_model_dir, tmp_path, no_weights):
    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="--resume"):
        train(small(tiny_model_dir, data, tmp_path / "run"))


def test_model_folder_without_tokenizer_is_refused(tiny_model_dir, tmp_path, no_weights):
    from e1.grpo.trainer import train

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, bare / name)
    data = write_problems(tmp_path / "problems.jsonl")
    with pytest.raises(ModelError, match="tokenizer"):
        train(small(bare, data, tmp_path / "run"))


def test_budget_beyond_context_is_refused(tiny_model_dir, tmp_path, no_weights):
    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl")  # the tiny model's context is 2048
    with pytest.raises(ConfigError, match="exceeds the model's context of 2048"):
        train(small(tiny_model_dir, data, tmp_path / "run", think="1.5k", solve="512"))


# ---- config files and the command -------------------------------------------------------------


def test_config_file_keys_and_flag_overrides(tmp_path):
    (tmp_path / "t.toml").write_text('model = "m"\ndata = "d"\nsteps = 7\nthink = "2k"\n')
    config = build_config(tmp_path / "t.toml", steps=3, lr=None)
    assert (config.steps, config.budget.think, config.lr) == (3, 2048, 1e-6)  # flag > file > default
    (tmp_path / "t.yaml").write_text("model: m\ndata: d\nmini_batch_prompts: 32\n")
    assert build_config(tmp_path / "t.yaml").optimizer_steps_per_step == 4  # 128 / 32


def test_unknown_config_file_key_names_the_closest(tmp_path):
    (tmp_path / "t.toml").write_text('model = "m"\ndata = "d"\nstep = 7\n')
    with pytest.raises(ConfigError, match="'step'") as err:
        load_config_file(tmp_path / "t.toml")
    assert "steps" in err.value.hint


def test_defaults_are_the_paper_recipe():
    config = TrainConfig(model="m", data="d")
    assert (config.budget.think, config.budget.solve, config.prompts_per_step, config.samples_per_prompt) == (
        1024,
        1024,
        128,
        8,
    )
    assert (config.lr, config.kl_coef, config.temperature, config.optimizer_steps_per_step) == (1e-6, 0.001, 0.6, 2)


def _invoke(*args):
    from typer.testing import CliRunner

    from e1.cli.app import app

    return CliRunner().invoke(app, ["train", *args], prog_name="e1")


def test_command_help_has_an_example():
    result = _invoke("--help")
    assert result.exit_code == 0 and "e1 train --model" in result.output


def test_command_trains_and_writes_the_run(tiny_model_dir, tmp_path):
    data = write_problems(tmp_path / "problems.jsonl")
    (tmp_path / "t.toml").write_text(
        f'model = "{tiny_model_dir}"\ndata = "{data}"\nthink = 4\nsolve = 4\n'
        "prompts_per_step = 2\nmini_batch_prompts = 2\nsamples_per_prompt = 2\n"
    )
    result = _invoke("--config", str(tmp_path / "t.toml"), "--steps", "1", "--out", "run")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["steps"] == 1 and config["prompts_per_step"] == 2
    assert (tmp_path / "run" / "checkpoints" / "step_1" / "config.json").is_file()


def test_command_module_does_not_import_torch():
    code = "import sys, e1.commands.train; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_errors_are_e1_errors():
    assert issubclass(ModelError, E1Error) and issubclass(DataError, E1Error)


def test_malformed_config_file_is_one_error(tmp_path):
    (tmp_path / "t.toml").write_text("model = \n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config_file(tmp_path / "t.toml")
