"""``budget-forcing`` (s1, Muennighoff et al. 2025) — at ``t`` the end marker and "Final Answer:" are
forced; with ``wait=k`` the first ``k`` natural ends of thinking are replaced by "Wait" (while it fits in ``t``).

    >>> from e1.budget import Budget
    >>> from e1.engine.markers import Markers
    >>> markers = Markers("<think>", "</think>", (1,), (2,), frozenset({0}), 0, (3,), (4, 5))
    >>> Mode.parse("budget-forcing").worst_case(Budget(10, 5), markers)   # t + s, both markers, "Final Answer:"
    19
"""

from __future__ import annotations

from e1.engine.modes.base import Mode, register
from e1.engine.modes.options import EXIT, GRACE, STOP, Count

WAIT = Count("wait", "wait=2: the first two natural ends of thinking become 'Wait'", default=0, max=1000)


@register
class BudgetForcing(Mode):
    name = "budget-forcing"
    summary = "s1: at t force the end marker and 'Final Answer:'; wait=k replaces k natural ends with 'Wait'"
    options = (WAIT, EXIT, GRACE, STOP)
    answer_prompt = True
