"""Trial answers (mode ``early-exit``) scored with the dataset's reward: how much thinking came
after the model already had the answer.

    tokens = overthinking_tokens(generated, scorer)   # one per (mode, budget, problem, completion)

A sample's ``overthinking_tokens`` = its thinking tokens written after its first *correct* trial
answer (0 when no trial answer was correct); NaN in modes that compute no trial answers. Each
trial answer is scored as the reward sees a solution: the end marker, then the trial's prompt and
answer (:meth:`Mode.trial_solution`: "Final Answer:" and the text, or DEER's ``\\boxed`` prompt and the text).
"""

from __future__ import annotations

import math


def overthinking_tokens(generated: list[tuple], scorer) -> list[float]:
    from e1.data import CompletionText

    trials = [(i, trial) for i, g in enumerate(generated) for trial in g[3].trials]
    tasks = [generated[i][2].task for i, _ in trials]
    texts = [CompletionText("", generated[i][0].trial_solution(trial["text"])) for i, trial in trials]
    scores = scorer.score(tasks, texts, [str(generated[i][2].answer) for i, _ in trials]) if trials else []
    first_correct: dict[int, int] = {}
    for (i, trial), scored in zip(trials, scores):
        if scored.reward >= 1.0 and i not in first_correct:
            first_correct[i] = trial["think_tokens"]
    return [
        (g[3].think_tokens - first_correct[i] if i in first_correct else 0.0) if g[0].trials else math.nan
        for i, g in enumerate(generated)
    ]
