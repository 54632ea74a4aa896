"""Running code against tests in the sandbox: the core of the code reward.

    >>> run_code_tests("print(4)", '[{"kind": "stdio", "input": "2 3\\n", "output": "5\\n"}]')
    CodeResult(passed=0, total=1, first_failure="test 1: wrong answer: expected '5', got '4'")

How a verdict is reached, so that only a passing program can pass (see e1/rewards/harness.py):

- ``stdio``: the program's stdout is compared here, in the parent.
- ``call``: the model's code runs in a *solution server* (``harness.serve``); the parent sends
  the arguments over a pipe and compares the returned plain data with ``expected`` here.
- ``code`` (HumanEval): the test code runs in a second sandboxed run (``harness.check``) in
  which every function of the solution is a proxy to the solution server; its exit status
  is the verdict. Return values cross as plain data only, so an object whose ``__eq__`` is
  always true fails, and no secret (token, expected value) is ever inside the model's run.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import select
import signal
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path
from typing import Any

from e1.errors import RewardError
from e1.rewards import harness
from e1.sandbox import Limits, RunResult, Sandbox

DEFAULT_TIME_LIMIT_S = 6.0  # per test, as in the reference code (LiveCodeBench)
FLOAT_TOLERANCE = 1e-6  # relative or absolute
PYTHON_FENCES = ("", "python", "py", "python3")
FORMAT_HINT = (
    'tests are a JSON list of {"kind": "stdio", "input", "output"}, '
    '{"kind": "call", "fn", "args", "expected"} or {"kind": "code", "code", "entry_point"}; '
    "see e1/rewards/code.py"
)

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_FUNCTION = re.compile(r"(?:[A-Za-z_]\w*\.)?[A-Za-z_]\w*")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
CALL_PRELUDE = (
    "from typing import *\n"
    "import bisect, collections, functools, heapq, itertools, math, re, string\n"
    "from collections import *\n"
    "from functools import lru_cache, reduce, cache\n"
    "from heapq import heappush, heappop, heapify\n"
    "from bisect import bisect_left, bisect_right, insort\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from math import inf, gcd, sqrt, ceil, floor, comb\n"
)


@dataclass(frozen=True)
class StdioTest:
    input: str
    output: str

    @property
    def size(self) -> int:
        return len(self.input)


@dataclass(frozen=True)
class CallTest:
    fn: str  # "Solution.method" or "function"
    args: tuple
    expected: Any

    @property
    def size(self) -> int:
        return len(json.dumps(self.args))


@dataclass(frozen=True)
class CodeTest:
    code: str
    entry_point: str | None = None

    @property
    def size(self) -> int:
        return len(self.code)


Test = StdioTest | CallTest | CodeTest


@dataclass(frozen=True)
class CodeResult:
    """``passed`` of ``total`` tests passed before the first failure (tests stop there)."""

    passed: int
    total: int
    first_failure: str | None  # e.g. "test 3: wrong answer: expected '5', got '4'"

    @property
    def fraction(self) -> float:
        return self.passed / self.total

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total


def run_code_tests(
    code: str,
    tests: str | Sequence[dict] | Sequence[Test],
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    max_tests: int | None = None,
    sandbox: Sandbox | None = None,
) -> CodeResult:
    """Run ``code`` against ``tests`` in order until the first failure."""
    parsed = parse_tests(tests)
    if max_tests is not None:
        if max_tests < 1:
            raise RewardError(f"max_tests must be >= 1, got {max_tests}", hint="or None for all tests")
        keep = sorted(sorted(range(len(parsed)), key=lambda i: -parsed[i].size)[:max_tests])
        parsed = [parsed[i] for i in keep]
    box = sandbox or DEFAULT_SANDBOX
    limits = replace(box.limits, wall_s=time_limit_s)
    for number, test in enumerate(parsed, 1):
        failure = _JUDGES[type(test)](box, code, test, limits)
        if failure is not None:
            return CodeResult(passed=number - 1, total=len(parsed), first_failure=f"test {number}: {failure}")
    return CodeResult(passed=len(parsed), total=len(parsed), first_failure=None)

def extract_code(completion: str, end_marker: str = "</think>") -> str | None:
    """The last Python (or unlabelled) fenced block after the last ``end_marker``, dedented.

    ``end_marker=""`` looks at the whole completion (a model that does not think).
    """
    end = completion.rfind(end_marker) if end_marker else 0
    if end < 0:
        return None
    blocks, language, body = [], None, []
    for line in completion[end + len(end_marker) :].splitlines():
        fence = line.strip().startswith("```")
        if language is None and fence:
            info = line.strip()[3:].split()
            language, body = (info[0].lower() if info else ""), []
        elif fence:
            blocks.append((language, textwrap.dedent("\n".join(body) + "\n")))
            language = None
        elif language is not None:
            body.append(line)
    python = [code for language, code in blocks if language in PYTHON_FENCES]
    return python[-1] if python else None


def parse_tests(tests: str | Sequence[dict] | Sequence[Test]) -> list[Test]:
    """Validate tests in the canonical format (module docstring); RewardError says what is wrong."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as err:
            raise RewardError(f"tests are not valid JSON: {err}", hint=FORMAT_HINT) from None
    if not isinstance(tests, (list, tuple)):
        raise RewardError(f"tests must be a list, got {type(tests).__name__}", hint=FORMAT_HINT)
    if not tests:
        raise RewardError("no tests to run", hint=FORMAT_HINT)
    return [_parse_test(test, number) for number, test in enumerate(tests, 1)]


def _parse_test(test: Any, number: int) -> Test:
    if isinstance(test, (StdioTest, CallTest, CodeTest)):
        return test
    fields = {
        "stdio": {"input": str, "output": str},
        "call": {"fn": str, "args": list, "expected": object},
        "code": {"code": str, "entry_point": str},
    }
    kind = test.get("kind") if isinstance(test, dict) else None
    if kind not in fields:
        raise RewardError(f"test {number}: kind must be one of stdio, call, code; got {kind!r}", hint=FORMAT_HINT)
    wanted = fields[kind]
    unknown = set(test) - set(wanted) - {"kind"}
    missing = set(wanted) - set(test) - ({"entry_point"} if kind == "code" else set())
    wrong = [name for name in wanted if name in test and not isinstance(test[name], wanted[name])]
    if unknown or missing or wrong:
        problems = [
            f"{label} {', '.join(sorted(names))}"
            for label, names in (("unknown field", unknown), ("missing field", missing), ("wrong type of", wrong))
            if names
        ]
        raise RewardError(f"test {number} ({kind}): {'; '.join(problems)}", hint=FORMAT_HINT)
    if kind == "stdio":
        return StdioTest(input=test["input"], output=test["output"])
    if kind == "call":
        if not _FUNCTION.fullmatch(test["fn"]):
            raise RewardError(f"test {number}: fn {test['fn']!r} is not 'function' or 'Class.method'", hint=FORMAT_HINT)
        return CallTest(fn=test["fn"], args=tuple(test["args"]), expected=test["expected"])
    entry_point = test.get("entry_point")
    if entry_point is not None and not _IDENTIFIER.fullmatch(entry_point):
        raise RewardError(f"test {number}: entry_point {entry_point!r} is not a name", hint=FORMAT_HINT)
    return CodeTest(code=test["code"], entry_point=entry_point)


# --- programs and judging ----------------------------------------------------------------------


# --- judging: the verdict is always reached outside the model's process -------------------------

_HARNESS = Path(harness.__file__).read_text(encoding="utf-8")


def _judge_stdio(box: Sandbox, code: str, test: StdioTest, limits: Limits) -> str | None:
    run = _run(box, code, test.input.encode(), limits, ())
    failure = _run_failure(run, limits)
    if failure is not None:
        return failure
    difference = compare_output(test.output, run.stdout.decode("utf-8", errors="replace"))
    return None if difference is None else f"wrong answer: {difference}"


def _judge_call(box: Sandbox, code: str, test: CallTest, limits: Limits) -> str | None:
    deadline = time.monotonic() + limits.wall_s
    request = json.dumps([test.fn, harness.encode(list(test.args))]) + "\n"
    served, reply = _with_solution(box, code, CALL_PRELUDE, limits,
                                   lambda out, into: _ask(out, into, request, deadline))
    if reply is None:
        return _run_failure(served, limits) or "exited before the tests finished"
    if "error" in reply:
        return f"runtime error: {': '.join(reply['error'])}"
    try:
        value = _as_json(harness.decode(reply["ok"]))
    except (TypeError, ValueError, KeyError):
        return "wrong answer: could not read the returned value"
    if same_value(value, test.expected):
        return None
    return f"wrong answer: expected {_short(json.dumps(test.expected))}, got {_short(json.dumps(value))}"


def _judge_code(box: Sandbox, code: str, test: CodeTest, limits: Limits) -> str | None:
    checker = _HARNESS + f"\ncheck({test.code!r}, {test.entry_point!r})\n"
    served, checked = _with_solution(box, code, _helpers(test.code), limits,
                                     lambda out, into: _run(box, checker, b"", limits, (into, out)))
    if checked.ok:
        return None
    for run in (checked, served):
        if run.killed_reason is not None:
            return _run_failure(run, limits)
    if checked.returncode == harness.EXIT_SOLUTION_GONE:
        return _run_failure(served, limits) or "exited before the tests finished"
    return f"runtime error: {_error_line(checked)}"


_JUDGES: dict[type, Callable[[Sandbox, str, Any, Limits], str | None]] = {
    StdioTest: _judge_stdio, CallTest: _judge_call, CodeTest: _judge_code,
}


def _helpers(test_code: str) -> str:
    """The imports and definitions of a code test except ``check`` (HumanEval puts the prompt's
    helpers such as ``encode_cyclic`` there): the solution may use them; the asserts stay out."""
    try:
        module = ast.parse(test_code)
    except SyntaxError:
        return ""
    kept = [node for node in module.body if isinstance(node, (ast.Import, ast.ImportFrom)) or (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != "check")]
    return "\n\n".join(ast.get_source_segment(test_code, node) or "" for node in kept)


def _with_solution(box: Sandbox, code: str, prelude: str, limits: Limits,
                   client: Callable[[int, int], Any]) -> tuple[RunResult, Any]:
    """Run the solution server (``prelude``, then ``code``) while ``client(requests_fd,
    replies_fd)`` talks to it."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    server = _HARNESS + f"\nserve({code!r}, {prelude!r})\n"
    served: list[RunResult | BaseException] = []

    def serve() -> None:
        try:
            served.append(_run(box, server, b"", limits, (requests_read, replies_write)))
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            served.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        outcome = client(requests_write, replies_read)
    finally:
        thread.join()
    if isinstance(served[0], BaseException):
        raise served[0]
    return served[0], outcome


def _ask(requests: int, replies: int, request: str, deadline: float) -> dict | None:
    """Send one request and read one reply line before ``deadline``; None if none came."""
    try:
        with os.fdopen(requests, "wb") as out:
            out.write(request.encode())
        buffer = b""
        while b"\n" not in buffer:
            ready, _, _ = select.select([replies], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(replies, 1 << 16) if ready else b""
            if not chunk:
                return None
            buffer += chunk
        return json.loads(buffer.split(b"\n", 1)[0])
    except (OSError, ValueError):
        return None
    finally:
        os.close(replies)


def _run(box: Sandbox, program: str, stdin: bytes, limits: Limits, fds: Sequence[int]) -> RunResult:
    """``box.run``, with a per-run OS failure (no pipes left, ...) scored as that run failing."""
    try:
        return box.run(program, stdin, limits, fds=fds)
    except OSError as err:
        return RunResult(127, b"", f"e1 sandbox: {err}".encode(), False, None, 0.0, box.isolation)


def _run_failure(run: RunResult, limits: Limits) -> str | None:
    if run.killed_reason == "timeout":
        return f"timeout after {limits.wall_s:g}s"
    if run.killed_reason == "output limit":
        return f"output limit exceeded ({limits.output_bytes} bytes)"
    if run.killed_reason == "memory limit":
        return f"memory limit exceeded ({limits.memory_bytes} bytes)"
    if run.returncode != 0:
        return f"runtime error: {_error_line(run)}"
    return None


def _as_json(value: Any) -> Any:
    """A returned value as JSON sees it: tuples are lists, sets sorted lists."""
    if isinstance(value, (set, frozenset)):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    if isinstance(value, (list, tuple)):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _as_json(v) for k, v in value.items()}
    return value


def _error_line(run: RunResult) -> str:
    if run.returncode < 0:
        try:
            return f"killed by {signal.Signals(-run.returncode).name}"
        except ValueError:
            return f"killed by signal {-run.returncode}"
    lines = [line for line in run.stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return _short(lines[-1].strip(), 200) if lines else f"exit code {run.returncode}"

def compare_output(expected: str, got: str) -> str | None:
    """None if ``got`` matches ``expected`` (tolerantly, see the module docstring), else the difference.

    >>> compare_output("1 2.5\\n\\n", "1   2.5000001  \\n")
    >>> compare_output("3\\n4\\n", "3\\n5\\n")
    "expected '4', got '5' on line 2"
    """
    want, have = _lines(expected), _lines(got)
    where = len(want) > 1 or len(have) > 1
    for number, (line, answer) in enumerate(zip_longest(want, have), 1):
        suffix = f" on line {number}" if where else ""
        if line is None:
            return f"expected end of output, got {_short(answer)!r}{suffix}"
        if answer is None:
            return f"expected {_short(line)!r}, got end of output{suffix}"
        if not _same_line(line, answer):
            return f"expected {_short(line)!r}, got {_short(answer)!r}{suffix}"
    return None


def same_value(got: Any, expected: Any) -> bool:
    """JSON values equal, numbers with a float among them within 1e-6; bools only equal bools."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, float) or isinstance(expected, float):
            return math.isclose(got, expected, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
        return got == expected
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(map(same_value, got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in got)
    return got == expected


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _same_line(expected: str, got: str) -> bool:
    want, have = expected.split(), got.split()
    return len(want) == len(have) and all(map(_same_token, want, have))


def _same_token(expected: str, got: str) -> bool:
    if expected == got:
        return True
    if _NUMBER.fullmatch(expected) and _NUMBER.fullmatch(got):
        return math.isclose(float(expected), float(got), rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
    return False


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


DEFAULT_SANDBOX = Sandbox(limits=Limits(wall_s=DEFAULT_TIME_LIMIT_S))
