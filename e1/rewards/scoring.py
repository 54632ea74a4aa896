"""Scoring completions of mixed tasks, the one path that evaluation and training share.

    with Scorer(workers=8, time_limit_s=6.0, max_tests=None) as scorer:
        results = scorer.score(["math", "code"], [completion_1, completion_2], [gold_1, tests_json])
    results[0].reward, results[0].extracted    # 1.0, '42'
    results[1].tests_passed, results[1].first_failure    # 0.5, "test 2: wrong answer: ..."

    score("math", completion, "42")           # one completion -> Scored

Each task's items go to its registered reward (:mod:`e1.rewards.registry`) in one batched call,
with a :class:`~e1.rewards.registry.ScoringContext` holding the Scorer's one sandbox, so code
runs ``workers`` programs at a time. Completions are joined with the canonical ``</think>``
(:meth:`e1.engine.base.Completion.text` with :data:`~e1.data.schema.THINK_END`), whatever
markers the model used, and carry e1's token split (:class:`~e1.data.CompletionText`); every
completion passes :meth:`CompletionText.of` here, so each reward receives its split (a plain text
from outside e1 is cut once, here, at its last ``</think>``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from e1.data import CompletionText
from e1.errors import RewardError
from e1.numeric import Number
from e1.rewards.code import DEFAULT_TIME_LIMIT_S
from e1.rewards.registry import Reward, Scored, ScoringContext, as_scored, reward_for
from e1.sandbox import backend_name
from e1.settings import CODE, check_settings, numbers, setting

__all__ = ["Scored", "Scorer", "ScoringSpec", "default_workers", "gold_text", "score"]


def default_workers() -> int:
    """Code tests run in parallel: min(8, CPU count)."""
    return min(8, os.cpu_count() or 1)


@dataclass(frozen=True)
class ScoringSpec:
    """How answers are scored, the settings `e1 eval`, `e1 sweep` and `e1 train` share: code runs
    ``workers`` programs at once in the ``sandbox`` backend (None: ``$E1_SANDBOX``, else auto), each
    test for ``test_time_limit_s`` at most, only each problem's ``max_tests`` largest tests (None: all).
    Checked when built, whatever the data: a typo is refused before any model loads.

    >>> ScoringSpec(workers=2, max_tests=10).max_tests
    10
    >>> ScoringSpec(test_time_limit_s=0)
    Traceback (most recent call last):
    e1.errors.ConfigError: --test-time-limit must be in (0, 86400], got 0 (seconds per test, e.g. 6)
    """

    workers: int = setting(
        help="Code tests run in parallel.",
        panel=CODE,
        factory=default_workers,
        shown="min(8, CPUs)",
        number=Number(int, min=1, max=4096),
    )
    test_time_limit_s: float = setting(
        DEFAULT_TIME_LIMIT_S,
        "Seconds per test.",
        CODE,
        flag="--test-time-limit",
        number=Number(float, min=0, above=True, max=86400, hint="seconds per test, e.g. 6"),
    )
    max_tests: int | None = setting(
        None,
        "Run only each problem's N largest tests.",
        CODE,
        shown="all",
        number=Number(int, min=1, optional=True, hint="leave it out to run every test"),
    )
    sandbox: str | None = setting(
        None,
        "How model-written code runs: auto (unshare as root, else bwrap; refuses rather than run code "
        "unconfined) | unshare | bwrap | none (NO isolation: only time, output and rlimits; prints a warning). "
        "What each isolates: docs/sandbox.md.",
        CODE,
        shown="auto",
        envvar="E1_SANDBOX",
        complete="sandboxes",
    )

    def __post_init__(self):
        check_settings(self)
        backend_name(self.sandbox)

    def scorer(self, reward: Reward | None = None) -> Scorer:
        """A :class:`Scorer` with these settings (``reward``: one reward for every task instead of the registered)."""
        return Scorer(self.workers, self.test_time_limit_s, self.max_tests, reward=reward, sandbox=self.sandbox)


SCORING_NUMBERS = numbers(ScoringSpec)  # what each numeric setting may hold (e1.numeric)


class Scorer:
    """Scores batches of completions of mixed tasks; code runs ``workers`` programs at a time.

    ``max_tests`` keeps only the largest tests of each problem (None: all); each test may run
    ``time_limit_s`` seconds. Programs see the installed packages (HumanEval+ tests import numpy).
    ``reward``, if given, scores every task instead of the registered rewards (custom objectives).
    ``sandbox`` is the code sandbox's backend (:mod:`e1.sandbox`: auto, unshare, bwrap, none).
    """

    def __init__(
        self,
        workers: int = 1,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_tests: int | None = None,
        reward: Reward | None = None,
        sandbox: str | None = None,
    ):
        from e1.sandbox import Limits, Sandbox

        self.reward = reward
        # starts nothing until used; `sandbox` names the backend (None: $E1_SANDBOX, else auto)
        sandbox = Sandbox(workers, Limits(wall_s=time_limit_s), site_packages=True, backend=sandbox)
        self.context = ScoringContext(sandbox, time_limit_s, max_tests)

    def score(
        self,
        tasks: Sequence[str],
        completions: Sequence[str],
        answers: Sequence[str],
        columns: Mapping[str, Sequence] | None = None,
    ) -> list[Scored]:
        """``Scored`` for each ``(task, completion, answer)``, in order; each task's items scored in
        one call. ``columns`` (one value per item each) reach the rewards as keyword arguments.
        No program makes this raise or stall: whatever one does is its own 0 with a reason
        (:mod:`e1.rewards.code_tests` states the judge's threat model)."""
        completions = [CompletionText.of(c) for c in completions]  # each with its split: rewards never cut text
        results: list[Scored | None] = [None] * len(completions)
        by_task: dict[str, list[int]] = {}
        for index, task in enumerate(tasks):
            by_task.setdefault(task, []).append(index)
        for task, indices in by_task.items():
            reward = self.reward or reward_for(task)
            extra = {name: [values[i] for i in indices] for name, values in (columns or {}).items()}
            values = reward(
                [completions[i] for i in indices], [answers[i] for i in indices], context=self.context, **extra
            )
            if len(values) != len(indices):
                raise RewardError(
                    f"the {task!r} reward returned {len(values)} values for {len(indices)} completions",
                    hint="a reward returns one value per completion",
                )
            for index, result in zip(indices, as_scored(values)):
                results[index] = result
        return results

    def close(self) -> None:
        self.context.sandbox.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def score(task: str, completion: str, answer: str) -> Scored:
    """The score of one completion (thinking, ``</think>``, solution) against ``answer``."""
    with Scorer() as scorer:
        return scorer.score([task], [completion], [answer])[0]


def gold_text(task: str, gold: str) -> str:
    """The reference as the results table shows it: the answer, or for code the number of tests."""
    if task != "code":
        return gold
    try:
        count = len(json.loads(gold))
    except (ValueError, TypeError):
        return "tests"
    return f"{count} test{'s' if count != 1 else ''}"
