"""Tests of code datasets in the code reward's format, from the shapes the sources store them in.

A code row's ``answer`` is its tests as one JSON string in the format of
:mod:`e1.rewards.code`, so ``score("code", completion, row["answer"])`` (:mod:`e1.rewards.scoring`) scores it:

    >>> tests_json([stdio_test("1 2\\n", "3\\n"), call_test("add", [1, 2], 3)])
    '[{"kind": "stdio", "input": "1 2\\\\n", "output": "3\\\\n"}, {"kind": "call", "fn": "add", "args": [1, 2], "expected": 3}]'
    >>> io_pairs_tests({"inputs": ["2\\n"], "outputs": ["4\\n"]})
    [{'kind': 'stdio', 'input': '2\\n', 'output': '4\\n'}]
    >>> io_pairs_tests({"fn_name": "double", "inputs": [[2]], "outputs": [[4]]}, starter_code="def double(x):")
    [{'kind': 'call', 'fn': 'double', 'args': [2], 'expected': 4}]

Source shapes handled here: APPS/TACO ``{"inputs", "outputs", "fn_name"}`` objects and
LiveCodeBench's ``{"input", "output", "testtype"}`` lists (functional inputs are one JSON value
per line). LiveCodeBench stores its private tests as base64 of zlib of a *pickled* JSON
string; :func:`decode_lcb_tests` reads that pickle's opcodes without unpickling (nothing in
the data is ever executed) and accepts only a pickle that holds exactly one string.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import pickletools
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from e1.data.registry import RowError

MAX_DECOMPRESSED_BYTES = 1 << 30  # LiveCodeBench's largest private test sets are far below this
_SOLUTION_CLASS = re.compile(r"^\s*class\s+Solution\b", re.MULTILINE)
_PICKLE_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_PICKLE_FRAMING = {"PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT", "STOP"}


def stdio_test(input: Any, output: Any) -> dict:
    """A stdin/stdout test; inputs or outputs stored as lists of lines are joined."""
    return {"kind": "stdio", "input": _text(input), "output": _text(output)}


def call_test(fn: str, args: Sequence[Any], expected: Any) -> dict:
    """A function-call test: ``fn(*args) == expected`` (``fn`` may be ``Solution.method``)."""
    return {"kind": "call", "fn": fn, "args": list(args), "expected": expected}


def tests_json(tests: Sequence[dict], field: str = "tests") -> str:
    """The tests as the JSON string stored in ``answer``; no tests is a blank ``field`` (row skipped)."""
    if not tests:
        raise RowError(field, "holds no tests", blank=True)
    return json.dumps(list(tests), ensure_ascii=False)


def call_name(fn_name: str, starter_code: str | None = "") -> str:
    """``Solution.fn_name`` when the starter code is a LeetCode-style ``class Solution``, else ``fn_name``."""
    return f"Solution.{fn_name}" if starter_code and _SOLUTION_CLASS.search(starter_code) else fn_name


def io_pairs_tests(io: Mapping[str, Any], starter_code: str | None = "") -> list[dict]:
    """Tests from an APPS/TACO ``{"inputs": [...], "outputs": [...], "fn_name"?}`` object.

    With ``fn_name`` each input is the argument list; an output stored as a one-element list
    is unwrapped (APPS's judge accepts either; the stored form is almost always wrapped).
    """
    inputs, outputs = io.get("inputs") or [], io.get("outputs") or []
    fn_name = io.get("fn_name")
    if not fn_name:
        return [stdio_test(i, o) for i, o in zip(inputs, outputs)]
    fn = call_name(fn_name, starter_code)
    return [call_test(fn, _arguments(i), unwrap_single(o)) for i, o in zip(inputs, outputs)]


def lcb_tests(tests: Sequence[Mapping[str, Any]], fn_name: str | None, starter_code: str | None = "") -> list[dict]:
    """Tests from LiveCodeBench-style ``{"input", "output", "testtype": "stdin" | "functional"}`` items."""
    converted = []
    for test in tests:
        if not isinstance(test, Mapping):
            raise TypeError(f"a test is a {type(test).__name__}, not an object")
        if test.get("testtype") == "functional":
            if not fn_name:
                raise RowError("metadata", "has no func_name for a functional test")
            converted.append(
                call_test(call_name(fn_name, starter_code), json_lines(test["input"]), json.loads(test["output"]))
            )
        else:
            converted.append(stdio_test(test["input"], test["output"]))
    return converted


def json_lines(text: str) -> list[Any]:
    """LiveCodeBench functional input: one JSON value per line, one line per argument."""
    return [json.loads(line) for line in text.strip().split("\n")]


def unwrap_single(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def decode_lcb_tests(text: str) -> list[dict]:
    """LiveCodeBench test cases: plain JSON, or base64(zlib(pickle(JSON string))), read without unpickling."""
    text = "" if text is None else text
    if not isinstance(text, str):
        raise RowError("private_test_cases", f"is a {type(text).__name__}, not text")
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return _json_list(text, "private_test_cases")
    try:
        packed = base64.b64decode(text, validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_DECOMPRESSED_BYTES)
    except (binascii.Error, zlib.error) as err:
        raise RowError("private_test_cases", f"is neither JSON nor base64+zlib ({err})") from None
    if inflater.unconsumed_tail:
        raise RowError("private_test_cases", f"decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes")
    return _json_list(pickled_string(raw), "private_test_cases")


def _json_list(text: str, field: str) -> list:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise RowError(field, f"is not valid JSON ({err.msg})") from None
    if not isinstance(value, list):
        raise RowError(field, f"holds a JSON {type(value).__name__}, not a list of tests")
    return value


def pickled_string(data: bytes) -> str:
    """The one string a pickle holds, read from its opcodes (``pickletools``), never executed.

    >>> import pickle
    >>> pickled_string(pickle.dumps('[{"input": "1"}]'))
    '[{"input": "1"}]'
    >>> pickled_string(pickle.dumps(print))
    Traceback (most recent call last):
    ...
    e1.data.registry.RowError: field 'private_test_cases' is a pickle of something other than one string (STACK_GLOBAL)
    """
    found = []
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name in _PICKLE_STRINGS:
                found.append(argument)
            elif opcode.name not in _PICKLE_FRAMING:
                raise RowError("private_test_cases", f"is a pickle of something other than one string ({opcode.name})")
    except ValueError as err:  # a truncated or malformed pickle
        raise RowError("private_test_cases", f"is not a readable pickle ({err})") from None
    if len(found) != 1:
        raise RowError("private_test_cases", f"is a pickle of {len(found)} strings, not one")
    return found[0]


def parse_json_field(record: Mapping[str, Any], field: str, default: Any, kind: type | tuple[type, ...]) -> Any:
    """``record[field]`` parsed if it is a JSON string (sources store objects both ways); a value
    that is not of ``kind`` (``list``, ``dict``, ...) is a RowError; missing or null: ``default``."""
    value = record.get(field)
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as err:
            raise RowError(field, f"is not valid JSON ({err.msg})") from None
    if value is None:
        return default
    if not isinstance(value, kind):
        wanted = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
        raise RowError(field, f"holds a {type(value).__name__}, not a {wanted}")
    return value


def optional_text(record: Mapping[str, Any], field: str) -> str:
    """``record[field]`` as text: "" when missing or null; any other non-text value is a RowError."""
    value = record.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RowError(field, f"is a {type(value).__name__}, not text")
    return value


@contextlib.contextmanager
def converting_tests(field: str) -> Iterator[None]:
    """Turn a failure while converting a row's tests (a test without input, an argument list that
    is a number, ...) into a RowError naming ``field``, the tests' source field."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        detail = " ".join(f"{type(err).__name__}: {err}".split())  # one line, whatever the data held
        raise RowError(field, f"holds a malformed test ({detail[:120]})") from None


def _arguments(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "\n".join(map(str, value)) + "\n"
    return "" if value is None else str(value)
