"""Running code against tests in the sandbox: the core of the code reward, and its threat model.

    >>> run_code_tests("print(4)", '[{"kind": "stdio", "input": "2 3\\\\n", "output": "5\\\\n"}]')
    CodeResult(passed=0, total=1, first_failure="test 1: wrong answer: expected '5', got '4'")

How a verdict is reached, so that only a passing program can pass (see e1/rewards/harness.py):

- ``stdio``: the program's stdout is compared here, in the parent.
- ``call``: the model's code runs in a *solution server* (``harness.serve``); the parent sends
  the arguments over a pipe and compares the returned plain data with ``expected`` here.
- ``code`` (HumanEval): the test code runs in a second sandboxed run (``harness.check``) in
  which every function of the solution is a proxy to the solution server; its exit status
  is the verdict. Return values cross as plain data only, so an object whose ``__eq__`` is
  always true fails, and no secret (token, expected value) is ever inside the model's run.

Threat model. Tests (inputs, expected answers, HumanEval check code) are trusted; the judged
program is not: a policy under RL finds every hole, so the judge assumes the worst.

*A judged program may* run any Python inside its sandboxed run (:mod:`e1.sandbox`: no network,
no host files, bounded CPU, memory, processes, output and wall time), print any bytes, write
any bytes to its reply pipe (or a line that never ends), return any plain data (an integer
too large for a float, NaN, a set whose items all hash alike, nesting a hundred deep), raise
any exception (``StopIteration``, ``SystemExit``, ...) or exit at any moment.
*It cannot* see the expected answers or the check code, nor run code in the process that
decides: the parent for ``stdio`` and ``call``, the checker run for ``code``.

*The judge guarantees*:

1. Verdicts follow fixed rules (:mod:`e1.rewards.verdicts`). Integers compare exactly: digit
   by digit in output (``3.0000001`` does not match ``3``), by Python's exact ``==`` for returned
   values (``1e18`` is not ``10**18 + 7``). Returned values compare by type: a set is never a
   list, a dict key ``1`` never ``"1"`` (a tuple stands for a list: JSON has no tuples). A tolerance of 1e-6 applies only where the
   expected answer is a decimal or a float. A non-finite number never equals a finite one;
   NaN equals nothing. HumanEval+ checks keep EvalPlus's type-and-length rule.
2. Nothing the solution does changes a ``code`` test's control flow: an exception it raises,
   an unreadable or oversized reply, or a server that stopped answering ends the checker on
   the spot as a failure, before the test code sees anything (``harness.proxy``).
3. Every byte a run produces is read with a budget. Output: up to ``Limits.output_bytes``
   (the run is killed past it), compared in time linear in its size, with no int <-> str
   conversion. A reply: one line of at most ``harness.MAX_REPLY_BYTES`` (4 MiB; the output
   limit if larger), read before the test's deadline, nested at most ``harness.MAX_DEPTH``
   deep, integers of at most ``harness.MAX_INT_DIGITS`` digits, decoded without hashing
   anything the solution chose (:func:`harness.read_reply`, the one reader of every reply,
   in the parent and in the checker).
4. One sample never crashes or stalls the batch, nor changes another sample's verdict:
   whatever goes wrong while judging it is its own failure, a score of 0 with a reason in
   ``first_failure`` (valid UTF-8, at most 300 characters). Only a sandbox that cannot run
   at all (:class:`~e1.sandbox.SandboxError`) and malformed tests (:class:`RewardError`) raise.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import select
import signal
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from e1.data import CompletionText
from e1.errors import E1Error, RewardError
from e1.rewards import harness
from e1.rewards.verdicts import compare_output, printable, same_value, short, show
from e1.sandbox import Limits, RunResult, Sandbox

log = logging.getLogger("e1.rewards")

DEFAULT_TIME_LIMIT_S = 6.0  # per test, as in the reference code (LiveCodeBench)
PYTHON_FENCES = ("", "python", "py", "python3")
FORMAT_HINT = (
    'tests are a JSON list of {"kind": "stdio", "input", "output"}, '
    '{"kind": "call", "fn", "args", "expected"} or {"kind": "code", "code", "entry_point"}; '
    "see e1/rewards/code.py"
)

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
    """Run ``code`` against ``tests`` in order until the first failure (a failure, whatever its
    cause, is a result, never an exception: see the module docstring)."""
    parsed = parse_tests(tests)
    if max_tests is not None:
        if max_tests < 1:
            raise RewardError(f"max_tests must be >= 1, got {max_tests}", hint="or None for all tests")
        keep = sorted(sorted(range(len(parsed)), key=lambda i: -parsed[i].size)[:max_tests])
        parsed = [parsed[i] for i in keep]
    box = sandbox or DEFAULT_SANDBOX
    limits = replace(box.limits, wall_s=time_limit_s)
    unreadable = _not_text(code)
    for number, test in enumerate(parsed, 1):
        failure = unreadable or _judge(box, code, test, limits)
        if failure is not None:
            return CodeResult(number - 1, len(parsed), printable(f"test {number}: {failure}"))
    return CodeResult(passed=len(parsed), total=len(parsed), first_failure=None)


def _not_text(code: str) -> str | None:
    """Why ``code`` cannot be a source file (a lone surrogate UTF-8 cannot carry), or None."""
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"runtime error: SyntaxError: the code is not UTF-8 text (a lone surrogate at character {err.start})"
    return None


def _judge(box: Sandbox, code: str, test: Test, limits: Limits) -> str | None:
    """``test``'s failure, or None. Whatever goes wrong while judging one sample is that sample's
    failure, never the batch's; only an E1Error (a sandbox that cannot run at all) raises."""
    try:
        return _JUDGES[type(test)](box, code, test, limits)
    except E1Error:
        raise
    except Exception as err:  # noqa: BLE001 - the last line of defence: one sample, one score of 0
        log.warning("judging a sample failed; it scores 0", exc_info=True)
        return f"judge error: {type(err).__name__}: {err}"


def extract_code(completion: str, end_marker: str = "</think>") -> str | None:
    """The last Python (or unlabelled) fenced block of the solution, dedented: e1's split of a
    :class:`~e1.data.CompletionText`, else the text after the last ``end_marker``.

    ``end_marker=""`` looks at the whole completion (a model that does not think).
    """
    if isinstance(completion, CompletionText) and end_marker:
        solution = completion.solution  # e1's token split, never a cut of the text
    else:
        end = completion.rfind(end_marker) if end_marker else 0
        solution = None if end < 0 else completion[end + len(end_marker) :]
    if solution is None:
        return None
    blocks, language, body = [], None, []
    for line in solution.splitlines():
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
        except RecursionError:
            raise RewardError("tests are JSON nested too deep to read", hint=FORMAT_HINT) from None
        except ValueError as err:  # an integer past Python's digit limit
            raise RewardError(
                f"tests hold a value e1 cannot read: {str(err).splitlines()[0][:120]}", hint=FORMAT_HINT
            ) from None
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
    served, line = _with_solution(
        box, code, CALL_PRELUDE, limits, lambda out, into: _ask(out, into, request, deadline, _reply_bytes(limits))
    )
    if line is None:
        return _run_failure(served, limits) or "exited before the tests finished"
    try:
        returned, value = harness.read_reply(line, _reply_bytes(limits), hashless=True)
    except harness.BadReply as err:
        return str(err)
    if not returned:
        return f"runtime error: {value}"
    if same_value(value, test.expected):
        return None
    return f"wrong answer: expected {show(test.expected)}, got {show(value)}"


def _judge_code(box: Sandbox, code: str, test: CodeTest, limits: Limits) -> str | None:
    checker = _HARNESS + f"\ncheck({test.code!r}, {test.entry_point!r}, {_reply_bytes(limits)})\n"
    served, checked = _with_solution(
        box, code, _helpers(test.code), limits, lambda out, into: _run(box, checker, b"", limits, (into, out))
    )
    if checked.ok:
        return None
    for run in (checked, served):
        if run.killed_reason is not None:
            return _run_failure(run, limits)
    if checked.returncode == harness.EXIT_SOLUTION_GONE:
        return _run_failure(served, limits) or "exited before the tests finished"
    if checked.returncode == harness.EXIT_SOLUTION_FAILED:
        return _error_line(checked)  # the proxy's reason: "runtime error: ...", "reply longer than ..."
    return f"runtime error: {_error_line(checked)}"


def _reply_bytes(limits: Limits) -> int:
    return max(harness.MAX_REPLY_BYTES, limits.output_bytes)


_JUDGES: dict[type, Callable[[Sandbox, str, Any, Limits], str | None]] = {
    StdioTest: _judge_stdio,
    CallTest: _judge_call,
    CodeTest: _judge_code,
}


def _helpers(test_code: str) -> str:
    """The imports and definitions of a code test except ``check`` (HumanEval puts the prompt's
    helpers such as ``encode_cyclic`` there): the solution may use them; the asserts stay out."""
    try:
        module = ast.parse(test_code)
    except SyntaxError:
        return ""
    kept = [
        node
        for node in module.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != "check")
    ]
    return "\n\n".join(ast.get_source_segment(test_code, node) or "" for node in kept)


def _with_solution(
    box: Sandbox, code: str, prelude: str, limits: Limits, client: Callable[[int, int], Any]
) -> tuple[RunResult, Any]:
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


def _ask(requests: int, replies: int, request: str, deadline: float, max_bytes: int) -> bytes | None:
    """Send one request and read one reply line before ``deadline``: the line, or its first
    ``max_bytes + 1`` bytes if it is longer; None if none came."""
    try:
        with os.fdopen(requests, "wb") as out:
            out.write(request.encode())
        poll = select.poll()
        poll.register(replies, select.POLLIN)
        line = bytearray()
        while len(line) <= max_bytes:
            ready = poll.poll(max(deadline - time.monotonic(), 0) * 1000)
            chunk = os.read(replies, 1 << 16) if ready else b""
            if not chunk:
                return None
            end = chunk.find(b"\n")
            line += chunk if end < 0 else chunk[: end + 1]
            if end >= 0:
                return bytes(line)
        return bytes(line)
    except OSError:
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


def _error_line(run: RunResult) -> str:
    if run.returncode < 0:
        try:
            return f"killed by {signal.Signals(-run.returncode).name}"
        except ValueError:
            return f"killed by signal {-run.returncode}"
    lines = [line for line in run.stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return short(lines[-1].strip(), 200) if lines else f"exit code {run.returncode}"


DEFAULT_SANDBOX = Sandbox(limits=Limits(wall_s=DEFAULT_TIME_LIMIT_S))
