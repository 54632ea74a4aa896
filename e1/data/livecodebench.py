"""LiveCodeBench (code generation, lite): LeetCode, AtCoder and Codeforces problems by release date.

    e1 data prepare livecodebench                                   # release v5, 2024-08-01..2025-02-01
    e1 data prepare livecodebench --release v6 --start-date 2025-02-01 --end-date 2025-05-01

The hub repository ``livecodebench/code_generation_lite`` is a loading script over JSON-lines
files (``test.jsonl``, ``test2.jsonl``, ...; release vN is the first N of them), which current
``datasets`` no longer runs, so the files are read directly. The date window keeps problems
with ``start <= contest_date <= end`` (both days at 00:00, as LiveCodeBench's own
``--start_date``/``--end_date``); an empty date leaves that side open. The default window is
the test set of DeepCoder and Elastic Reasoning (279 problems of release v5).

Each row's tests are the public then the private test cases: stdin ones become ``stdio``
tests, functional (LeetCode) ones ``Solution.<func_name>`` calls. Private tests are stored
compressed as a pickled string; they are decoded without unpickling (see ``e1/data/code.py``).
Extra columns: ``starter_code``, ``difficulty``, ``date``, ``platform``, ``contest_id``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from e1.data import schema
from e1.data.code import (
    converting_tests,
    decode_lcb_tests,
    lcb_tests,
    optional_text,
    parse_json_field,
    tests_json,
)
from e1.data.hub import hub_files
from e1.data.records import read_records
from e1.data.registry import Benchmark, Fields, Option, field_text, register
from e1.errors import DataError

_RELEASE = re.compile(r"(?:release_)?v(\d+)")


def release_files(release: str) -> list[str]:
    """The files of a release: ``v5`` (or ``release_v5``) is test.jsonl, test2.jsonl, ..., test5.jsonl.

    >>> release_files("v3")
    ['test.jsonl', 'test2.jsonl', 'test3.jsonl']
    """
    match = _RELEASE.fullmatch(release.strip())
    if not match or int(match.group(1)) < 1:
        raise DataError(f"unknown LiveCodeBench release {release!r}", hint="use v1, v2, ... (e.g. --release v5)")
    return ["test.jsonl"] + [f"test{n}.jsonl" for n in range(2, int(match.group(1)) + 1)]


def _day(text: str, option: str) -> datetime | None:
    if not text.strip():
        return None
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d")
    except ValueError:
        raise DataError(f"bad --{option.replace('_', '-')} {text!r}", hint="write a day as YYYY-MM-DD") from None


def load(benchmark: Benchmark, options: Mapping[str, str]) -> list[dict[str, Any]]:
    """The release's problems whose contest date lies in the window."""
    start, end = _day(options["start_date"], "start_date"), _day(options["end_date"], "end_date")
    records = []
    for path in hub_files(benchmark, release_files(options["release"])):
        records += read_records(path)[0]
    kept = [record for record in records if _in_window(record, start, end)]
    if not kept:
        raise DataError(
            f"livecodebench: no problem of release {options['release']} lies in "
            f"{options['start_date'] or '…'}..{options['end_date'] or '…'}",
            hint="widen --start-date/--end-date or choose a later --release",
        )
    return kept


def _in_window(record: Mapping[str, Any], start: datetime | None, end: datetime | None) -> bool:
    value = record.get("contest_date")
    try:
        date = datetime.fromisoformat(str(value)).replace(tzinfo=None)  # the contest's own calendar day
    except ValueError:
        raise DataError(
            f"livecodebench/code_generation_lite: problem {record.get('question_id')!r}: "
            f"field 'contest_date' holds {value!r:.40}, not a date",
            hint="the hub dataset may have changed; prepare from a file: e1 data prepare --from FILE",
        ) from None
    return (start is None or start <= date) and (end is None or date <= end)


def to_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    starter_code = optional_text(record, "starter_code")
    metadata = parse_json_field(record, "metadata", {}, dict)
    cases = parse_json_field(record, fields.answer, [], list) + decode_lcb_tests(record.get("private_test_cases"))
    with converting_tests(fields.answer):  # a test without input/output, or unreadable JSON in one
        tests = lcb_tests(cases, metadata.get("func_name"), starter_code)
    return {
        schema.PROBLEM: field_text(record, fields.problem),
        schema.ANSWER: tests_json(tests, fields.answer),
        "starter_code": starter_code,
        "difficulty": str(record.get("difficulty") or ""),
        "date": str(record.get("contest_date") or "")[:10],
        "platform": str(record.get("platform") or ""),
        "contest_id": str(record.get("contest_id") or ""),
    }


register(
    Benchmark(
        name="livecodebench",
        hub_id="livecodebench/code_generation_lite",
        split="test",
        description="LiveCodeBench code generation (lite), release v5, contests 2024-08-01..2025-02-01",
        expected_rows=279,
        fields=Fields(problem="question_content", answer="public_test_cases", id="question_id"),
        task="code",
        extra_columns=("starter_code", "difficulty", "date", "platform", "contest_id"),
        to_row=to_row,
        load=load,
        options=(
            Option("release", "v5", "LiveCodeBench release: v5 = every problem released up to v5"),
            Option("start_date", "2024-08-01", "first contest day kept (YYYY-MM-DD; empty: no limit)"),
            Option("end_date", "2025-02-01", "last contest day kept (YYYY-MM-DD; empty: no limit)"),
        ),
    )
)
