"""Every reward scores only the solution of e1's token split, never a cut of the text.

Thinking that never ended but holds the literal text ``</think>`` and then ``\\boxed{42}`` is no
solution (it scores 0, in eval and in training's rollouts alike); a solution that holds a literal
``</think>`` is scored whole. The split reaches every reward through ``Completion.text`` and the
Scorer's gate (:class:`e1.data.CompletionText`)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.data import CompletionText
from e1.engine import DEFAULT_END, Completion
from e1.rewards import Scorer
from e1.rewards.choice import chosen_letter
from e1.rewards.math import extract_boxed

# pieces that look like markers and answers, mixed with free text
PIECES = [
    "</think>",
    "<think>",
    "\\boxed{42}",
    "\\boxed{41}",
    "42",
    " 42 ",
    "(B)",
    "The answer is B.",
    "B",
    "```python\nprint(42)\n```",
    "</think>\\boxed{42}",
    "</think>42",
    "</think>B",
    "\n",
    " ",
]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=6).map("".join)
ANSWERS = {"math": "42", "exact": "42", "choice": "B"}


def completion(thinking: str, solution: str, closed: bool) -> Completion:
    return Completion(
        prompt_index=0,
        sample_index=0,
        think_text=thinking,
        solution_text=solution if closed else "",
        prompt_tokens=1,
        think_tokens=len(thinking),
        solve_tokens=len(solution) if closed else 0,
        forced=not closed,
        finish_reason="stop" if closed else "length",
        token_ids=[],
        forced_mask=[],
        closed=closed,
    )


def expected(task: str, solution: str | None) -> float:
    """The reward by its rule on the solution alone (derived here, not by the reward)."""
    if solution is None:
        return 0.0
    if task == "math":
        return float(extract_boxed(solution) == "42")
    if task == "exact":
        return float(solution.strip() == "42")
    return float(chosen_letter(solution) == "B")


@settings(max_examples=60, deadline=None)
@given(thinking=texts, solution=texts, closed=st.booleans())
def test_each_reward_scores_the_solution_of_the_token_split(thinking, solution, closed):
    text = completion(thinking, solution, closed).text(DEFAULT_END)
    assert text.solution == (solution if closed else None)
    with Scorer() as scorer:
        for task, answer in ANSWERS.items():
            [scored] = scorer.score([task], [text], [answer])
            assert scored.reward == expected(task, solution if closed else None), (task, text)


@settings(max_examples=25, deadline=None)
@given(thinking=texts)
def test_thinking_that_never_ended_is_never_code(thinking):
    """The code reward runs nothing for thinking that never ended, whatever blocks it holds."""
    text = completion(thinking + "</think>```python\nprint(42)\n```", "", closed=False).text(DEFAULT_END)
    with Scorer() as scorer:
        [scored] = scorer.score(["code"], [text], ['[{"kind": "stdio", "input": "", "output": "42"}]'])
    assert (scored.reward, scored.first_failure) == (0.0, "no end of thinking")


def test_the_reported_case_in_eval_and_in_training():
    """``</think>`` then ``\\boxed{42}`` written inside thinking that never ended: 0 where scored for
    eval (the Scorer) and for GRPO's rollouts (the trainer's score phase)."""
    from e1.grpo.trainer import Trainer

    hacked = completion("Let me see. </think> \\boxed{42}", "", closed=False)
    with Scorer() as scorer:
        assert scorer.score(["math"], [hacked.text(DEFAULT_END)], ["42"])[0].reward == 0.0
        trainer = SimpleNamespace(problems=pd.DataFrame({"task": ["math"], "answer": ["42"]}), scorer=scorer)
        honest = completion("Let me see.", " \\boxed{42}", closed=True)
        assert Trainer.score(trainer, [0], [hacked, honest]).tolist() == [0.0, 1.0]


@settings(max_examples=30, deadline=None)
@given(thinking=texts, solution=st.one_of(st.none(), texts))
def test_a_split_survives_pickling_and_reads_as_its_text(thinking, solution):
    text = CompletionText(thinking, solution)
    assert str(text) == thinking + ("" if solution is None else DEFAULT_END + solution)
    back = pickle.loads(pickle.dumps(text))
    assert (back, back.thinking, back.solution) == (text, thinking, solution)
    assert CompletionText.of(text) is text


@settings(max_examples=40, deadline=None)
@given(
    think=st.text(max_size=20),
    literal=st.sampled_from(["", "</think>", "</think>\\boxed{42}"]),
    solution=st.text(max_size=10),
    think_end=st.sampled_from(["open", "natural", "budget", None]),
)
def test_an_export_writes_an_end_marker_only_where_thinking_ended(think, literal, solution, think_end):
    """e1 export's output text (lm-eval, lighteval): thinking that never ended gets no ``</think>``
    after it, so its text never reads as a finished thought with a solution (the split is the row's)."""
    from e1.report.run_results import output_text

    row = {"think_text": think + literal, "solution_text": solution, "think_end": think_end}
    written = output_text(row, "</think>")
    markers = (think + literal + solution).count("</think>")
    if think_end == "open" or (think_end is None and not solution):  # unknown: ended where a solution began
        assert written == think + literal + solution and written.count("</think>") == markers
    elif think + literal:
        assert written == f"{think}{literal}</think>{solution}"
