"""``elastic`` — the paper's separate budgeting: thinking up to ``t`` tokens, ending early at a natural
end marker; else the end marker is forced (with ``exit=`` text before it, counted in neither budget),
then up to ``s`` solution tokens.

    >>> from e1.budget import Budget
    >>> mode = Mode.parse("elastic:grace=8")
    >>> mode.think_limit(Budget(100, 50)), mode.followable_tokens(Budget(100, 50), 1000)
    (100, 158)
"""

from __future__ import annotations

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import EXIT, GRACE, STOP


@register
class Elastic(Mode):
    name = "elastic"
    summary = "thinking up to t, then the end marker is forced; the solution up to s (the paper)"
    options = (EXIT, GRACE, STOP)

    @property
    def vendor_budget(self) -> bool:
        """A hosted model's thinking budget is elastic with nothing else: the vendor forces nothing else."""
        return not self.set_options()
