"""``none`` — unconstrained, up to ``--max-tokens`` (and the model's context). Behind a hosted reasoning
API, ``none:effort=high`` asks the vendor for that reasoning effort (each vendor's levels are checked
by its backend, :mod:`e1.engine.api.vendors`).

    >>> str(Mode.parse("none:effort=HIGH"))
    'none:effort=high'
"""

from __future__ import annotations

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import Word

EFFORT = Word("effort", "effort=high: a hosted vendor's reasoning effort level (none only)", default="")


@register
class Unbudgeted(Mode):
    name = "none"
    summary = "no budget: up to --max-tokens (effort=LEVEL: a hosted vendor's reasoning effort)"
    options = (EFFORT,)
    separate = False
    bounded = False

    def worst_case(self, budget, markers, exit_ids=()):
        return None

    def followable_tokens(self, budget, max_tokens: int) -> int:
        return max_tokens
