"""TACO (BAAI): 1,000 algorithmic test problems (Codeforces, AtCoder, CodeChef, Codewars, ...).

    e1 data prepare taco

The hub repository still carries a loading script, which current ``datasets`` no longer
runs, so its parquet file ``ALL/test-00000-of-00001.parquet`` is read directly. Tests come
from ``input_output`` (APPS format): stdin/stdout pairs, or calls of ``fn_name`` (a
``class Solution`` method when the starter code has one). TACO ships up to hundreds of
tests per problem; ``e1 eval --max-tests`` keeps the largest few.
Extra columns: ``starter_code``, ``fn_name``, ``difficulty``, ``source``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e1.data import schema
from e1.data.code import (
    converting_tests,
    io_pairs_tests,
    optional_text,
    parse_json_field,
    tests_json,
)
from e1.data.hub import hub_files
from e1.data.records import read_records
from e1.data.registry import Benchmark, Fields, field_text, register

TEST_FILE = "ALL/test-00000-of-00001.parquet"


def load(benchmark: Benchmark, options: Mapping[str, str]) -> list[dict[str, Any]]:
    [path] = hub_files(benchmark, [TEST_FILE])
    return read_records(path)[0]


def to_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    starter_code = optional_text(record, "starter_code")
    io = parse_json_field(record, fields.answer, {}, dict)
    with converting_tests(fields.answer):
        tests = io_pairs_tests(io, starter_code)
    return {
        schema.PROBLEM: field_text(record, fields.problem),
        schema.ANSWER: tests_json(tests, fields.answer),
        "starter_code": starter_code,
        "fn_name": str(io.get("fn_name") or ""),
        "difficulty": str(record.get("difficulty") or ""),
        "source": str(record.get("source") or ""),
    }


register(
    Benchmark(
        name="taco",
        hub_id="BAAI/TACO",
        split="test",
        description="TACO test set: algorithmic problems with stdin or function-call tests",
        expected_rows=1000,
        fields=Fields(problem="question", answer="input_output"),
        task="code",
        extra_columns=("starter_code", "fn_name", "difficulty", "source"),
        to_row=to_row,
        load=load,
    )
)
