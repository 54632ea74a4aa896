"""MMLU-Pro: 12,032 questions over 14 subjects with up to 10 options (Wang et al., 2024). The
options keep the dataset's order (its answer is a letter of that order).

    e1 data prepare mmlu-pro
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e1.data.choice import EXTRA_COLUMNS, LETTERS, choice_row
from e1.data.registry import Benchmark, Fields, RowError, field_text, register


def mmlu_pro_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    options = record.get("options")
    if not isinstance(options, (list, tuple)) or len(options) < 2:
        raise RowError("options", "is not a list of two or more options")
    if len(options) > len(LETTERS):
        raise RowError("options", f"holds {len(options)} options, more than the {len(LETTERS)} letters A-{LETTERS[-1]}")
    letter = field_text(record, fields.answer).upper()
    if len(letter) != 1 or letter not in LETTERS[: len(options)]:
        raise RowError(fields.answer, f"is {letter!r}, not a letter of its {len(options)} options")
    return choice_row(field_text(record, fields.problem), list(options), LETTERS.index(letter), seed=None)


register(
    Benchmark(
        name="mmlu-pro",
        hub_id="TIGER-Lab/MMLU-Pro",
        split="test",
        description="MMLU-Pro, 14 subjects, up to 10 options",
        expected_rows=12032,
        fields=Fields(problem="question", answer="answer", id="question_id"),
        task="choice",
        extra_columns=EXTRA_COLUMNS,
        to_row=mmlu_pro_row,
    )
)
