"""``truncate`` — one budget ``t + s`` over the whole output; nothing is forced.

>>> from e1.budget import Budget
>>> mode = Mode.parse("truncate")
>>> mode.output_cap(Budget(512, 1024)), mode.followable_tokens(Budget(512, 1024), 1000)
(1536, 1000)
"""

from __future__ import annotations

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode


@register
class Truncate(Mode):
    name = "truncate"
    summary = "one budget t + s over thinking and solution together; nothing is forced"
    separate = False

    def output_cap(self, budget):
        return budget.total

    def worst_case(self, budget, markers, exit_ids=()):
        return budget.total

    def followable_tokens(self, budget, max_tokens: int) -> int:
        return min(budget.total, max_tokens)
