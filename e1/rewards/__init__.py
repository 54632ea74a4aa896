"""Rewards: ``reward(completions, answers, **columns) -> list[float | Scored | None]``, by task name.

    >>> from e1.rewards import reward_for
    >>> reward_for("math")(["<think>2+2?</think> It is \\\\boxed{4}."], ["4"])[0].reward
    1.0
"""

from e1.rewards.registry import Scored, ScoringContext, register_reward, reward_for, reward_tasks

__all__ = ["Scored", "ScoringContext", "register_reward", "reward_for", "reward_tasks"]
