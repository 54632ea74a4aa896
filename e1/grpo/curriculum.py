"""Budget curricula: which thinking budget each training prompt's rollouts get, at each step.

``think`` is one budget (the paper), a set sampled uniformly per prompt (``512,1k,2k``) or a
range sampled uniformly per prompt (``512..2k``): training at many budgets, so that one model
serves them all. ``think_schedule`` tightens the budget over the run, ThinkPrune-style (Hou et
al., 2025: train at 4k, then 3k, then 2k): ``4k:2k:1k`` splits the steps into equal stages (step
decay), ``4k..1k`` falls linearly from the first step to the last. The schedule caps each
sampled budget: a prompt at step ``i`` gets ``min(sampled, cap(i))``.

Every draw depends on (seed, step, problem) alone, so it is the same whichever rank, batch or
resumed run makes it.

    >>> budgets = ThinkBudgets.parse("512,1k,2k")
    >>> budgets.choices, budgets.largest
    ((512, 1024, 2048), 2048)
    >>> ThinkBudgets.parse("1k").think(seed=0, step=3, problem=7)
    1024
    >>> schedule = ThinkBudgets.parse("4k", "4k:2k:1k", steps=6)
    >>> [schedule.cap(step) for step in range(1, 7)]
    [4096, 4096, 2048, 2048, 1024, 1024]
    >>> [ThinkBudgets.parse("4k", "4k..1k", steps=4).cap(step) for step in range(1, 5)]
    [4096, 3072, 2048, 1024]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from e1.budget import parse_tokens
from e1.errors import ConfigError

_HINT = "write one budget (1k), a set (512,1k,2k) or a range (512..2k)"
_SCHEDULE_HINT = "write stages (4k:2k:1k, equal numbers of steps each) or a linear ramp (4k..1k)"


@dataclass(frozen=True)
class ThinkBudgets:
    """Per-prompt thinking budgets: drawn from ``choices`` or the range ``[low, high]``, then
    capped by the schedule (``stages`` in equal shares of ``steps``, or a linear ``ramp``)."""

    choices: tuple[int, ...] = ()  # a set (one element: a fixed budget); empty: the range below
    low: int = 0
    high: int = 0
    stages: tuple[int, ...] = ()  # step decay: one cap per equal share of the steps
    ramp: tuple[int, int] | None = None  # linear decay: the cap at the first and at the last step
    steps: int = 1

    @classmethod
    def parse(cls, think: str | int | list, schedule: str | None = None, steps: int = 1) -> ThinkBudgets:
        """``think``: ``1k`` | ``512,1k,2k`` | ``512..2k``; ``schedule``: ``4k:2k:1k`` | ``4k..1k`` | None."""
        text = ",".join(map(str, think)) if isinstance(think, (list, tuple)) else str(think).strip()  # a TOML list
        if ".." in text and "," not in text:
            low, high = (parse_tokens(part, "think budget") for part in _two(text, "..", _HINT))
            if low > high:
                raise ConfigError(
                    f"think range {text!r} runs backwards", hint="write the smaller budget first: 512..2k"
                )
            budgets = cls(low=low, high=high, steps=steps)
        else:
            choices = tuple(sorted({parse_tokens(part.strip(), "think budget") for part in text.split(",")}))
            budgets = cls(choices=choices, steps=steps)
        return budgets._scheduled(schedule) if schedule else budgets

    def _scheduled(self, schedule: str) -> ThinkBudgets:
        text = str(schedule).strip()
        if ".." in text:
            first, last = (parse_tokens(part, "think schedule") for part in _two(text, "..", _SCHEDULE_HINT))
            scheduled = ThinkBudgets(self.choices, self.low, self.high, ramp=(first, last), steps=self.steps)
        else:
            stages = tuple(parse_tokens(part.strip(), "think schedule") for part in text.split(":"))
            scheduled = ThinkBudgets(self.choices, self.low, self.high, stages=stages, steps=self.steps)
        caps = scheduled.stages or scheduled.ramp
        if max(caps) > self.largest:
            raise ConfigError(
                f"think schedule {text!r} reaches {max(caps)} tokens, above the largest --think "
                f"budget ({self.largest}): the schedule caps --think, it never raises it",
                hint=f"pass --think {max(caps)} (or a set/range reaching it) with the schedule",
            )
        return scheduled

    @property
    def largest(self) -> int:
        """The largest budget any prompt may get (what must fit the context)."""
        drawn = max(self.choices) if self.choices else self.high
        caps = self.stages or self.ramp
        return min(drawn, max(caps)) if caps else drawn

    def cap(self, step: int) -> int:
        """The schedule's ceiling at ``step`` (1-based); without a schedule, :attr:`largest`."""
        if self.stages:
            stage = min((step - 1) * len(self.stages) // self.steps, len(self.stages) - 1)
            return self.stages[stage]
        if self.ramp:
            first, last = self.ramp
            progress = (step - 1) / (self.steps - 1) if self.steps > 1 else 0.0
            return round(first + (last - first) * min(progress, 1.0))
        return self.largest

    def think(self, seed: int, step: int, problem: int) -> int:
        """The thinking budget of ``problem``'s rollouts at ``step``."""
        if len(self.choices) == 1:
            drawn = self.choices[0]
        else:
            from e1.engine import derive_seed

            rng = random.Random(derive_seed(seed, "think-budget", step, problem))
            drawn = rng.choice(self.choices) if self.choices else rng.randint(self.low, self.high)
        return min(drawn, self.cap(step))

    @property
    def varies(self) -> bool:
        """Whether prompts or steps may get different budgets (else: the paper's one budget)."""
        return len(self.choices) != 1 or bool(self.stages or self.ramp)


def _two(text: str, separator: str, hint: str) -> list[str]:
    parts = [part.strip() for part in text.split(separator)]
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"cannot read {text!r}", hint=hint)
    return parts
