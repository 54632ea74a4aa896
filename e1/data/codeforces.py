"""Codeforces: the CodeElo problem set (Qwen/CodeElo), 57 recent contests, for `e1 elo`.

    e1 data prepare codeforces
    e1 eval --model M --datasets codeforces --n 8 --out runs/cf && e1 elo runs/cf/samples.parquet

Problem ids are ``<contest id><index>`` (``1971A``), as ``e1 elo`` expects. The statement
is assembled from CodeElo's fields (title, time and memory limits, description, input and
output format, interaction, examples, note). CodeElo ships only the statements' examples;
its own judge is Codeforces itself, so here the examples are the tests: a pass is
"passes the examples", an optimistic stand-in for an accepted submission.
Extra columns: ``contest_id``, ``problem_index``, ``rating``, ``time_limit_s``, ``memory_limit_mb``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from e1.data import schema
from e1.data.code import stdio_test, tests_json
from e1.data.registry import Benchmark, Fields, RowError, field_text, register

_PROBLEM_ID = re.compile(r"(\d+)([A-Za-z][A-Za-z0-9]*)")
_URL_ID = re.compile(r"/(?:contest|gym|problemset/problem)/(\d+)/(?:problem/)?([A-Za-z][A-Za-z0-9]*)")


def problem_id(record: Mapping[str, Any], field: str = "problem_id") -> tuple[str, str]:
    """(contest id, index) from ``problem_id`` like ``1971A``, else from the problem's url.

    >>> problem_id({"problem_id": "1971A"}), problem_id({"url": "https://codeforces.com/contest/2000/problem/B1"})
    (('1971', 'A'), ('2000', 'B1'))
    """
    match = _PROBLEM_ID.fullmatch(str(record.get(field) or "").strip())
    if match is None:
        match = _URL_ID.search(str(record.get("url") or ""))
    if match is None:
        raise RowError(field, "is not a Codeforces id like 1971A (and the url names no problem)")
    return match.group(1), match.group(2).upper()


def statement(record: Mapping[str, Any], fields: Fields) -> str:
    """The problem as Codeforces shows it: title, limits, statement, I/O format, examples, note."""
    parts = [str(record.get("title") or "").strip()]
    limits = _limits(record)
    if limits:
        parts.append(limits)
    parts.append(field_text(record, fields.problem))
    for heading, key in (("Input", "input"), ("Output", "output"), ("Interaction", "interaction")):
        text = str(record.get(key) or "").strip()
        if text:
            parts.append(f"{heading}\n{text}")
    examples = _examples(record, fields.answer)
    if examples:
        parts.append(
            "Examples\n"
            + "\n".join(
                f"Input\n```\n{given.rstrip()}\n```\nOutput\n```\n{wanted.rstrip()}\n```" for given, wanted in examples
            )
        )
    note = str(record.get("note") or "").strip()
    if note:
        parts.append(f"Note\n{note}")
    return "\n\n".join(part for part in parts if part)


def to_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    contest, index = problem_id(record, fields.id or "problem_id")
    tests = [stdio_test(given, wanted) for given, wanted in _examples(record, fields.answer)]
    return {
        schema.ID: f"{contest}{index}",
        schema.PROBLEM: statement(record, fields),
        schema.ANSWER: tests_json(tests, fields.answer),
        "contest_id": contest,
        "problem_index": index,
        "rating": _number(record.get("rating")),
        "time_limit_s": _number(record.get("time_limit_ms"), scale=1e-3),
        "memory_limit_mb": _number(record.get("memory_limit_mb")),
    }


def _limits(record: Mapping[str, Any]) -> str:
    seconds, megabytes = _number(record.get("time_limit_ms"), scale=1e-3), _number(record.get("memory_limit_mb"))
    lines = []
    if math.isfinite(seconds):
        lines.append(f"time limit per test: {seconds:g} second{'s' if seconds != 1 else ''}")
    if math.isfinite(megabytes):
        lines.append(f"memory limit per test: {megabytes:g} megabytes")
    return "\n".join(lines)


def _examples(record: Mapping[str, Any], field: str) -> list[tuple[str, str]]:
    """The statement's examples as (input, output) pairs; missing or null: none."""
    pairs = record.get(field)
    if pairs is None:
        return []
    if not isinstance(pairs, (list, tuple)):
        raise RowError(field, f"is a {type(pairs).__name__}, not a list of [input, output] pairs")
    return [_example(pair, field) for pair in pairs]


def _example(pair: Any, field: str) -> tuple[str, str]:
    if isinstance(pair, Mapping):
        return str(pair.get("input", "")), str(pair.get("output", ""))
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return str(pair[0]), str(pair[1])
    raise RowError(field, f"holds {type(pair).__name__} {pair!r:.40}, not an [input, output] pair")


def _number(value: Any, scale: float = 1.0) -> float:
    try:
        return float(value) * scale
    except (TypeError, ValueError):
        return float("nan")


register(
    Benchmark(
        name="codeforces",
        hub_id="Qwen/CodeElo",
        split="test",
        description="Codeforces problems of CodeElo (57 contests); tests are the statements' examples",
        expected_rows=408,
        fields=Fields(problem="description", answer="examples", id="problem_id"),
        task="code",
        prompt="codeforces",
        extra_columns=("contest_id", "problem_index", "rating", "time_limit_s", "memory_limit_mb"),
        to_row=to_row,
    )
)
