"""Rewards: ``reward(completions, answers, **columns) -> list[float | Scored | None]``, by task name.

>>> from e1.rewards import reward_for
>>> reward_for("math")(["<think>2+2?</think> It is \\\\boxed{4}."], ["4"])[0].reward
1.0
"""

# The built-in rewards register themselves on import: a new one is a module plus a name on this line.
from e1.rewards import choice, code, exact, math  # noqa: F401
from e1.rewards.code import DEFAULT_TIME_LIMIT_S
from e1.rewards.length import LengthShaping
from e1.rewards.math import answer_key
from e1.rewards.registry import (
    Reward,
    Scored,
    ScoringContext,
    check_tasks,
    register_reward,
    reward_for,
    reward_tasks,
    solution_of,
)
from e1.rewards.scoring import Scorer, ScoringSpec, default_workers, gold_text

__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "LengthShaping",
    "Reward",
    "Scored",
    "Scorer",
    "ScoringSpec",
    "ScoringContext",
    "answer_key",
    "check_tasks",
    "default_workers",
    "gold_text",
    "register_reward",
    "reward_for",
    "reward_tasks",
    "solution_of",
]
