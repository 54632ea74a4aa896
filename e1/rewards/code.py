"""Code reward: run the last fenced code block of the solution against tests, sandboxed.

    >>> tests = '[{"kind": "stdio", "input": "2 3\\\\n", "output": "5\\\\n"}]'
    >>> completion = "<think>add</think>```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```"
    >>> code_reward([completion], [tests])[0].reward
    1.0
    >>> run_code_tests("print(4)", tests)
    CodeResult(passed=0, total=1, first_failure="test 1: wrong answer: expected '5', got '4'")

The code is the last ```` ```python ```` (or ``py``, ``python3``, or plain ```` ``` ````) block
after the last ``</think>``; no marker or no such block scores 0.0.

Test format: ``tests`` is a JSON string or a list of dicts, each one of

    {"kind": "stdio", "input": "1 2\\n", "output": "3\\n"}
        The program reads ``input`` on stdin; its stdout must match ``output``: trailing
        whitespace on each line and trailing blank lines are ignored, lines are compared
        token by token, and two numeric tokens match within 1e-6 (relative or absolute).
    {"kind": "call", "fn": "Solution.twoSum", "args": [[2, 7, 11, 15], 9], "expected": [0, 1]}
    {"kind": "call", "fn": "add", "args": [1, 2], "expected": 3}
        ``Solution().twoSum(*args)`` (LeetCode style) or the function ``add(*args)``. The
        return value goes through JSON (tuples become lists, sets sorted lists) and must equal
        ``expected``, floats within 1e-6. As on LeetCode, ``from typing import *`` and common
        modules (collections, heapq, bisect, math, ...) are in scope.
    {"kind": "code", "code": "def check(candidate):\\n    assert candidate(2) == 4\\n", "entry_point": "square"}
        HumanEval style: the program, then ``code``, then ``check(square)`` (omitted without
        ``entry_point``); passes if that raises nothing.

Programs see the standard library only (``python -S``); pass
``sandbox=Sandbox(site_packages=True)`` to let them import installed packages such as numpy.

The reward is 1.0 only if every test passes. Tests run one by one (each in its own
sandboxed process, ``time_limit_s`` each) and stop at the first failure;
:func:`run_code_tests` reports how many passed and why the first failure failed.
``max_tests`` keeps only the tests with the largest inputs (as the reference code does for
Codeforces), in their original order.

Answers never enter the sandbox: outputs are compared here, so a program cannot read the
expected values. For ``call`` and ``code`` tests a random token is printed after the test
has run, so a program that exits early (``sys.exit(0)``) fails instead of passing; program
and tests run with ``__name__ == "solution"``, so ``if __name__ == "__main__":`` blocks do not.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import signal
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import Any

from e1.engine.markers import DEFAULT_END
from e1.errors import RewardError
from e1.rewards.registry import Scored, ScoringContext, register_reward
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
_CALL_PRELUDE = (
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


@register_reward("code")
def code_reward(completions: Sequence[str], answers: Sequence[str | Sequence[dict]], *,
                context: ScoringContext | None = None, **columns) -> list[Scored]:
    """1.0 where the last code block after ``</think>`` passes every test of its answer, else 0.0;
    all programs through ``context.sandbox`` (its ``workers`` at a time), with the tests passed
    and the first failure. Without ``context``: a one-worker sandbox, 6 s per test, all tests."""
    context = context or ScoringContext(_DEFAULT_SANDBOX, DEFAULT_TIME_LIMIT_S)
    if len(completions) != len(answers):
        raise RewardError(f"{len(completions)} completions but {len(answers)} test lists",
                          hint="pass one test list per completion")
    keys = [a if isinstance(a, str) else json.dumps(a) for a in answers]
    tests = {key: parse_tests(answer) for key, answer in zip(keys, answers)}  # each problem's tests parsed once

    def one(pair: tuple[str, str]) -> Scored:
        completion, key = pair
        code = extract_code(completion, DEFAULT_END)
        if code is None:
            why = "no end of thinking" if DEFAULT_END not in completion else "no complete python code block"
            return Scored(0.0, None, 0.0, why)
        result = run_code_tests(code, tests[key], time_limit_s=context.time_limit_s, max_tests=context.max_tests,
                                sandbox=context.sandbox)
        return Scored(1.0 if result.all_passed else 0.0, code, result.fraction, result.first_failure)

    return context.sandbox.map(one, list(zip(completions, keys)))


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
    box = sandbox or _DEFAULT_SANDBOX
    limits = replace(box.limits, wall_s=time_limit_s)
    token = secrets.token_hex(16)
    for number, test in enumerate(parsed, 1):
        program, stdin = _program(code, test, token)
        failure = _judge(test, box.run(program, stdin, limits), token, limits)
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


def _program(code: str, test: Test, token: str) -> tuple[str, bytes]:
    """The script to run for ``test`` and its stdin."""
    if isinstance(test, StdioTest):
        return code, test.input.encode()
    if isinstance(test, CallTest):
        owner, _, name = test.fn.rpartition(".")
        target = f"_ns[{owner!r}]().{name}" if owner else f"_ns[{name!r}]"
        defined = owner or name
        body = (
            f"if {defined!r} not in _ns:\n"
            f"    raise NameError({f'name {defined!r} is not defined'!r})\n"
            f"_result = {target}(*json.loads({json.dumps(list(test.args))!r}))\n"
            f"_report(json.dumps(_result, default=_plain))\n"
        )
        return _harness(_CALL_PRELUDE, code, body, token), b""
    source = code + "\n\n" + test.code + "\n"
    if test.entry_point:
        source += f"\ncheck({test.entry_point})\n"
    return _harness("", source, "_report('')\n", token), b""


def _harness(prelude: str, code: str, body: str, token: str) -> str:
    """Run ``code`` as module ``solution``, then ``body``; ``_report`` prints token + payload."""
    return (
        "import json, sys\n"
        "def _plain(value):\n"
        "    if hasattr(value, 'tolist'):\n"
        "        return value.tolist()\n"
        "    if isinstance(value, (set, frozenset)):\n"
        "        try:\n"
        "            return sorted(value)\n"
        "        except TypeError:\n"
        "            return list(value)\n"
        "    try:\n"
        "        return list(value)\n"
        "    except TypeError:\n"
        "        return repr(value)\n"
        "def _report(payload):\n"
        "    sys.stdout.flush()\n"
        f"    sys.__stdout__.write('\\n' + {token!r} + payload + '\\n')\n"
        "    sys.__stdout__.flush()\n"
        "_ns = {'__name__': 'solution'}\n"
        f"exec({prelude!r}, _ns)\n"
        f"exec(compile({code!r}, 'solution.py', 'exec'), _ns)\n" + body
    )


def _judge(test: Test, run: RunResult, token: str, limits: Limits) -> str | None:
    """None if the run passed ``test``, else why not."""
    if run.killed_reason == "timeout":
        return f"timeout after {limits.wall_s:g}s"
    if run.killed_reason == "output limit":
        return f"output limit exceeded ({limits.output_bytes} bytes)"
    if run.returncode != 0:
        return f"runtime error: {_error_line(run)}"
    stdout = run.stdout.decode("utf-8", errors="replace")
    if isinstance(test, StdioTest):
        difference = compare_output(test.output, stdout)
        return None if difference is None else f"wrong answer: {difference}"
    at = stdout.rfind(token)
    if at < 0:
        return "exited before the tests finished"
    if isinstance(test, CodeTest):
        return None
    payload = stdout[at + len(token) :].split("\n", 1)[0]
    try:
        value = json.loads(payload)
    except json.JSONDecodeError:
        return f"wrong answer: could not read the returned value {_short(payload)}"
    if same_value(value, test.expected):
        return None
    return f"wrong answer: expected {_short(json.dumps(test.expected))}, got {_short(payload)}"


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


_DEFAULT_SANDBOX = Sandbox(limits=Limits(wall_s=DEFAULT_TIME_LIMIT_S))
