"""A toy decoding mode, defined in this one file as a user would add one: ``halfway`` is elastic with
the end marker forced at ``fraction * t`` instead of ``t`` (the solution still gets ``s``).

Load it with ``E1_MODES=tests/modes/halfway.py`` (or put the file in ``e1/engine/modes/``).
"""

from __future__ import annotations

import math

from e1.engine.modes import Mode, register
from e1.engine.modes.options import Real


@register
class Halfway(Mode):
    name = "halfway"
    summary = "elastic, cut at fraction * t"
    options = (Real("fraction", "fraction=0.5: thinking is cut at half of t", default=0.5, min=0, max=1, above=True),)

    def think_limit(self, budget) -> int:
        return math.floor(self.fraction * budget.think)
