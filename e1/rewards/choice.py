"""Multiple-choice reward: 1.0 when the letter the solution chose equals the answer's letter.

The letter is read from the last ``\\boxed{}`` after the end of thinking (``\\boxed{C}``,
``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\boxed{C) 42}``); without a box, from the last
"answer is X" / "Answer: X". Anything else is no answer (0.0): a letter is never guessed from
running text, so a solution that lists every option does not score.

    >>> [s.reward for s in choice_reward([r"<think>B or C?</think> So \\boxed{C}.",
    ...                                   "<think>hm</think> The answer is (b).", "<think>A B C D"], ["C", "B", "A"])]
    [1.0, 1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from e1.rewards.math import extract_boxed
from e1.rewards.registry import Scored, register_reward, solution_of

_IN_BOX = re.compile(r"^\s*(?:\\text\{|\\mathrm\{|\\textbf\{)?\(?\s*([A-Pa-p])\s*\)?\}?(?:[\s).:]|$)")
_STATED = re.compile(r"answer\s*(?:is|:)\s*(?:option\s*)?\(?\s*([A-Pa-p])\s*\)?(?![A-Za-z])", re.IGNORECASE)


def chosen_letter(solution: str) -> str | None:
    """The option letter a solution chose (upper case), or None.

    >>> chosen_letter(r"\\boxed{\\text{D}}"), chosen_letter("Final Answer: a"), chosen_letter("I like B")
    ('D', 'A', None)
    """
    boxed = extract_boxed(solution)
    if boxed is not None:
        match = _IN_BOX.match(boxed)
        return match.group(1).upper() if match else None
    stated = _STATED.findall(solution)
    return stated[-1].upper() if stated else None


@register_reward("choice")
def choice_reward(completions: Sequence[str], answers: Sequence[str], **columns) -> list[Scored]:
    scored = []
    for completion, answer in zip(completions, answers, strict=True):
        solution = solution_of(completion)
        letter = chosen_letter(solution) if solution is not None else None
        scored.append(Scored(1.0 if letter is not None and letter == str(answer).strip().upper() else 0.0, letter))
    return scored
