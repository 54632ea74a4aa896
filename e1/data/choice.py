"""Multiple-choice benchmarks (GPQA-Diamond, MMLU-Pro): options lettered A, B, ... under the
question, the answer a letter. Where a source lists the correct option first (GPQA), the options
are shuffled per problem with a seed derived from the problem's id and recorded in its row, so
every run, machine and Python version shows the same order.

    >>> text, letter = lettered("Which is prime?", ["4", "7", "9"], correct=1)
    >>> print(text)
    Which is prime?
    <BLANKLINE>
    A) 4
    B) 7
    C) 9
    >>> letter
    'B'
    >>> shuffle_order(4, seed=shuffle_seed("gpqa-diamond", "rec1")) == shuffle_order(4, seed=shuffle_seed("gpqa-diamond", "rec1"))
    True
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

LETTERS = "ABCDEFGHIJKLMNOP"
EXTRA_COLUMNS = ("choices", "shuffle_seed")  # the options as shown (JSON list), the seed of their order (-1: none)


def lettered(question: str, options: Sequence[str], correct: int) -> tuple[str, str]:
    """The problem text (question, then one lettered option per line) and the correct letter."""
    if not 0 <= correct < len(options) <= len(LETTERS):
        raise ValueError(f"correct option {correct} of {len(options)} options")
    lines = [f"{LETTERS[i]}) {str(option).strip()}" for i, option in enumerate(options)]
    return f"{question.strip()}\n\n" + "\n".join(lines), LETTERS[correct]


def shuffle_seed(dataset: str, problem_id: str) -> int:
    """A 63-bit seed from the dataset and problem id alone (stable across runs and machines)."""
    digest = hashlib.blake2b(f"{dataset}|{problem_id}|options".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def shuffle_order(count: int, seed: int) -> list[int]:
    """A permutation of ``range(count)`` drawn from ``seed`` (``random.Random`` is stable across versions)."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def choice_row(question: str, options: Sequence[str], correct: int, seed: int | None) -> dict[str, object]:
    """The canonical values of one multiple-choice problem; ``seed`` None keeps the source's order."""
    order = list(range(len(options))) if seed is None else shuffle_order(len(options), seed)
    shown = [str(options[i]).strip() for i in order]
    problem, answer = lettered(question, shown, order.index(correct))
    return {
        "problem": problem,
        "answer": answer,
        "choices": json.dumps(shown, ensure_ascii=False),
        "shuffle_seed": -1 if seed is None else seed,
    }
