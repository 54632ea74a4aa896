"""The canonical problem table: every dataset, from the hub or a local file, becomes these columns.

One row per problem. Code datasets add their own columns after these (see
``Benchmark.extra_columns``); readers rely only on the ones named here.

    >>> COLUMNS
    ('id', 'dataset', 'problem', 'answer', 'task', 'task_version')
    >>> render_answer(342.0), render_answer(["$3$"]), render_answer(["1", "2"])
    ('342', '$3$', '1, 2')
"""

from __future__ import annotations

import math
from typing import Any

ID = "id"  # str, stable per problem: the source's id field, else f"{dataset}-{row_index}"
DATASET = "dataset"  # str, the registry name (or the file stem / --name for local files)
PROBLEM = "problem"  # str, the problem statement given to the model
ANSWER = "answer"  # str, the reference answer the reward compares against
TASK = "task"  # str, picks the reward function ("math"; later "code")
TASK_VERSION = "task_version"  # int, bumped when a benchmark's row mapping changes

COLUMNS = (ID, DATASET, PROBLEM, ANSWER, TASK, TASK_VERSION)

# The reasoning format: a completion is thinking, THINK_END, then the solution. A model's own
# markers come from its tokenizer at decode time (e1.engine.markers); rewards read completions
# that e1 has already rewritten with these defaults.
THINK_START = "<think>"
THINK_END = "</think>"


class CompletionText(str):
    """A completion as a reward receives it: its text (thinking, :data:`THINK_END` if thinking ended,
    the solution), a ``str`` as TRL's rewards take, that carries e1's token split: ``thinking`` and
    ``solution`` (None when thinking never ended). The split is the engine's, made on token ids,
    so a literal ``</think>`` the model wrote in its thinking or its solution is text, never a cut.

        >>> text = CompletionText("I guess </think> 42", None)   # thinking that never ended
        >>> text.solution is None, str(text)
        (True, 'I guess </think> 42')
        >>> CompletionText.of("<think>hm</think>42").solution   # a text e1 did not generate: cut at the last marker
        '42'
    """

    __slots__ = ("thinking", "solution")
    thinking: str
    solution: str | None

    def __new__(cls, thinking: str, solution: str | None, end_marker: str = THINK_END) -> CompletionText:
        text = super().__new__(cls, thinking if solution is None else f"{thinking}{end_marker}{solution}")
        text.thinking, text.solution = str(thinking), None if solution is None else str(solution)
        return text

    def __reduce__(self):
        return CompletionText, (self.thinking, self.solution)

    @classmethod
    def of(cls, completion: str) -> CompletionText:
        """``completion`` with its split: its own if it carries one; a plain text (one e1 did not
        decode: a file, a test, a library caller) is cut at its last :data:`THINK_END`."""
        if isinstance(completion, CompletionText):
            return completion
        text = str(completion)
        end = text.rfind(THINK_END)
        return cls(text, None) if end < 0 else cls(text[:end], text[end + len(THINK_END) :])


def missing_columns(columns: Any) -> list[str]:
    """The canonical columns absent from ``columns`` (empty when a table is canonical)."""
    present = set(columns)
    return [column for column in COLUMNS if column not in present]


def render_answer(value: Any) -> str:
    """A reference answer as text: integral floats lose their ``.0``; lists are joined with ", ".

    Sources store answers as strings, ints, floats (AMC) or lists (OlympiadBench);
    "" means the answer is missing.

    >>> render_answer(None), render_answer(" 7 "), render_answer(0.5), render_answer([])
    ('', '7', '0.5', '')
    """
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return ", ".join(part for part in map(render_answer, value) if part)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def render_id(value: Any) -> str:
    """A source id as text: ``60`` and ``60.0`` both become ``"60"``; missing becomes ""."""
    if isinstance(value, (list, tuple)):
        return ""
    return render_answer(value)
