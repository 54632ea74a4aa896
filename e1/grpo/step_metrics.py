"""A GRPO step's rollout metrics: rewards, accuracy, lengths and the thinking budgets rolled out at.

row |= rollout_metrics(scores, rewards, completions) | budget_metrics(think_budgets)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from e1.engine import Completion


def rollout_metrics(scores: torch.Tensor, rewards: torch.Tensor, completions: list[Completion]) -> dict:
    """The rollouts' task reward (``scores``), trained-on reward (with a length reward), accuracy and lengths."""
    count = max(len(completions), 1)
    return {
        "reward_mean": float(rewards.mean()),
        "task_reward_mean": float(scores.mean()),
        "accuracy": float((scores >= 1.0).float().mean()),
        "mean_think_tokens": sum(c.think_tokens for c in completions) / count,
        "mean_solve_tokens": sum(c.solve_tokens for c in completions) / count,
        "forced_rate": sum(c.forced for c in completions) / count,
    }


def budget_metrics(think_budgets: list[int]) -> dict:
    """The thinking budgets the step's problems were rolled out at (they vary under a curriculum)."""
    return {
        "think_budget_mean": sum(think_budgets) / max(len(think_budgets), 1),
        "think_budget_min": min(think_budgets, default=0),
        "think_budget_max": max(think_budgets, default=0),
    }
