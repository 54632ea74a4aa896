"""DeepCoder-Preview: the ~24k-problem code training set of DeepCoder (and E1-Code).

    e1 data prepare deepcoder

The union of the hub dataset's training configs ``primeintellect`` (SYNTHETIC-1),
``taco`` (TACO-verified) and ``lcbv5`` (LiveCodeBench v5 before August 2024), as DeepCoder
trains on. Each config stores ``tests`` in its source's shape (a TACO ``{"inputs",
"outputs", "fn_name"}`` object, or lists of ``{"input", "output", "testtype"|"type"}``);
all become the code reward's tests. Ids are ``<config>-<row>``. Rows without tests are skipped.
Extra columns: ``starter_code``, ``fn_name``, ``source`` (the config).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from e1.data import schema
from e1.data.code import (
    call_name,
    call_test,
    converting_tests,
    io_pairs_tests,
    json_lines,
    optional_text,
    parse_json_field,
    stdio_test,
    tests_json,
    unwrap_single,
)
from e1.data.hub import hub_records
from e1.data.registry import Benchmark, Fields, field_text, register

CONFIGS = ("primeintellect", "taco", "lcbv5")
_CALL_KINDS = ("functional", "function_call")


def load(benchmark: Benchmark, options: Mapping[str, str]) -> list[dict[str, Any]]:
    records = []
    for config in CONFIGS:
        for number, record in enumerate(hub_records(benchmark, config=config)):
            records.append({**record, "_source": config, "_id": f"{config}-{number}"})
    return records


def to_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    starter_code = optional_text(record, "starter_code")
    metadata = parse_json_field(record, "metadata", {}, dict)
    tests = parse_json_field(record, fields.answer, [], (list, dict))
    with converting_tests(fields.answer):
        if isinstance(tests, Mapping):
            converted = io_pairs_tests(tests, starter_code)
            fn_name = tests.get("fn_name") or ""
        else:
            converted = [_test(test, metadata, starter_code) for test in tests]
            fn_name = next((t["fn"].rpartition(".")[2] for t in converted if t["kind"] == "call"), "")
    return {
        schema.PROBLEM: field_text(record, fields.problem),
        schema.ANSWER: tests_json(converted, fields.answer),
        "starter_code": starter_code,
        "fn_name": str(fn_name),
        "source": str(record.get("_source") or ""),
    }


def _test(test: Mapping[str, Any], metadata: Mapping[str, Any], starter_code: str) -> dict:
    if not isinstance(test, Mapping):
        raise TypeError(f"a test is a {type(test).__name__}, not an object")
    kind = test.get("testtype") or test.get("type")
    if kind not in _CALL_KINDS:
        return stdio_test(test["input"], test["output"])
    fn_name = test.get("fn_name") or metadata.get("func_name")
    if not fn_name:
        raise ValueError("a function-call test names no function")
    given, wanted = test["input"], test["output"]
    args = json_lines(given) if isinstance(given, str) else list(given)
    expected = json.loads(wanted) if isinstance(wanted, str) else unwrap_single(wanted)
    return call_test(call_name(fn_name, starter_code), args, expected)


register(
    Benchmark(
        name="deepcoder",
        hub_id="agentica-org/DeepCoder-Preview-Dataset",
        split="train",
        description="DeepCoder-Preview code training set (PrimeIntellect, TACO-verified, LCB v5)",
        expected_rows=24287,
        fields=Fields(problem="problem", answer="tests", id="_id"),
        task="code",
        extra_columns=("starter_code", "fn_name", "source"),
        to_row=to_row,
        load=load,
    )
)
