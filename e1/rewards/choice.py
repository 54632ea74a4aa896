"""Multiple-choice reward: 1.0 when the letter the solution chose equals the answer's letter.

A letter is read, never guessed: it counts only where the solution (the text after the end of
thinking) states it as a choice, in this order, and nothing else in the text is an answer (0.0):

1. **A box.** The last ``\\boxed{}`` holds the letter alone (``\\boxed{C}``, ``\\boxed{(c)}``,
   ``\\boxed{\\text{D}}``, ``\\boxed{C.}``) or the letter written as an option, ``)``, ``.`` or
   ``:`` and its text (``\\boxed{C) 42}``). Any case: a box holds nothing but the answer. A box
   that holds anything else (``\\boxed{42}``, ``\\boxed{A bit}``) is no answer.
2. **A stated answer.** Without a box, the last "answer is X" / "answer: X" (any case, with an
   optional "option"/"choice" and ``**`` or ``$`` before the letter), where X directly follows and
   is ``(X)`` in parentheses (any case) or a capital letter that is a word of its own (no letter,
   digit, apostrophe or hyphen after it: "The answer is B because ..." states B). "A" and "I" are
   English words too, so they count only before the end of the text or line, or punctuation
   (``.`` ``,`` ``;`` ``:`` ``!`` ``?`` ``)`` ``*`` ``$``) that no word follows. A lower-case bare
   letter never counts ("the answer is a ..."). So "The answer is a bit tricky, so (C)." and
   "Answer: I believe it is B." state nothing: what follows "answer" is running text, and a letter
   further on is not read.
3. **The letter alone.** Without either, a solution that is one line and is the letter alone, or
   begins with a capital letter written as an option (``C``, ``(C)``, ``C.``, ``C) 42``): what a
   model writes after s1's forced "Final Answer:", which is not part of the scored text.

A solution that lists every option (several lines ``A) ...``) states nothing. Where e1 reads
differently from lm-eval's and lighteval's extractors on the same strings, and why:
``tests/test_choice_extraction.py``.

    >>> [s.reward for s in choice_reward([r"<think>B or C?</think> So \\boxed{C}.",
    ...                                   "<think>hm</think> The answer is (b).", "<think>A B C D"], ["C", "B", "A"])]
    [1.0, 1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from e1.rewards.math import extract_boxed
from e1.rewards.registry import Scored, register_reward, solution_of

_LETTER = "A-P"  # the option letters e1's multiple-choice rows use (e1.data.choice.LETTERS)
# 1. the box's content: optional \text{...}-like wrapper, the letter (parenthesised or not), then the
# end, a closing ")" or "." alone, or ")" "." ":" followed by the option's text
_IN_BOX = re.compile(
    rf"(?:\\(?:text|textbf|mathrm|mathbf)\{{)?\s*\(?\s*([{_LETTER}{_LETTER.lower()}])\s*"
    r"(?:\)?\s*\.?\s*\}?\s*$|[).:]\s*\S)"
)
# 2. "answer is" / "answer:" and the letter: (x) in parentheses, or a capital that no word continues
# "A" and "I" are also words ("A bit", "I believe"): they count only before punctuation or the end
_ENDS = r"(?=\s*$|\s*\n|[.,;:!?)*$}](?![\w'’]))"
_STATED = re.compile(
    rf"(?i:answer\s*(?:is\s*:?|:)\s*(?:(?:option|choice)\s+)?)(?:\*\*|\$|\\text\{{)?\s*"
    rf"(?:\(([{_LETTER}{_LETTER.lower()}])\)|([B-HJ-P])(?![\w'’-])|([AI]){_ENDS})"
)
# 3. the whole (one-line) solution is the letter, or begins with it written as an option
_ALONE = re.compile(rf"\s*(?:\*\*)?\(?([{_LETTER}])(?:\)|\.|:|\*\*)?\s*$|\s*\(?([{_LETTER}])[).:]\s+\S[^\n]*$")


def chosen_letter(solution: str) -> str | None:
    """The option letter a solution chose (upper case), or None (the rules: the module's docstring).

    >>> chosen_letter(r"\\boxed{\\text{D}}"), chosen_letter("Final Answer: (a)"), chosen_letter("I like B")
    ('D', 'A', None)
    >>> chosen_letter("The answer is a bit tricky, so (C)."), chosen_letter("Answer: I believe it is B.")
    (None, None)
    """
    boxed = extract_boxed(solution)
    if boxed is not None:
        match = _IN_BOX.match(boxed)
        return match.group(1).upper() if match else None
    stated = ["".join(groups) for groups in _STATED.findall(solution)]
    if stated:
        return stated[-1].upper()
    alone = _ALONE.fullmatch(solution.strip())
    return (alone.group(1) or alone.group(2)) if alone else None


@register_reward("choice")
def choice_reward(completions: Sequence[str], answers: Sequence[str], **columns) -> list[Scored]:
    scored = []
    for completion, answer in zip(completions, answers, strict=True):
        solution = solution_of(completion)
        letter = chosen_letter(solution) if solution is not None else None
        scored.append(Scored(1.0 if letter is not None and letter == str(answer).strip().upper() else 0.0, letter))
    return scored
