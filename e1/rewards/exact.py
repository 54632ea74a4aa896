"""Exact-match reward: the solution (text after the last ``</think>``), stripped, must equal the
answer. For synthetic tasks whose answers are short tokens (the demo's digit sums).

    >>> [s.reward for s in exact_reward(["<think>a11b23</think>3", "<think>a11b23"], ["3", "3"])]  # the second never ended thinking
    [1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence

from e1.rewards.registry import Scored, register_reward, solution_of


@register_reward("exact")
def exact_reward(completions: Sequence[str], answers: Sequence[str], **columns) -> list[Scored]:
    return [
        _match(solution_of(completion), str(answer)) for completion, answer in zip(completions, answers, strict=True)
    ]


def _match(solution: str | None, answer: str) -> Scored:
    if solution is None:
        return Scored(0.0, None)
    stripped = solution.strip()
    return Scored(1.0 if stripped == answer.strip() else 0.0, stripped or None)
