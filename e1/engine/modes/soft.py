"""``soft`` (budget guidance) — no cut at ``t``: from ``start * t`` thinking tokens on, a bias added to the
end marker's logit rises to ``strength`` at ``t`` (``shape`` linear or exp) and stays there; the marker
is forced only at the backstop ``ceiling * t``. The bias is a pure function of the thinking count, so
every backend adds the very same float.

    >>> mode = Mode.parse("soft:start=0.5:strength=4")
    >>> [mode.end_bias(k, 10) for k in (5, 6, 8, 10, 14)]
    [0.0, 0.8, 2.4, 4.0, 4.0]
"""

from __future__ import annotations

import math

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import EXIT, GRACE, STOP, Real, Word
from e1.engine.rules import end_bias

EXP_RATE = 4.0  # the exp shape: (e^(4p) - 1) / (e^4 - 1), 2% of the strength at p = 1/4
START = Real("start", "start=0.8: the bias starts at 80% of t", default=0.8, min=0, max=1)
STRENGTH = Real("strength", "strength=8: the bias at t, in logits", default=8.0, min=0, max=100)
SHAPE = Word(
    "shape", "shape=linear|exp: how the bias rises from start * t to t", default="linear", choices=("linear", "exp")
)
CEILING = Real("ceiling", "ceiling=1.5: the marker is forced at 1.5 x t", default=1.5, min=1, max=64)


@register
class Soft(Mode):
    name = "soft"
    summary = "a rising bias on the end marker from start*t to t; forced only at ceiling*t"
    options = (EXIT, GRACE, STOP, START, STRENGTH, SHAPE, CEILING)

    def think_limit(self, budget) -> int:
        return math.floor(self.ceiling * budget.think)

    def end_bias(self, think_tokens: int, t: int) -> float:
        """:func:`e1.engine.rules.end_bias` of :meth:`bias_curve`, the rule runner V2's device step runs too."""
        begin, strength, rate = self.bias_curve(t)
        if think_tokens <= begin or not strength:
            return 0.0
        return end_bias(True, think_tokens, begin, t - begin, strength, rate, math.expm1(rate) if rate else 1.0)

    def bias_curve(self, t: int) -> tuple[float, float, float]:
        return self.start * t, self.strength, EXP_RATE if self.shape == "exp" else 0.0

    def bias_start(self, t: int) -> int | None:
        return math.floor(self.start * t) + 1 if self.strength else None

    def bias_steady(self, t: int) -> int | None:
        """Past both ``t`` and the start the progress is 1: the bias is ``strength`` from there on."""
        return max(t, self.bias_start(t)) if self.strength else None

    @property
    def per_token(self) -> bool:
        return True

    def followable_tokens(self, budget, max_tokens: int) -> int:
        """Thinking up to the first biased draw (its distribution differs), or a natural end then ``s``."""
        if not self.strength:
            return super().followable_tokens(budget, max_tokens)
        return 0 if budget.think == 0 else min(self.bias_start(budget.think) + budget.solve, max_tokens)
