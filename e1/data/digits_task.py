"""The demo's synthetic reasoning task: the sum of k digits modulo 10.

Why this task shows Elastic Reasoning at tiny scale:

- **Thinking is real work.** The prompt labels each digit with a letter (``a7b7c6:``). The
  trace adds them one step at a time: letter, digit, running sum (``a77b74c60`` …). The
  answer depends on *every* digit, so a trace cut after i of k steps carries no information
  about the rest: a forced answer from it is a 1-in-10 guess unless the model reasoned far
  enough.
- **There is length to lose.** Most training traces (``verbose_share``) are verbose: after a
  step, with probability ``recheck_prob``, a redundant re-check follows (``~`` previous sum,
  digit, new sum) — the stand-in for a reasoning model's "wait, let me double-check". Concise
  traces (the rest) have none. A model fine-tuned on this mix re-checks often, so its traces
  are ~1.6× longer than needed.
- **Budget-constrained rollout rewards concision.** Under a thinking budget near the base
  model's median trace length, verbose rollouts get cut before the last digits and earn 0,
  concise ones finish and earn 1: GRPO moves the model to the concise mode, which then also
  helps at every smaller budget and shortens unconstrained thinking. The budget must leave
  room for a concise trace of the longest problem (``longest_concise_trace``): a problem no
  trace can finish teaches GRPO to skip steps. Problems have 2–8 digits; with 10, the base's
  long verbose traces were also where it failed most.
- **Separate budgeting beats truncation.** With one budget t + s, a trace that runs long
  leaves no room for the answer; with separate budgets the answer always gets its tokens.

The solution is ``</think>``, the answer digit, EOS. Problems are generated from a seed;
``split`` draws train and test from disjoint seeds, and test prompts are excluded from the
training stream.

    >>> rows = make_rows("test", 2, seed=0)
    >>> rows[0]["problem"][-1], rows[0]["answer"].isdigit()
    (':', True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LETTERS = "abcdefghijklmnopqrstuvwxyz"
RECHECK = "~"
ALPHABET = LETTERS + "0123456789:" + RECHECK  # every character the task writes
TASK = "exact"  # the reward: the solution (after </think>) must equal the answer


@dataclass(frozen=True)
class DigitSumTask:
    min_digits: int = 2
    max_digits: int = 8
    verbose_share: float = 0.75  # share of SFT traces that re-check
    recheck_prob: float = 0.7  # per step, in a verbose trace

    @property
    def longest_concise_trace(self) -> int:
        """Thinking tokens of a concise trace of the longest problem (3 per digit)."""
        return 3 * self.max_digits

    def problem(self, rng: random.Random) -> tuple[str, list[int]]:
        digits = [rng.randint(0, 9) for _ in range(rng.randint(self.min_digits, self.max_digits))]
        return "".join(f"{LETTERS[i]}{d}" for i, d in enumerate(digits)) + ":", digits

    def trace(self, digits: list[int], verbose: bool, rng: random.Random) -> str:
        """The thinking text: one 3-character step per digit, plus re-checks when verbose."""
        total, steps = 0, []
        for i, digit in enumerate(digits):
            new = (total + digit) % 10
            steps.append(f"{LETTERS[i]}{digit}{new}")
            if verbose and rng.random() < self.recheck_prob:
                steps.append(f"{RECHECK}{total}{digit}{new}")
            total = new
        return "".join(steps)

    def row(self, rng: random.Random, index: int, split: str) -> dict:
        problem, digits = self.problem(rng)
        verbose = rng.random() < self.verbose_share
        return {
            "id": f"digits-{split}-{index}",
            "problem": problem,
            "answer": str(sum(digits) % 10),
            "completion": self.trace(digits, verbose, rng) + "</think>" + str(sum(digits) % 10),
        }


SPLIT_SEEDS = {"train": 1, "test": 2}


def make_rows(split: str, count: int, seed: int = 0, task: DigitSumTask = DigitSumTask(),
              exclude: set[str] | None = None) -> list[dict]:
    """``count`` rows of ``split``; ``exclude`` drops problems (e.g. the test prompts from train)."""
    rng = random.Random(seed * 1000 + SPLIT_SEEDS[split])
    rows: list[dict] = []
    while len(rows) < count:
        row = task.row(rng, len(rows), split)
        if exclude is None or row["problem"] not in exclude:
            rows.append(row)
    return rows
