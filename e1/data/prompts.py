"""Prompts shared by eval and train: the problem in its dataset's prompt style, through the
model's own chat template (no system prompt), as the paper does.

    build_prompt(tokenizer, "What is 2+2?")
    # '<|im_start|>user\\nWhat is 2+2? Let\\'s think step by step ...<|im_end|>\\n<|im_start|>assistant\\n<think>\\n'
    build_prompt(tokenizer, row)   # a dataset row: its task and dataset pick the style

A style turns a row (``problem`` plus the dataset's extra columns) into the user message.
Rows of a registered benchmark use its ``prompt`` style (``codeforces``, ``humaneval``),
else their task's (``math``, ``code``); a bare problem text gets the task's style.

    >>> prompt_content("What is 2+2?")
    "What is 2+2? Let's think step by step and output the final answer within \\\\boxed{}."
    >>> print(prompt_content({"problem": "Add two numbers.", "starter_code": "def add(a, b):"}, "code"))
    ### Question:
    Add two numbers.
    <BLANKLINE>
    ### Format: You will use the following starter code to write the solution to the problem and enclose your code within delimiters.
    ```python
    def add(a, b):
    ```
    <BLANKLINE>
    ### Answer: (use the provided format with backticks)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from e1.errors import ConfigError, did_you_mean
from e1.names import Registry
from e1.settings import DATA, setting

PromptStyle = Callable[[Mapping[str, Any]], str]
_STYLES: Registry = Registry("prompt style")  # one style per name: e1's own are never replaced (e1.names)

MATH_INSTRUCTION = " Let's think step by step and output the final answer within \\boxed{}."
# LiveCodeBench's code generation format (its prompt for models without a system prompt)
_LCB_STARTER = (
    "### Format: You will use the following starter code to write the solution to the problem and enclose your "
    "code within delimiters.\n```python\n{starter_code}\n```"
)
_LCB_STDIN = (
    "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
    "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program "
    "runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```"
)
_FUNCTION = (
    "### Format: Write a Python function named `{fn_name}` that solves the problem (it is called directly; "
    "do not read stdin). Enclose your code within delimiters as follows.\n```python\n# YOUR CODE HERE\n```"
)
_LCB_ANSWER = "### Answer: (use the provided format with backticks)"


def register_prompt(style: str) -> Callable[[PromptStyle], PromptStyle]:
    """Decorator: ``fn(row) -> user message`` for rows of ``style``; a style another function holds
    (e1's ``math`` included) is refused in one line."""

    def register(fn: PromptStyle) -> PromptStyle:
        _STYLES[style] = fn
        return fn

    return register


@register_prompt("math")
def math_prompt(row: Mapping[str, Any]) -> str:
    return str(row["problem"]) + MATH_INSTRUCTION


CHOICE_INSTRUCTION = "\n\nThink step by step, then output the letter of the correct option within \\boxed{}."


@register_prompt("choice")
def choice_prompt(row: Mapping[str, Any]) -> str:
    """The question with its lettered options (as prepared), asking for the letter in a box."""
    return str(row["problem"]) + CHOICE_INSTRUCTION


@register_prompt("code")
def code_prompt(row: Mapping[str, Any]) -> str:
    """LiveCodeBench's format: complete the starter code if there is one, else a stdin/stdout program."""
    starter_code = str(row.get("starter_code") or "").rstrip()
    fn_name = str(row.get("fn_name") or "")
    if starter_code:
        format_ = _LCB_STARTER.format(starter_code=starter_code)
    elif fn_name:
        format_ = _FUNCTION.format(fn_name=fn_name)
    else:
        format_ = _LCB_STDIN
    return f"### Question:\n{str(row['problem']).strip()}\n\n{format_}\n\n{_LCB_ANSWER}"


@register_prompt("codeforces")
def codeforces_prompt(row: Mapping[str, Any]) -> str:
    """The statement (with its limits and I/O format) and what to write: a stdin/stdout program."""
    limits = [
        f"{value:g} {unit}"
        for value, unit in (
            (_number(row.get("time_limit_s")), "s per test"),
            (_number(row.get("memory_limit_mb")), "MB"),
        )
        if math.isfinite(value)
    ]
    within = f", within the limits ({', '.join(limits)})" if limits else ", within the time and memory limits"
    return (
        f"{str(row['problem']).strip()}\n\n"
        f"Write a Python 3 program that solves this problem{within}: it reads the input from standard input and "
        "writes the answer to standard output. Put the complete program in a single ```python code block at the "
        "end of your answer."
    )


@register_prompt("humaneval")
def humaneval_prompt(row: Mapping[str, Any]) -> str:
    """Complete the function whose signature and docstring are the problem."""
    return (
        f"Complete the following Python function.\n\n```python\n{str(row['problem']).rstrip()}\n```\n\n"
        "Write the complete function (its signature, its body and any imports it needs) in a single ```python "
        "code block."
    )


def prompt_content(problem: str | Mapping[str, Any] | Any, task: str | None = None) -> str:
    """The user message for ``problem``: a problem text, or a dataset row (dict, namedtuple or Series)."""
    row = _as_row(problem)
    task = task or str(row.get("task") or "math")
    style = _STYLES.get(_style_of(row, task))
    return style(row) if style else str(row["problem"])


# The budget stated in the prompt (``--prompt-budget``), N = the cell's t + s:
BUDGET_STATEMENTS = {
    "tale": "Let's think step by step and use less than {tokens} tokens.",  # TALE-EP (Han et al., 2024)
    "l1": "Think for {tokens} tokens.",  # L1 (Aggarwal & Welleck, 2025), at eval time
}


@dataclass(frozen=True)
class PromptOptions:
    """How the user message becomes a prompt beyond its style: a system prompt, keyword arguments
    for the chat template (``{"enable_thinking": false}`` for Qwen3-style hybrids), and a budget
    stated in the message.

    >>> PromptOptions(budget="tale").statement(1536)
    "Let's think step by step and use less than 1536 tokens."
    >>> PromptOptions(template_kwargs='{"enable_thinking": false}').kwargs
    {'enable_thinking': False}
    """

    system: str | None = setting(
        None, "A system message before the problem.", DATA, flag="--system-prompt", shown="none, as the paper"
    )
    template_kwargs: str = setting(  # a JSON object, kept as given (it is recorded in config.json)
        "",
        "JSON arguments for the chat template, e.g. '{\"enable_thinking\": false}' for Qwen3-style hybrid models.",
        DATA,
        flag="--chat-template-kwargs",
        shown=False,
    )
    budget: str | None = setting(  # a key of BUDGET_STATEMENTS, or None
        None,
        'State each cell\'s budget N = t + s in the prompt: tale ("use less than N tokens": TALE, Han et al., '
        '2024) | l1 ("Think for N tokens.": L1, Aggarwal & Welleck, 2025); with any mode.',
        DATA,
        flag="--prompt-budget",
        shown="none",
    )

    def __post_init__(self):
        if self.budget is not None and self.budget not in BUDGET_STATEMENTS:
            raise ConfigError(
                f"unknown prompt budget {self.budget!r}", hint=did_you_mean(self.budget, list(BUDGET_STATEMENTS))
            )
        if self.system is not None and not self.system.strip():
            raise ConfigError("--system-prompt is empty", hint="leave it out for no system prompt (the paper's)")
        self.kwargs  # noqa: B018  parses template_kwargs

    @cached_property
    def kwargs(self) -> dict[str, Any]:
        """``template_kwargs`` parsed, once (it is checked when the options are made)."""
        if not self.template_kwargs:
            return {}
        try:
            value = json.loads(self.template_kwargs)
        except ValueError as err:
            raise ConfigError(
                f"--chat-template-kwargs is not JSON: {err}", hint="e.g. '{\"enable_thinking\": false}'"
            ) from None
        if not isinstance(value, dict):
            raise ConfigError(
                "--chat-template-kwargs must be a JSON object", hint="e.g. '{\"enable_thinking\": false}'"
            )
        return value

    def statement(self, tokens: int | None) -> str | None:
        """The budget sentence for a cell of ``tokens`` (None: no budget stated)."""
        return None if self.budget is None or tokens is None else BUDGET_STATEMENTS[self.budget].format(tokens=tokens)

    def to_json(self) -> dict[str, Any]:
        return {
            "system_prompt": self.system,
            "chat_template_kwargs": self.template_kwargs,
            "prompt_budget": self.budget,
        }


def build_prompt(
    tokenizer,
    problem: str | Mapping[str, Any] | Any,
    task: str | None = None,
    instruction: str | None = None,
    options: PromptOptions = PromptOptions(),
    budget_tokens: int | None = None,
) -> str:
    """The text the model continues from; a tokenizer without a chat template gets the bare message
    (after the system prompt, if any). ``instruction`` ends the user message (e.g. L1's "Think for
    512 tokens." in training); ``options`` add a system prompt, chat template arguments and the
    budget statement for ``budget_tokens``."""
    parts = [prompt_content(problem, task), instruction, options.statement(budget_tokens)]
    content = " ".join(part for part in parts if part)
    messages = [{"role": "system", "content": options.system}] if options.system else []
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [*messages, {"role": "user", "content": content}],
            tokenize=False,
            add_generation_prompt=True,
            **options.kwargs,
        )
    return "\n\n".join([options.system, content]) if options.system else content


def _style_of(row: Mapping[str, Any], task: str) -> str:
    """The registered benchmark's style for rows of its own task, else the task's."""
    from e1.data.registry import get_benchmark, is_registered  # e1.data, imported first, registered the families

    dataset = row.get("dataset")
    if isinstance(dataset, str) and is_registered(dataset):
        benchmark = get_benchmark(dataset)
        if benchmark.task == task:
            return benchmark.prompt_style
    return task


def _as_row(problem: Any) -> dict[str, Any]:
    if isinstance(problem, str):
        return {"problem": problem}
    if hasattr(problem, "_asdict"):  # a namedtuple from DataFrame.itertuples
        return problem._asdict()
    if hasattr(problem, "to_dict"):  # a pandas Series
        return problem.to_dict()
    return dict(problem)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
