"""Math reward: boxed extraction, the end-of-thinking rule, math-verify equivalence, timeouts;
the reward registry and its batched contract."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from e1.errors import RewardError
from e1.rewards import registry, reward_for
from e1.rewards.math import _Worker, extract_boxed, is_equivalent, math_reward
from e1.rewards.registry import Scored
from e1.rewards.scoring import Scorer


def reward(completion: str, answer: str, **options) -> float:
    """The batched math reward on one completion."""
    return math_reward([completion], [answer], **options)[0].reward


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The answer is \boxed{5}.", "5"),
        (r"\boxed{1} then \boxed{2}", "2"),  # the last box wins
        (r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{1}{\sqrt{2}}"),  # nested braces
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces neither open nor close
        (r"\boxed{ 7 }", "7"),
        (r"so \boxed 12 and done", "12"),  # bare argument: one token
        (r"$\boxed5$", "5"),
        (r"\fbox{x+1}", "x+1"),
        (r"\boxed{3} and finally \boxed{4", "3"),  # an unclosed last box is skipped
        (r"\boxed{}", ""),
        ("no box here", None),
        (r"\boxedfoo{3}", None),  # a different command
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_reward_needs_the_end_marker():
    assert reward(r"<think>it is \boxed{7}", "7") == 0.0


def test_reward_ignores_answers_before_the_last_marker():
    assert reward(r"<think>\boxed{7}</think> no answer", "7") == 0.0
    assert reward(r"<think>\boxed{7}</think> \boxed{8}", "7") == 0.0
    # a second marker (the model re-closed thinking): only the text after the last one counts
    assert reward(r"<think>a</think> \boxed{7} more</think> \boxed{8}", "8") == 1.0


def test_reward_scores_the_solution():
    completion = r"<think>1/2 maybe \boxed{3}</think> So the answer is $\boxed{\dfrac{1}{2}}$."
    assert reward(completion, "0.5") == 1.0
    assert reward(completion, "0.25") == 0.0


def test_reward_with_another_marker():
    from e1.engine.base import Completion
    from e1.engine.markers import DEFAULT_END

    # a model that closes thinking with ◁/think▷: its completion is joined with the canonical marker,
    # and the reward reads e1's split, not a marker in the text (however the text was joined)
    completion = Completion(0, 0, "thinking... ", r" \boxed{42}", 3, 2, 4, False, "stop", [], [], closed=True)
    assert reward(completion.text(DEFAULT_END), "42") == 1.0
    assert completion.text("◁/think▷").solution == r" \boxed{42}" and reward(completion.text("◁/think▷"), "42") == 1.0


# What math-verify 0.9 actually accepts (checked by hand), prediction first, gold second.
@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac12", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        ("x=3", "3"),
        ("3", "x = 3"),
        (r"\{1,2\}", r"\{2,1\}"),  # sets ignore order
        ("1,2", r"\{1,2\}"),
        (r"10\%", "10"),  # math-verify accepts a percentage against its number
        ("0.1", r"10\%"),  # ... and against its fraction
        ("1,000", "1000"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        ("x^2+2x+1", "(x+1)^2"),
        (r"90^\circ", "90"),
        ("5", "5.0"),
        (r"\left( 1, 2 \right)", "(1,2)"),  # the in-process fast path
        ("$7$", "7"),
        ("007", "7"),
        (r"\text{(C)}", "C"),
    ],
)
def test_equivalent(prediction, gold):
    assert is_equivalent(prediction, gold)


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("2", "3"),
        (r"\frac{1}{2}", "0.50001"),
        (r"\pi", "3.14159"),  # no rounding to the gold's precision
        ("(1,2)", "(2,1)"),  # tuples keep order
        ("x+1", "x-1"),
        ("", "0"),
        ("0", ""),
        ("-5", "5"),
    ],
)
def test_not_equivalent(prediction, gold):
    assert not is_equivalent(prediction, gold)


def test_works_from_a_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(is_equivalent(r"\frac{3}{4}", "0.75")))
    thread.start()
    thread.join(timeout=60)
    assert results == [True]


def test_works_from_a_thread_pool():
    cases = [(rf"\frac{{{k}}}{{4}}", str(k / 4), True) for k in range(1, 13)]
    cases += [(rf"\frac{{{k}}}{{4}}", str(k / 4 + 1), False) for k in range(1, 13)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda case: is_equivalent(case[0], case[1]), cases))
    assert results == [expected for _, _, expected in cases]


def test_pathological_input_times_out_and_the_checker_recovers():
    # sympy would try to evaluate a power tower with ~10^8-digit exponents: it never finishes
    start = time.monotonic()
    assert not is_equivalent(r"9^{9^{9^{9}}}", "5", timeout_s=1.0)
    assert time.monotonic() - start < 30
    # the hung worker was replaced: the next comparison still works
    assert is_equivalent(r"\frac{2}{8}", "0.25")
    assert reward(r"</think> \boxed{9^{9^{9^{9}}}}", "5", timeout_s=1.0) == 0.0


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_CPU")
def test_a_hung_worker_ends_itself_even_if_nobody_kills_it():
    # the caller may die mid-comparison (OOM killer, scheduler): the kernel's CPU limit,
    # set to the comparison's timeout + 1 s, must end the worker on its own
    worker = _Worker()
    request = {"prediction": r"9^{9^{9^{9}}}", "gold": "5", "timeout_s": 1}
    worker.process.stdin.write((json.dumps(request) + "\n").encode())
    worker.process.stdin.flush()
    start = time.monotonic()
    with pytest.raises(EOFError):
        worker._read(timeout_s=30)
    assert time.monotonic() - start < 30
    worker.kill()


def test_import_stays_light():
    code = "import sys, e1.rewards; print('sympy' in sys.modules or 'math_verify' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_registry_finds_math():
    assert reward_for("math") is math_reward
    assert "math" in registry.reward_tasks()


def test_registry_suggests_the_closest_task():
    with pytest.raises(RewardError) as err:
        reward_for("mat")
    assert "math" in str(err.value)


def test_registry_registers_a_new_task(monkeypatch):
    monkeypatch.setattr(registry, "_REWARDS", registry._REWARDS.copy())

    @registry.register_reward("always")
    def always(completions: list[str], answers: list[str], **columns) -> list[float]:
        return [1.0] * len(completions)

    assert reward_for("always")(["anything"], ["x"]) == [1.0]
    with pytest.raises(RewardError, match="already registered"):
        registry.register_reward("always")(lambda completions, answers, **columns: [0.0])


def test_scorer_wraps_plain_values_and_passes_columns(monkeypatch):
    monkeypatch.setattr(registry, "_REWARDS", registry._REWARDS.copy())

    @registry.register_reward("length")
    def by_length(completions, answers, *, weight, **columns):  # plain floats, None = not applicable
        return [None if c == "" else w * len(c) for c, w in zip(completions, weight)]

    with Scorer() as scorer:
        scored = scorer.score(
            ["length", "math", "length"],
            ["abc", r"</think> \boxed{2}", ""],
            ["", "2", ""],
            columns={"weight": [0.5, 9.0, 2.0]},
        )
    # "abc": 0.5 * 3 = 1.5; the math item went to the math reward with its details; "" -> None -> 0.0
    assert scored == [Scored(1.5, None), Scored(1.0, "2"), Scored(0.0, None)]


def test_a_reward_must_return_one_value_per_completion(monkeypatch):
    monkeypatch.setattr(registry, "_REWARDS", registry._REWARDS.copy())
    registry.register_reward("short")(lambda completions, answers, **columns: [1.0])
    with Scorer() as scorer, pytest.raises(RewardError, match="returned 1 values for 2"):
        scorer.score(["short", "short"], ["a", "b"], ["", ""])
