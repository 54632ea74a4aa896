"""Length-aware rewards: a shaping applied after the task's reward, for baselines trained at equal budgets.

A shaping sees each completion's task reward, its generated tokens (thinking + solution; forced
tokens excluded), the budget it ran under (``t + s`` of its prompt: the longest it could be) and
whether it ended at EOS, and returns the reward GRPO trains on. Written ``name[:key=value]...``
like a decoding mode, defaults from each paper:

- ``l1-exact`` / ``l1-max`` — L1 (Aggarwal & Welleck, 2025, LCPO): the prompt asks for a target
  length N ("Think for N tokens." / "Think for maximum N tokens."; N = the prompt's budget), and
  the reward is ``r - alpha * |N - n|`` (exact) or ``r * clip(alpha * (N - n) + delta, 0, 1)`` (max).
- ``dapo`` — DAPO's soft overlong punishment (Yu et al., 2025): ``r`` plus 0 up to
  ``L_max - L_cache`` tokens, then falling linearly to -1 at ``L_max`` (the budget);
  ``L_cache = cache_share * L_max`` (DAPO: 4k of 20k).
- ``cosine`` — the cosine length-scaled reward (Yeo et al., 2025, "Demystifying Long CoT"):
  correct answers earn from ``correct_short`` (n = 0) down to ``correct_long`` (n = budget) on a
  half cosine, wrong ones from ``wrong_short`` up to ``wrong_long``; a completion that never
  reached EOS gets ``exceed``. Correct means a task reward >= 1.
- ``kimi`` — Kimi k1.5's group-relative length reward (Kimi Team, 2025): within the samples of one
  prompt, ``lambda = 0.5 - (n - n_min) / (n_max - n_min)`` (0 when all are as long), added as
  ``weight * lambda`` to a correct answer and ``weight * min(0, lambda)`` to a wrong one: the
  shortest correct answers gain, long wrong ones lose, and nothing depends on the budget.

    >>> shaping = LengthShaping.parse("cosine")
    >>> shaping.shape([1.0, 0.0], tokens=[50, 50], budgets=[100, 100], finished=[True, True])
    [1.5, -5.0]
    >>> LengthShaping.parse("l1-exact:alpha=0.01").shape([1.0], tokens=[80], budgets=[100], finished=[True])
    [0.8]
    >>> LengthShaping.parse("l1-max").instruction(1024)
    'Think for maximum 1024 tokens.'
    >>> LengthShaping.parse("kimi").shape([1.0, 1.0, 0.0], tokens=[10, 30, 30], budgets=[64] * 3, finished=[True] * 3,
    ...                                   groups=[0, 0, 0])
    [1.5, 0.5, -0.5]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from e1.errors import ConfigError, did_you_mean
from e1.names import Registry
from e1.numeric import Number

_SHAPINGS: Registry = Registry("length reward")  # one class per name (e1.names)


def register_shaping(name: str):
    """Class decorator: make a :class:`LengthShaping` subclass available as ``name``."""

    def register(cls: type[LengthShaping]) -> type[LengthShaping]:
        _SHAPINGS[name] = cls  # refused when another class holds the name
        cls.name = name
        return cls

    return register


def shaping_names() -> list[str]:
    return sorted(_SHAPINGS)


@dataclass(frozen=True)
class LengthShaping:
    """The reward GRPO trains on, from the task's reward and the completion's length."""

    name = ""

    @staticmethod
    def parse(text: str) -> LengthShaping:
        """``name[:key=value]...``, e.g. ``cosine``, ``dapo:cache_share=0.1``, ``l1-exact:alpha=0.001``."""
        name, _, rest = str(text).strip().partition(":")
        if name not in _SHAPINGS:
            raise ConfigError(f"unknown length reward {name!r}", hint=did_you_mean(name, shaping_names()))
        cls = _SHAPINGS[name]
        known = [field.name for field in fields(cls)]
        options = {}
        for option in filter(None, rest.split(":")):
            key, _, value = option.partition("=")
            if key not in known:
                raise ConfigError(
                    f"unknown option {key!r} of length reward {name!r}",
                    hint=did_you_mean(key, known, listing=f"{name} takes:"),
                )
            try:
                options[key] = float(value)
            except ValueError:
                raise ConfigError(f"invalid {name} option {option!r}", hint=f"write {key}=<number>") from None
            Number(float).check(options[key], f"{name} {key}")  # nan and inf pass every range check below
        return cls(**options)

    def one(self, reward: float, tokens: int, budget: int, finished: bool) -> float:
        raise NotImplementedError

    def shape(
        self,
        rewards: Sequence[float],
        tokens: Sequence[int],
        budgets: Sequence[int],
        finished: Sequence[bool],
        groups: Sequence[int] | None = None,
    ) -> list[float]:
        """The shaped reward of each completion (``tokens`` generated under ``budgets`` tokens at most;
        ``groups``: which prompt each came from, for group-relative shapings)."""
        return [self.one(float(r), n, b, f) for r, n, b, f in zip(rewards, tokens, budgets, finished)]

    def instruction(self, target_tokens: int) -> str | None:
        """A sentence appended to the problem (L1's target length), or None."""
        return None

    def __str__(self) -> str:
        options = [
            f"{field.name}={getattr(self, field.name):g}"
            for field in fields(self)
            if getattr(self, field.name) != field.default
        ]
        return ":".join([self.name, *options])


@register_shaping("l1-exact")
@dataclass(frozen=True)
class L1Exact(LengthShaping):
    alpha: float = 0.0003  # reward lost per token away from the target (L1's alpha)

    def __post_init__(self):
        if self.alpha < 0:
            raise ConfigError(f"l1 alpha must be >= 0, got {self.alpha:g}", hint="L1 uses 0.0003")

    def one(self, reward: float, tokens: int, budget: int, finished: bool) -> float:
        return reward - self.alpha * abs(budget - tokens)

    def instruction(self, target_tokens: int) -> str:
        return f"Think for {target_tokens} tokens."


@register_shaping("l1-max")
@dataclass(frozen=True)
class L1Max(L1Exact):
    delta: float = 0.5  # the reward's share at exactly the target length

    def one(self, reward: float, tokens: int, budget: int, finished: bool) -> float:
        return reward * min(1.0, max(0.0, self.alpha * (budget - tokens) + self.delta))

    def instruction(self, target_tokens: int) -> str:
        return f"Think for maximum {target_tokens} tokens."


@register_shaping("dapo")
@dataclass(frozen=True)
class DapoOverlong(LengthShaping):
    cache_share: float = 0.2  # the last share of the budget over which the penalty grows from 0 to -1

    def __post_init__(self):
        if not 0 < self.cache_share <= 1:
            raise ConfigError(
                f"dapo cache_share must be in (0, 1], got {self.cache_share:g}", hint="DAPO uses 0.2 (4k of 20k tokens)"
            )

    def one(self, reward: float, tokens: int, budget: int, finished: bool) -> float:
        cache = self.cache_share * budget  # L_cache
        if tokens > budget:
            return reward - 1.0
        return reward + min(0.0, (budget - cache - tokens) / cache)


@register_shaping("cosine")
@dataclass(frozen=True)
class CosineLength(LengthShaping):
    correct_short: float = 2.0  # r_0^c: a correct answer with no tokens
    correct_long: float = 1.0  # r_L^c: a correct answer using the whole budget
    wrong_short: float = -10.0  # r_0^w
    wrong_long: float = 0.0  # r_L^w
    exceed: float = -10.0  # r_e: the completion never reached EOS

    def one(self, reward: float, tokens: int, budget: int, finished: bool) -> float:
        if not finished:
            return self.exceed
        short, long = (self.correct_short, self.correct_long) if reward >= 1.0 else (self.wrong_short, self.wrong_long)
        return long + 0.5 * (short - long) * (1 + math.cos(math.pi * min(tokens, budget) / budget))


@register_shaping("kimi")
@dataclass(frozen=True)
class KimiLength(LengthShaping):
    weight: float = 1.0  # how much of lambda is added to the task's reward

    def __post_init__(self):
        if not self.weight >= 0:
            raise ConfigError(
                f"kimi weight must be >= 0, got {self.weight:g}", hint="Kimi k1.5 adds lambda as it is: 1"
            )

    def shape(
        self,
        rewards: Sequence[float],
        tokens: Sequence[int],
        budgets: Sequence[int],
        finished: Sequence[bool],
        groups: Sequence[int] | None = None,
    ) -> list[float]:
        groups = list(range(len(rewards))) if groups is None else list(groups)
        span: dict[int, tuple[int, int]] = {}
        for group, n in zip(groups, tokens):
            low, high = span.get(group, (n, n))
            span[group] = (min(low, n), max(high, n))
        shaped = []
        for reward, n, group in zip(rewards, tokens, groups):
            low, high = span[group]
            lam = 0.5 - (n - low) / (high - low) if high > low else 0.0
            shaped.append(float(reward) + self.weight * (lam if reward >= 1.0 else min(0.0, lam)))
        return shaped
