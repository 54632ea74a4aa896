"""`e1 train --rollout-chunks N`: the step's rollout in chunks of whole prompts, chunk k scored
while chunk k + 1 generates; nothing trained on changes, and the timings say what was hidden."""

from __future__ import annotations

import math
import threading
import time

import pytest

from e1.grpo.rollout import Rollout, rollout_chunks
from tests.test_train import contains_char, small, write_problems


def test_chunks_are_blocks_of_the_step_cut_alike_on_every_rank():
    problems = list(range(11, -1, -1))  # 12 problems, 2 ranks: 6 positions per rank
    chunks = [rollout_chunks(problems, rank, world=2, count=3) for rank in (0, 1)]
    assert (
        [c.problems for c in chunks[0]]
        == [[11, 10, 9, 8], [7, 6, 5, 4], [3, 2, 1, 0]]
        == [c.problems for c in chunks[1]]
    )
    assert [(c.first, c.indices) for c in chunks[0]] == [(0, [11, 9]), (2, [7, 5]), (4, [3, 1])]
    assert [(c.first, c.indices) for c in chunks[1]] == [(0, [10, 8]), (2, [6, 4]), (4, [2, 0])]
    # uneven: 4 positions in 3 chunks; more chunks than positions: one position each
    assert [c.indices for c in rollout_chunks([5, 6, 7, 8], 0, 1, 3)] == [[5], [6], [7, 8]]
    assert [c.problems for c in rollout_chunks([5, 6, 7, 8], 1, 2, 5)] == [[5, 6], [7, 8]]
    assert [c.indices for c in rollout_chunks([5, 6, 7, 8], 0, 1, 1)] == [[5, 6, 7, 8]]


class Recording:  # a vLLM-like engine that echoes its prompts and records each call's
    can_sleep = False

    def __init__(self):
        self.calls = []

    def generate(self, prompts, budget, mode, sampling, n=1, seeds=None):
        from e1.engine.base import Completion

        self.calls.append(([list(p) for p in prompts], list(seeds)))
        return [
            Completion(p, j, "", "", 1, 0, 1, False, "stop", list(prompts[p]), [False])
            for p in range(len(prompts))
            for j in range(n)
        ]


def test_ranks_of_one_engine_submit_the_same_requests_per_chunk(tiny_model_dir, tmp_path):
    """tp=2 over 4 ranks: ranks 0 and 1 make the same generate calls chunk by chunk, and each
    keeps what one unchunked call gives it, in the same order."""
    import dataclasses

    config = small(
        tiny_model_dir,
        tmp_path / "p.jsonl",
        tmp_path / "run",
        prompts_per_step=8,
        mini_batch_prompts=8,
        samples_per_prompt=2,
        backend="vllm",
        tp=2,
        rollout_chunks=2,
    )
    problems = [7, 6, 5, 4, 3, 2, 1, 0]
    kept, calls = {}, {}
    for rank in (0, 1):
        rollouts = Rollout(Recording(), [[i] for i in range(8)], config, rank=rank, world=4, tp=2)
        result = rollouts.generate_scored(
            problems[rank::4], 1, problems, score=lambda drawn: [c.token_ids for c in drawn]
        )
        kept[rank], calls[rank] = result, rollouts.engine.calls
        whole = dataclasses.replace(rollouts, engine=Recording()).generate(problems[rank::4], 1, problems)
        assert [(c.prompt_index, c.token_ids) for c in result.completions] == [
            (c.prompt_index, c.token_ids) for c in whole
        ]
    assert calls[0] == calls[1] and [prompts for prompts, _ in calls[0]] == [[[7], [6]], [[3], [2]]]
    assert [(c.prompt_index, c.token_ids) for c in kept[1].completions] == [(0, [6]), (0, [6]), (1, [2]), (1, [2])]
    assert kept[1].scores == [[[6], [6]], [[2], [2]]]  # each chunk scored on its own


@pytest.fixture(scope="module")
def chunked_runs(tiny_model_dir, tmp_path_factory):
    """Two steps with --rollout-chunks 1 and 3 (4 prompts: chunks of 1, 1, 2), recording what each
    step planned its update from and what the reward saw."""
    from e1.grpo.trainer import Trainer, train

    root = tmp_path_factory.mktemp("chunked")
    data = write_problems(root / "problems.jsonl", count=6)
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        original = Trainer.plan
        for chunks in (1, 3):
            planned, scored = [], []

            def plan(self, indices, completions, advantages, step, planned=planned):
                planned.append(
                    (
                        list(indices),
                        [(c.prompt_index, list(c.token_ids), c.finish_reason) for c in completions],
                        advantages.tolist(),
                    )
                )
                return original(self, indices, completions, advantages, step)

            def reward(completions, answers, scored=scored, **columns):
                scored.append(list(completions))
                return contains_char(completions, answers)

            patch.setattr(Trainer, "plan", plan)
            out = train(
                small(tiny_model_dir, data, root / f"chunks{chunks}", steps=2, kl_coef=0.01, rollout_chunks=chunks),
                reward=reward,
            )
            runs[chunks] = (out, planned, scored)
    return runs


def test_chunked_rollouts_train_exactly_like_one_call(chunked_runs):
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM

    (one, planned_one, scored_one), (three, planned_three, scored_three) = chunked_runs[1], chunked_runs[3]
    assert len(scored_one) == 2 and len(scored_three) == 6  # one reward call per chunk: 3 per step
    assert [text for call in scored_three for text in call] == [text for call in scored_one for text in call]
    assert planned_three == planned_one  # the same problems, token ids, order and advantages
    assert len({tuple(ids) for _, completions, _ in planned_one for _, ids, _ in completions}) > 4  # really sampled
    a, b = pd.read_parquet(one / "metrics.parquet"), pd.read_parquet(three / "metrics.parquet")
    for column in (c for c in a.columns if not c.endswith("_s")):
        assert a[column].tolist() == pytest.approx(b[column].tolist(), abs=0, nan_ok=True), column
    weights = [
        AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step_2").state_dict() for run in (one, three)
    ]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    initial = AutoModelForCausalLM.from_pretrained(one / "checkpoints" / "step_1").state_dict()
    assert not all(torch.equal(initial[name], weights[0][name]) for name in initial)  # step 2 did change them


def test_metrics_have_the_hidden_scoring_column(chunked_runs):
    import pandas as pd

    for out, _, _ in chunked_runs.values():
        metrics = pd.read_parquet(out / "metrics.parquet")
        assert {"rollout_s", "reward_s", "reward_busy_s"} <= set(metrics.columns)
        assert (metrics["reward_busy_s"] >= metrics["reward_s"]).all() and (metrics["reward_busy_s"] > 0).all()


class ScoredTooLate(Exception):
    """The reward waited for the next chunk's generation, which never started."""


def slow_trainer(tiny_model_dir, tmp_path, chunks: int, reward_of, generate_s: float = 0.0):
    """A trainer for one step of 3 prompts x 4 samples whose engine takes ``generate_s`` per
    prompt, scored by ``reward_of(started)``: ``started`` holds an Event per generate call, set as
    the call starts."""
    from e1.grpo.trainer import Trainer

    data = write_problems(tmp_path / "problems.jsonl", count=3)
    config = small(
        tiny_model_dir,
        data,
        tmp_path / f"run{chunks}",
        steps=1,
        prompts_per_step=3,
        mini_batch_prompts=3,
        kl_coef=0.0,
        rollout_chunks=chunks,
    )
    started = [threading.Event() for _ in range(4)]
    trainer = Trainer.create(config, reward=reward_of(started))
    real = trainer.rollouts.engine.generate

    def generate(prompts, *args, **kwargs):
        started[sum(event.is_set() for event in started)].set()
        time.sleep(generate_s * len(prompts))
        return real(prompts, *args, **kwargs)

    trainer.rollouts.engine.generate = generate
    return trainer, started


def waits_for_the_next_chunk(calls: list[int], timeout_s: float):
    """Rewards whose j-th call (of 3 chunks) returns only once generate call j + 1 has started;
    each call's number of completions lands in ``calls``."""

    def reward_of(started: list[threading.Event]):
        def reward(completions, answers, **columns):
            if len(calls) < 2 and not started[len(calls) + 1].wait(timeout_s):
                raise ScoredTooLate(f"reward call {len(calls)} saw no next chunk start in {timeout_s} s")
            calls.append(len(completions))
            return contains_char(completions, answers)

        return reward

    return reward_of


def test_scoring_runs_while_the_next_chunk_generates(tiny_model_dir, tmp_path):
    calls = []
    trainer, started = slow_trainer(tiny_model_dir, tmp_path, 3, waits_for_the_next_chunk(calls, timeout_s=60))
    with trainer.scorer:
        row = trainer.step()
    assert calls == [4, 4, 4] and not started[3].is_set()  # three chunks of one prompt, three generate calls
    assert row["step"] == 1 and math.isfinite(row["loss"])


def test_without_chunks_the_same_reward_times_out_with_its_own_error(tiny_model_dir, tmp_path):
    """The check above can fail: scored after the whole rollout, the reward waits in vain (and its
    error reaches the caller as it was raised)."""
    calls = []
    trainer, started = slow_trainer(tiny_model_dir, tmp_path, 1, waits_for_the_next_chunk(calls, timeout_s=2))
    with trainer.scorer, pytest.raises(ScoredTooLate, match="reward call 0"):
        trainer.step()
    assert calls == [] and started[0].is_set() and not started[1].is_set()


def test_reward_timings_say_what_the_overlap_hid(tiny_model_dir, tmp_path):
    """Generating and scoring each take 0.4 s per prompt: in three chunks two thirds of the
    scoring (0.8 s) hides behind generation; in one chunk none does."""

    def slow_reward(completions, answers, **columns):
        time.sleep(0.1 * len(completions))  # 4 samples per prompt: 0.4 s per prompt
        return contains_char(completions, answers)

    rows = {}
    for chunks in (1, 3):
        trainer, _ = slow_trainer(tiny_model_dir, tmp_path, chunks, lambda started: slow_reward, generate_s=0.4)
        with trainer.scorer:
            rows[chunks] = trainer.step()
    for row in rows.values():
        assert row["reward_busy_s"] >= 1.2 and row["rollout_s"] >= 1.2
        assert row["reward_busy_s"] >= row["reward_s"] and row["rollout_s"] + row["reward_s"] <= row["step_s"]
    assert rows[1]["reward_busy_s"] - rows[1]["reward_s"] < 0.05  # nothing hidden
    assert rows[3]["reward_busy_s"] - rows[3]["reward_s"] > 0.4  # ideally 0.8: chunks 1 and 2 scored behind 2 and 3
    assert rows[3]["reward_s"] < 0.8


@pytest.mark.slow
def test_two_ranks_train_alike_in_chunks(tiny_model_dir, tmp_path):
    """torchrun, 2 ranks under ZeRO-2: each rank's share cut in 2 chunks trains as one call does."""
    import pandas as pd

    pytest.importorskip("deepspeed", reason="pip install -e .[deepspeed]")
    from tests.test_deepspeed import torchrun

    for chunks in (1, 2):
        torchrun(2, tmp_path, tiny_model_dir, f"chunks{chunks}", "--deepspeed", "zero2", f"--rollout-chunks={chunks}")
    one, two = (pd.read_parquet(tmp_path / f"chunks{chunks}" / "metrics.parquet") for chunks in (1, 2))
    assert list(two["step"]) == [1, 2] and (two["reward_busy_s"] >= two["reward_s"]).all()
    for column in (c for c in one.columns if not c.endswith("_s")):
        assert one[column].tolist() == pytest.approx(two[column].tolist(), abs=1e-6, nan_ok=True), column
