"""GRPO steps on a code task whose tests sleep: ``--rollout-chunks 1`` against ``4``, side by side in one run.

    python benchmarks/train_overlap.py [--prompts 16 --group 4 --tokens 1024 --batch 8 --chunks 4 --steps 3 --workers 8]
    python benchmarks/train_overlap.py --sleep-only     # scoring that takes no CPU (no sandbox programs)

Two trainers over the same tiny model, data and seed (so the same rollouts every step), one
rolling out in one call and then scoring, the other in ``--chunks`` chunks of whole prompts,
scoring chunk k while chunk k + 1 generates; their steps alternate. Generation is the tiny
model's real decoding (transformers backend, one thread, ``--batch`` sequences at a time in both,
so chunking does not change the decode batches); each sample's solution is then replaced by a
correct program whose test sleeps (as ``overlap.py`` does), so scoring runs real sandboxed
programs that, like a GPU run's sandbox, barely compete with decoding for the CPU. The sleep is
set from a first step (generation alone, and scoring with no sleep: the sandbox's own cost) so
that scoring alone takes about as long as generating alone.

From the metrics rows: G = ``rollout_s`` and S = ``reward_busy_s`` of the one-call trainer (one
after the other there); W = ``rollout_s + reward_s`` of the chunked trainer (its overlapped
rollout-and-scoring section). With b chunks the ideal is W ≈ (1 + 1/b) × max(G, S) when G ≈ S
(the first chunk's generation and the last chunk's scoring cannot overlap anything). "G chunked"
is the chunked trainer's ``rollout_s``: its generation, slowed where the sandbox takes CPU that
decoding needs. The whole steps (update included) are compared too. ``--sleep-only`` scores
without the sandbox (each batch sleeps as its programs would): what the overlap gives when scoring
takes no CPU from decoding at all.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overlap import problems_file  # noqa: E402

from e1.grpo.config_file import build_config  # noqa: E402
from e1.grpo.trainer import Trainer  # noqa: E402
from e1.models.tiny import build_tiny_model  # noqa: E402


class SleepyAnswers:
    """Wraps an engine's ``generate``: the model decodes for real, then every sample answers with
    a program that sleeps ``sleep_s`` and prints the expected 5."""

    def __init__(self, engine):
        self.generate, self.sleep_s = engine.generate, 0.0
        engine.generate = self

    def __call__(self, *args, **kwargs):
        answer = f"\n```python\nimport time\ntime.sleep({self.sleep_s:.3f})\nprint(5)\n```\n"
        return [dataclasses.replace(c, closed=True, solution_text=answer) for c in self.generate(*args, **kwargs)]


class SleepingReward:
    """``--sleep-only``: no sandbox; scoring a batch just sleeps as ``workers`` sleeping tests would."""

    def __init__(self, answers: SleepyAnswers, workers: int):
        self.answers, self.workers = answers, workers

    def __call__(self, completions, answers, **columns):
        time.sleep(self.answers.sleep_s * len(completions) / self.workers)
        return [1.0] * len(completions)


def trainer_for(root: Path, model: Path, data: Path, args, chunks: int) -> tuple[Trainer, SleepyAnswers]:
    config = build_config(
        model=str(model),
        data=str(data),
        out=root / f"chunks{chunks}",
        think=args.tokens // 2,
        solve=args.tokens // 2,
        steps=10_000,
        save_every=10_000,
        eval_every=10_000,
        prompts_per_step=args.prompts,
        samples_per_prompt=args.group,
        mini_batch_prompts=args.prompts,
        micro_batch=args.group * 2,
        kl_coef=0.0,
        temperature=1.0,
        batch_size=args.batch,
        workers=args.workers,
        test_time_limit_s=60.0,
        rollout_chunks=chunks,
    )
    trainer = Trainer.create(config)
    answers = SleepyAnswers(trainer.rollouts.engine)
    if args.sleep_only:
        trainer.scorer.reward = SleepingReward(answers, args.workers)
    return trainer, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("prompts", 16),
        ("group", 4),
        ("tokens", 1024),
        ("batch", 8),
        ("chunks", 4),
        ("steps", 3),
        ("workers", 8),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--sleep-only", action="store_true", help="score by sleeping in-process, no sandbox programs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model, data = build_tiny_model(root / "tiny"), problems_file(root, args.prompts * (args.steps + 2))
        (one, one_answers), (chunked, chunked_answers) = (
            trainer_for(root, model, data, args, n) for n in (1, args.chunks)
        )
        with one.scorer, chunked.scorer:
            calibration = one.step()  # also the warm-up: generation alone, and the sandbox's own cost
            chunked.step()
            samples = args.prompts * args.group
            sleep_s = max(0.0, calibration["rollout_s"] - calibration["reward_busy_s"]) * args.workers / samples
            one_answers.sleep_s = chunked_answers.sleep_s = sleep_s
            rows = [(one.step(), chunked.step()) for _ in range(args.steps)]
    report(args, calibration, sleep_s, rows)


def report(args, calibration: dict, sleep_s: float, rows: list[tuple[dict, dict]]) -> None:
    print(
        f"{args.prompts} prompts x {args.group} code samples per step, {args.tokens} tokens, decoded {args.batch} at a "
        f"time{' (--sleep-only: no sandbox)' if args.sleep_only else ''}; each test sleeps {sleep_s * 1e3:.0f} ms (sandbox cost alone {calibration['reward_busy_s']:.2f} s), "
        f"{args.workers} workers; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"  {'step':>4}  {'G':>7}  {'S':>7}  {'G + S':>7}  {'W':>7}  {'W/max(G,S)':>10}  {'G chunked':>9}  "
        f"{'step_s 1':>8}  {f'step_s {args.chunks}':>8}  {'ratio':>6}"
    )
    for step, (one, chunked) in enumerate(rows, start=2):
        generate_s, score_s = one["rollout_s"], one["reward_busy_s"]
        wall_s = chunked["rollout_s"] + chunked["reward_s"]
        print(
            f"  {step:>4}  {generate_s:7.2f}  {score_s:7.2f}  {generate_s + score_s:7.2f}  {wall_s:7.2f}  "
            f"{wall_s / max(generate_s, score_s):10.3f}  {chunked['rollout_s']:9.2f}  {one['step_s']:8.2f}  {chunked['step_s']:8.2f}  "
            f"{chunked['step_s'] / one['step_s']:6.3f}"
        )
    ratios = [(c["rollout_s"] + c["reward_s"]) / max(o["rollout_s"], o["reward_busy_s"]) for o, c in rows]
    steps = [c["step_s"] / o["step_s"] for o, c in rows]
    hidden = [c["reward_busy_s"] - c["reward_s"] for _, c in rows]
    print(
        f"  median W / max(G, S) = {statistics.median(ratios):.3f}  (ideal with {args.chunks} chunks "
        f"≈ {1 + 1 / args.chunks:.2f}; one after the other it is (G + S) / max(G, S))"
    )
    print(
        f"  median step time, --rollout-chunks {args.chunks} / 1 = {statistics.median(steps):.3f}; scoring hidden "
        f"behind generation (reward_busy_s - reward_s): median {statistics.median(hidden):.2f} s per step"
    )


if __name__ == "__main__":
    main()
