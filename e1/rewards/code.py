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
        token by token; an integer must be exactly the expected one, a decimal (``2.5``,
        ``1e5``) within 1e-6 (relative or absolute). Rules: :mod:`e1.rewards.verdicts`.
    {"kind": "call", "fn": "Solution.twoSum", "args": [[2, 7, 11, 15], 9], "expected": [0, 1]}
    {"kind": "call", "fn": "add", "args": [1, 2], "expected": 3}
        ``Solution().twoSum(*args)`` (LeetCode style) or the function ``add(*args)``. The
        return value goes through JSON (tuples become lists, sets sorted lists) and must equal
        ``expected``: integers exactly, floats within 1e-6. As on LeetCode, ``from typing
        import *`` and common modules (collections, heapq, bisect, math, ...) are in scope.
    {"kind": "code", "code": "def check(candidate):\\n    assert candidate(2) == 4\\n", "entry_point": "square"}
        HumanEval style: the program, then ``code``, then ``check(square)`` (omitted without
        ``entry_point``); passes if that raises nothing. An exception the solution raises
        fails the test whatever the test code does around the call.

Programs see the standard library only (``python -S``); pass
``sandbox=Sandbox(site_packages=True)`` to let them import installed packages such as numpy.

The reward is 1.0 only if every test passes. Tests run one by one (each in its own
sandboxed process, ``time_limit_s`` each) and stop at the first failure;
:func:`run_code_tests` reports how many passed and why the first failure failed.
``max_tests`` keeps only the tests with the largest inputs (as the reference code does for
Codeforces), in their original order.

Only a passing program can pass: verdicts are reached outside the model's process, from
plain data it returns (see :mod:`e1.rewards.code_tests`); a program that exits early fails;
the model's code runs with ``__name__ == "solution"``, so ``if __name__ == "__main__":``
blocks do not run. Return values must be plain data (numbers, strings, None, lists,
tuples, dicts, sets).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from e1.errors import RewardError
from e1.rewards.code_tests import (
    DEFAULT_SANDBOX,
    DEFAULT_TIME_LIMIT_S,
    CallTest,
    CodeResult,
    CodeTest,
    StdioTest,
    extract_code,
    parse_tests,
    run_code_tests,
)
from e1.rewards.registry import Scored, ScoringContext, register_reward, solution_of
from e1.rewards.verdicts import compare_output, same_value

__all__ = [  # the code reward's names, the test-running core's included (from e1.rewards.code_tests)
    "DEFAULT_TIME_LIMIT_S",
    "CallTest",
    "CodeResult",
    "CodeTest",
    "StdioTest",
    "code_reward",
    "compare_output",
    "extract_code",
    "parse_tests",
    "run_code_tests",
    "same_value",
]


@register_reward("code", answers=parse_tests)  # a row whose answer is no test list: refused as its dataset loads
def code_reward(
    completions: Sequence[str],
    answers: Sequence[str | Sequence[dict]],
    *,
    context: ScoringContext | None = None,
    **columns,
) -> list[Scored]:
    """1.0 where the last code block after ``</think>`` passes every test of its answer, else 0.0;
    all programs through ``context.sandbox`` (its ``workers`` at a time), with the tests passed
    and the first failure. Without ``context``: a one-worker sandbox, 6 s per test, all tests."""
    context = context or ScoringContext(DEFAULT_SANDBOX, DEFAULT_TIME_LIMIT_S)
    if len(completions) != len(answers):
        raise RewardError(
            f"{len(completions)} completions but {len(answers)} test lists", hint="pass one test list per completion"
        )
    keys = [a if isinstance(a, str) else json.dumps(a) for a in answers]
    tests = {key: parse_tests(answer) for key, answer in zip(keys, answers)}  # each problem's tests parsed once

    def one(pair: tuple[str, str]) -> Scored:
        completion, key = pair
        solution = solution_of(completion)  # e1's split: a literal </think> in thinking is no end of it
        code = None if solution is None else extract_code(solution, end_marker="")
        if code is None:
            why = "no end of thinking" if solution is None else "no complete python code block"
            return Scored(0.0, None, 0.0, why)
        result = run_code_tests(
            code, tests[key], time_limit_s=context.time_limit_s, max_tests=context.max_tests, sandbox=context.sandbox
        )
        return Scored(1.0 if result.all_passed else 0.0, code, result.fraction, result.first_failure)

    return context.sandbox.map(one, list(zip(completions, keys)))
