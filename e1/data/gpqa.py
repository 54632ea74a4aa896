"""GPQA-Diamond: 198 graduate-level science questions that experts answer and skilled non-experts
miss (Rein et al., 2023), four options. The hub lists the correct answer first: e1 shuffles each
problem's options with a seed derived from its Record ID (recorded in ``shuffle_seed``).

    e1 data prepare gpqa-diamond     # a gated hub dataset: accept its terms, then `hf auth login`
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e1.data.choice import EXTRA_COLUMNS, choice_row, shuffle_seed
from e1.data.registry import Benchmark, Fields, RowError, field_text, register

NAME = "gpqa-diamond"
WRONG = ("Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def gpqa_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    options = [field_text(record, fields.answer)] + [field_text(record, name) for name in WRONG]
    problem_id = field_text(record, fields.id)
    if len(set(options)) < len(options):
        raise RowError(fields.answer, "repeats another option")
    row = choice_row(field_text(record, fields.problem), options, correct=0, seed=shuffle_seed(NAME, problem_id))
    return {"id": problem_id, **row}


register(
    Benchmark(
        name=NAME,
        hub_id="Idavidrein/gpqa",
        config="gpqa_diamond",
        split="train",
        description="GPQA-Diamond, graduate-level science, 4 options (shuffled per problem, seeded)",
        expected_rows=198,
        fields=Fields(problem="Question", answer="Correct Answer", id="Record ID"),
        task="choice",
        extra_columns=EXTRA_COLUMNS,
        to_row=gpqa_row,
    )
)
