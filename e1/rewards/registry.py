"""Rewards by task name: one batched contract for evaluation and training alike.

A reward is a plain callable, as in TRL: ``reward(completions, answers, **columns)`` returns
one ``float``, :class:`Scored` or ``None`` (not applicable: 0.0) per completion. Completions are
full texts joined with the canonical ``</think>`` (thinking, ``</think>``, solution; see
:meth:`e1.engine.base.Completion.text`), so a reward never needs a model's own markers, and each
carries e1's token split (:class:`~e1.data.CompletionText`): a reward reads the solution with
:func:`solution_of`, never by cutting the text itself (thinking may hold a literal ``</think>``). The
built-in rewards (math, exact, code) return :class:`Scored` with what they looked at; the
keyword ``context`` (a :class:`ScoringContext`) carries the code sandbox and its limits, and a
reward that needs none of it takes ``**columns`` and ignores it.

    >>> @register_reward("shout")
    ... def shout_reward(completions, answers, **columns):
    ...     return [1.0 if solution_of(c) == solution_of(c).upper() else 0.0 for c in completions]
    >>> reward_for("shout")(["<think>hm</think>YES", "<think>hm</think>no"], ["", ""])
    [1.0, 0.0]
    >>> as_scored([0.5, None])
    [Scored(reward=0.5, extracted=None, tests_passed=nan, first_failure=None), Scored(reward=0.0, extracted=None, tests_passed=nan, first_failure=None)]
    >>> reward_for("mathh")
    Traceback (most recent call last):
    ...
    e1.errors.RewardError: unknown reward task 'mathh' (did you mean 'math'?)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from e1.data import CompletionText
from e1.errors import RewardError, did_you_mean
from e1.names import Registry

if TYPE_CHECKING:
    from e1.sandbox import Sandbox


@dataclass(frozen=True)
class Scored:
    """One completion's score. ``tests_passed`` and ``first_failure`` are for code only."""

    reward: float
    extracted: str | None  # what the reward looked at: the boxed answer, the code
    tests_passed: float = math.nan  # fraction of the tests passed (they stop at the first failure); NaN: not code
    first_failure: str | None = None  # e.g. "test 3: wrong answer: expected '5', got '4'"; None: all passed / math


@dataclass(frozen=True)
class ScoringContext:
    """What a reward may need beyond the texts: the sandbox that runs code (``workers``
    programs at a time), each test's wall-clock limit, and how many of a problem's tests to run."""

    sandbox: Sandbox
    time_limit_s: float
    max_tests: int | None = None  # keep each problem's largest N tests; None: all


Reward = Callable[..., Sequence["float | Scored | None"]]

# The built-in rewards register themselves when e1.rewards (this module's package) imports them;
# a name is registered once (e1.names.Registry: the gate every registry's registration passes).
_REWARDS: Registry = Registry("reward task", RewardError)
_ANSWERS: dict[str, Callable[[object], object]] = {}  # a task's check of one answer (code: a test list)


def register_reward(task: str, answers: Callable[[object], object] | None = None) -> Callable[[Reward], Reward]:
    """Decorator: make ``fn`` the reward for ``task`` (one function per task); ``answers``: the check
    (raising :class:`RewardError`) that each answer of the task is one the reward can read, run on every
    row as a dataset loads (:func:`check_tasks`), before any request is sent or model loaded."""

    def register(fn: Reward) -> Reward:
        _REWARDS[task] = fn  # refused when another reward holds the task (e1's own included)
        if answers is not None:  # only once the task is this reward's: a refused include changes no check
            _ANSWERS[task] = answers
        return fn

    return register


def reward_for(task: str) -> Reward:
    """The reward registered for ``task``; RewardError naming the closest tasks if none."""
    if task in _REWARDS:
        return _REWARDS[task]
    hint = did_you_mean(task, reward_tasks(), listing="known tasks:")
    raise RewardError(f"unknown reward task {task!r}", hint=hint)


def check_tasks(tasks, where: str) -> None:
    """Every task in ``tasks`` (a dataset's ``task`` column, or the dataset: then each row's answer is
    checked too, where its task's reward registered a check) has a reward; else one RewardError
    naming the first that has none (or the first row whose answer its reward cannot read), the
    closest known tasks, and how to add one.

        >>> check_tasks(["math", "mathh"], "probs.jsonl")
        Traceback (most recent call last):
        ...
        e1.errors.RewardError: probs.jsonl: task 'mathh' has no reward (did you mean 'math'?; or register it: @register_reward('mathh') in a file passed with --include FILE)
    """
    frame = tasks if hasattr(tasks, "columns") else None
    unknown = sorted(set(map(str, tasks["task"] if frame is not None else tasks)) - set(_REWARDS))
    if unknown:
        close = did_you_mean(unknown[0], reward_tasks(), listing="known tasks:")
        raise RewardError(
            f"{where}: task {unknown[0]!r} has no reward",
            hint=f"{close}; or register it: @register_reward({unknown[0]!r}) in a file passed with --include FILE",
        )
    for row in frame.itertuples(index=False) if frame is not None else ():
        if row.task in _ANSWERS:
            try:
                _ANSWERS[row.task](row.answer)
            except RewardError as err:
                raise RewardError(
                    f"{where}: problem {str(getattr(row, 'id', '?'))[:80]!r} (task {row.task}): its answer "
                    f"is not one the reward reads: {err.message}",
                    hint=err.hint,
                ) from None


def reward_tasks() -> list[str]:
    """Names of all registered reward tasks, sorted."""
    return sorted(_REWARDS)


def as_scored(values: Sequence[float | Scored | None]) -> list[Scored]:
    """A reward's return values as :class:`Scored` (a plain number keeps no details; None is 0.0)."""
    return [
        value if isinstance(value, Scored) else Scored(0.0 if value is None else float(value), None) for value in values
    ]


def solution_of(completion: str) -> str | None:
    """The completion's solution as e1's token split made it (:class:`~e1.data.CompletionText`); None
    when thinking never ended. A reward reads this, never a cut of its own: a literal ``</think>``
    inside thinking is no end of it. (A plain text, from outside e1, is cut at its last ``</think>``.)"""
    return CompletionText.of(completion).solution
