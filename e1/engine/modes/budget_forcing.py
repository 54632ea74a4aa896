"""``budget-forcing`` (s1, Muennighoff et al. 2025) — at ``t`` the end marker and "Final Answer:" are
forced; with ``wait=k`` the first ``k`` natural ends of thinking are replaced by "Wait" (while it fits in ``t``).

The forced text follows s1's evaluation code (simplescaling/s1,
``eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py``): when thinking runs out of
tokens, a line break, the end-of-thinking marker, a line break and "Final Answer:"
(``answer=s1``, the default). s1 leaves the first line break out when thinking already ends
one; e1 always forces it (it decides forced ids without decoding the thinking). ``answer=inline``
is the text e1 forced before: "Final Answer:" right after the marker, no line breaks.

    >>> from e1.budget import Budget
    >>> from e1.engine.markers import Markers
    >>> markers = Markers("<think>", "</think>", (1,), (2,), frozenset({0}), 0, (3,), (4, 5), newline_ids=(6,))
    >>> Mode.parse("budget-forcing").worst_case(Budget(10, 5), markers)   # t + s, both markers, 2 line breaks, "Final Answer:"
    21
    >>> Mode.parse("budget-forcing:answer=inline").worst_case(Budget(10, 5), markers)
    19
"""

from __future__ import annotations

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import EXIT, GRACE, STOP, Count, Word

WAIT = Count("wait", "wait=2: the first two natural ends of thinking become 'Wait'", default=0, max=1000)
ANSWER = Word(
    "answer",
    "answer=s1|inline: at t force s1's '\\n</think>\\nFinal Answer:' (default) or e1's earlier '</think>Final Answer:'",
    default="s1",
    choices=("s1", "inline"),
)


@register
class BudgetForcing(Mode):
    name = "budget-forcing"
    summary = "s1: at t force the end marker and 'Final Answer:'; wait=k replaces k natural ends with 'Wait'"
    options = (WAIT, ANSWER, EXIT, GRACE, STOP)
    answer_prompt = True

    @classmethod
    def _upgraded(cls, text: str) -> str:
        """A recorded text without ``answer=`` forced e1's earlier ``</think>Final Answer:``: it names it now."""
        return Mode._naming(text, "answer", "inline")

    @property
    def answer_lines(self) -> bool:
        return self.answer == "s1"
