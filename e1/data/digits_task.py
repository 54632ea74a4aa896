"""The demo's synthetic reasoning task: the sum of k digits modulo 10.

Why this task shows Elastic Reasoning at tiny scale:

- **Thinking is real work.** The prompt labels each digit with a letter (``a7b7c6:``). The
  trace adds them one step at a time: letter, digit, running sum (``a77b74c60`` …), every digit
  once, so the answer needs every step.
- **There is length to lose.** Most training traces (``verbose_share``) are verbose: after a
  step, with probability ``recheck_prob``, a redundant re-check follows (``~`` previous sum,
  digit, new sum) — the stand-in for a reasoning model's "wait, let me double-check". Concise
  traces (the rest) have none. A model fine-tuned on this mix re-checks often, so its traces
  are ~1.6× longer than needed.
- **There is an order to learn, at no cost in length.** A trace may add the digits from the
  first or from the last (``backward_share`` of the training traces go backward; both are as
  long). Before the last two digits, a digit often (``balance_prob``) brings the running sum
  back to 0, so the first digits tend to cancel out: a backward trace cut after its first
  steps already holds the answer about half the time, a forward one rarely. Nothing but a cut
  tells the two orders apart: they are as long, and the digits that cancel can only be known
  by adding them up, so a length penalty rewards both alike.
- **Budget-constrained rollout rewards concision and the order.** Under a thinking budget near
  the base model's median trace length, verbose rollouts get cut before the last digits and
  mostly earn 0, concise ones finish and earn 1, and cut backward ones earn 1 far more often
  than cut forward ones: GRPO moves the model to concise backward traces, which then also help
  at every smaller budget and shorten unconstrained thinking. A length-penalty baseline (never
  cut) learns the concision but not the order. The budget must leave room for a concise trace
  of the longest problem (``longest_concise_trace``): a problem no trace can finish teaches
  GRPO to skip steps.
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
    backward_share: float = 0.2  # share of SFT traces that add from the last digit to the first
    balance_prob: float = 0.8  # a digit before the last two brings the running sum to 0

    @property
    def longest_concise_trace(self) -> int:
        """Thinking tokens of a concise trace of the longest problem (3 per digit)."""
        return 3 * self.max_digits

    def problem(self, rng: random.Random) -> tuple[str, list[int]]:
        """Digits 0-9; before the last two, a digit often (``balance_prob``) brings the running sum
        back to 0 mod 10, so the first digits often cancel out and the last two decide."""
        k = rng.randint(self.min_digits, self.max_digits)
        digits, total = [], 0
        for i in range(k):
            digit = rng.randint(0, 9)
            if i < k - 2 and total and rng.random() < self.balance_prob:
                digit = 10 - total
            digits.append(digit)
            total = (total + digit) % 10
        return "".join(f"{LETTERS[i]}{d}" for i, d in enumerate(digits)) + ":", digits

    def trace(self, digits: list[int], verbose: bool, rng: random.Random, backward: bool = False) -> str:
        """The thinking text: one 3-character step per digit, in the prompt's order or backward,
        plus re-checks when verbose."""
        total, steps = 0, []
        for i in reversed(range(len(digits))) if backward else range(len(digits)):
            digit = digits[i]
            new = (total + digit) % 10
            steps.append(f"{LETTERS[i]}{digit}{new}")
            if verbose and rng.random() < self.recheck_prob:
                steps.append(f"{RECHECK}{total}{digit}{new}")
            total = new
        return "".join(steps)

    def row(self, rng: random.Random, index: int, split: str) -> dict:
        problem, digits = self.problem(rng)
        verbose = rng.random() < self.verbose_share
        backward = rng.random() < self.backward_share
        return {
            "id": f"digits-{split}-{index}",
            "problem": problem,
            "answer": str(sum(digits) % 10),
            "completion": self.trace(digits, verbose, rng, backward) + "</think>" + str(sum(digits) % 10),
        }


SPLIT_SEEDS = {"train": 1, "test": 2}


def make_rows(
    split: str, count: int, seed: int = 0, task: DigitSumTask = DigitSumTask(), exclude: set[str] | None = None
) -> list[dict]:
    """``count`` rows of ``split``; ``exclude`` drops problems (e.g. the test prompts from train)."""
    rng = random.Random(seed * 1000 + SPLIT_SEEDS[split])
    rows: list[dict] = []
    while len(rows) < count:
        row = task.row(rng, len(rows), split)
        if exclude is None or row["problem"] not in exclude:
            rows.append(row)
    return rows
