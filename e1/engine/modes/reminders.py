"""Budget reminders, ``remind=K``: every ``K`` thinking tokens the thinking budget left is written into the
thinking, as a forced text from :data:`TEMPLATE` — an option of every mode with a thinking budget of its own
(elastic, budget-forcing, soft; not early-exit, whose trials a note would interrupt).

    >>> from e1.budget import Budget
    >>> mode = Mode.parse("elastic:remind=40")
    >>> mode.notes(Budget(100, 20))
    ((40, '\\n[60 tokens left]\\n'), (80, '\\n[20 tokens left]\\n'))
    >>> Mode.parse("elastic").notes(Budget(100, 20)), Mode.parse("soft:remind=40").per_token
    ((), True)

Following BudgetThinker (Wen et al., "BudgetThinker: Empowering Budget-aware LLM Reasoning with Control
Tokens", arXiv 2508.17196, Sec. 3: during decoding, at step ``k * floor(B / K)`` for ``k = 0..K-1`` the
control token ``c_{k+1}`` is forced, each telling the model what fraction of its budget ``B`` is spent).
Differences, each a choice of this option: the reminder is text in the model's own vocabulary, not trained
special tokens, so an untrained model can read it; it says how many tokens are left, not which fraction;
``K`` is the interval in tokens (not the number of reminders), and none is written at the start (the
prompt states the budget there, if at all); the paper trains the model on the tokens (SFT, then RL with a
length reward), this option only decodes with them. The authors' code was not at hand: this follows the
paper's description of the insertion schedule.

What a reminder is for every executor (:class:`~e1.engine.row_state.RowState` runs it, in every backend):
a note due once thinking reaches ``k * K`` tokens (``k >= 1``, below ``t``), forced, counted as thinking
(the model reads it inside its thinking, as s1's "Wait"; ``t`` still bounds the thinking, reminders
included, so no budget or context check changes), and ended by the cut if it reaches ``t``. Its number is
the budget left where it starts, ``t - k * K``. At most :data:`MOST` reminders per row.
"""

from __future__ import annotations

from e1.budget import MAX_TOKENS
from e1.engine.modes.catalog import extend
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import Count

TEMPLATE = "\n[{left} tokens left]\n"
MOST = 64  # reminders per row at most: a row's notes are tokenized when it starts


class Remind(Count):
    """``remind=K``: a reminder every ``K`` thinking tokens (0: none)."""

    def notes(self, value, budget) -> tuple[tuple[int, str], ...]:
        if not value:
            return ()
        points = range(value, min(budget.think, value * (MOST + 1)), value)
        return tuple((at, TEMPLATE.format(left=budget.think - at)) for at in points)


REMIND = extend(
    Remind(
        "remind",
        "remind=256: every 256 thinking tokens, write the thinking budget left into the thinking",
        default=0,
        max=MAX_TOKENS,
    ),
    lambda mode: mode.separate and mode.bounded and not mode.trials,
)

__all__ = ["MOST", "REMIND", "TEMPLATE", "Mode"]
