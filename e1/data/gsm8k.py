"""GSM8K: 1,319 grade-school math word problems (Cobbe et al., 2021); the answer is the number
after the solution's ``####`` (thousands separators removed).

    e1 data prepare gsm8k
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e1.data.registry import Benchmark, Fields, RowError, field_text, register


def final_number(solution: str) -> str:
    """GSM8K's final answer: the text after the last ``####``, without commas.

    >>> final_number("She has 3 + 4 = <<3+4=7>>7 apples.\\n#### 1,007")
    '1007'
    """
    head, marker, tail = solution.rpartition("####")
    answer = tail.strip().replace(",", "") if marker else ""
    if not answer:
        raise RowError("answer", "has no final answer after ####")
    return answer


def gsm8k_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    return {"problem": field_text(record, fields.problem), "answer": final_number(field_text(record, fields.answer))}


register(
    Benchmark(
        name="gsm8k",
        hub_id="openai/gsm8k",
        config="main",
        split="test",
        description="GSM8K, grade-school math word problems",
        expected_rows=1319,
        fields=Fields(problem="question"),
        to_row=gsm8k_row,
    )
)
