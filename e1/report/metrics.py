"""Metrics that say what a budget did: accuracy with intervals, pass@k, maj@k, forced vs natural.

    summary = summarize(samples)                          # one row per dataset × mode × budget
    differences = mode_differences(samples)               # modes paired over problems, same budget
    low, high = bootstrap_interval([3, 0, 2], [4, 4, 4])  # accuracy 5/12 over 3 problems, 95% CI

Every rate is a fraction in [0, 1] (tables and plots show percent). Per group of samples:

- ``accuracy`` (avg@n): mean correctness over all samples; ``accuracy_ci_low``/``_high``: its
  95% percentile bootstrap interval, resampling problems (:data:`RESAMPLES` resamples, seed
  :data:`SEED`, so the same samples always give the same interval).
- ``pass_at_1``, ``pass_at_k``: the unbiased estimator, k = samples per problem; ``pass_at_{k}``
  for each k a run asks for (``--k 1,4,16``), NaN where a problem has fewer than k samples.
- ``maj_at_k``: a problem counts when its majority answer is correct. Samples vote with their
  extracted answer compared as :func:`vote_key` normalises it; unanswered samples do not vote;
  a tie goes to the answer given first (lowest ``sample_index``); no answer at all is wrong.
- ``natural_samples``/``natural_accuracy`` and ``forced_samples``/``forced_accuracy``: count and
  accuracy of the samples whose thinking ended by itself vs was forced at t (``forced``). In
  ``truncate`` and ``none`` nothing is forced, so every sample is natural there; accuracy is NaN
  for an empty side.
- ``unanswered_rate``: the share of samples with no extracted answer (no box, no code block,
  or thinking that never ended).
- ``tokens_per_correct`` and ``censored_rate``: see :mod:`e1.report.spending`.
- ``think_rate``, ``empty_think_rate``, ``prefilled_rate``, ``unopened_rate``: how often the model
  thought, from each sample's ``think_end`` (how thinking ended, :data:`e1.engine.THINK_ENDS`) by
  :func:`thinking_kinds`: it thought (a thinking text that is not blank), its thinking was empty
  (opened, then ended with a blank text: ``<think>\n\n</think>``, or cut at t = 0), the prompt closed
  it (``prefilled``: nothinking's box, a template's ``enable_thinking: false``), or it never opened it
  (``unopened``: left to the model, which answered without the start marker). Shares of the samples
  whose ``think_end`` is known, so the four sum to 1; NaN in a cell where none is (an API that reports
  none, files written before the column).
- ``mean_decoded_tokens``: output plus the trial tokens early-exit decoded and rolled back (what the
  samples cost); ``overthinking_share``: of early-exit's thinking tokens, the share written after
  the first correct trial answer (:mod:`e1.eval.trials`); NaN in other modes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from e1.store import GROUP_KEY, SUMMARY_COLUMNS, THINK_RATE_COLUMNS

RESAMPLES = 1000  # bootstrap resamples per interval
SEED = 0  # the bootstrap's seed: intervals are reproducible
LEVEL = 0.95  # confidence level of every interval
_CELLS_PER_CHUNK = 1 << 22  # resampled indices held at once (32 MiB of int64)

DIFFERENCES = "differences.parquet"
# per pair of modes at one budget, over the problems both have: accuracy of each, the
# difference (mode − other_mode) and its paired bootstrap interval; all fractions
DIFFERENCE_COLUMNS = [
    "dataset",
    "think_budget",
    "solve_budget",
    "mode",
    "other_mode",
    "problems",
    "accuracy",
    "other_accuracy",
    "accuracy_difference",
    "difference_ci_low",
    "difference_ci_high",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 − C(n−c, k) / C(n, k).

    >>> pass_at_k(4, 1, 1)
    0.25
    >>> pass_at_k(4, 1, 4)
    1.0
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def vote_key(answer: str | None, code: bool) -> str | None:
    """What majority voting compares: a math/exact answer normalised as the math reward's fast path
    does (:func:`e1.rewards.math.answer_key`); code with blank lines and trailing spaces dropped.

    >>> vote_key(" $\\\\dfrac{1}{2}$ ", code=False), vote_key("x = 1  \\n\\nprint(x)\\n", code=True)
    ('\\\\frac{1}{2}', 'x = 1\\nprint(x)')
    >>> vote_key(None, code=False) is None
    True
    """
    if answer is None:
        return None
    if code:
        return "\n".join(line.rstrip() for line in answer.splitlines() if line.strip()) or None
    from e1.rewards import answer_key

    return answer_key(answer) or None


def majority_correct(keys: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """One problem's maj@k: whether its most frequent answer is correct (samples in ``sample_index``
    order; None does not vote; a tie goes to the answer given first; no answer is wrong).

    >>> majority_correct(["3", None, "4", "4", "3"], [True, False, False, False, True])  # 3 came first
    True
    >>> majority_correct([None, None], [False, False])
    False
    """
    votes = Counter(key for key in keys if key is not None)  # insertion order: first given first
    if not votes:
        return False
    winner = max(votes, key=votes.__getitem__)  # max keeps the first of equal counts
    return bool(next(ok for key, ok in zip(keys, correct) if key == winner))


def bootstrap_interval(
    values: Sequence[float],
    weights: Sequence[float] | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``sum(values) / sum(weights)`` over units drawn with replacement.

    Units are problems (values: correct samples, weights: samples) or contests (values: ratings,
    weights: 1, the default). Vectorised: ``resamples`` × units indices at a time, in chunks.

    >>> bootstrap_interval([2, 2, 2], [4, 4, 4])  # every problem at 50 %: no spread
    (0.5, 0.5)
    """
    import numpy as np

    values = np.asarray(values, dtype=float)  # [U]
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)  # [U]
    units = len(values)
    if units == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    estimates = np.empty(resamples)  # [R]
    step = max(1, _CELLS_PER_CHUNK // units)
    for start in range(0, resamples, step):
        picks = rng.integers(0, units, size=(min(step, resamples - start), units))  # [r, U]
        estimates[start : start + len(picks)] = values[picks].sum(axis=1) / weights[picks].sum(axis=1)  # [r]
    tail = (1 - level) / 2
    low, high = np.quantile(estimates, [tail, 1 - tail])
    return float(low), float(high)


def summarize(samples, by: list[str] = GROUP_KEY, ks: tuple[int, ...] = ()):
    """One row per group of ``by`` with the columns of :data:`e1.store.results.SUMMARY_COLUMNS` (see the
    module docstring for each metric); mean think/solve/total tokens per sample. ``ks`` adds a
    ``pass_at_{k}`` column per k (unbiased; NaN where a group has fewer than k samples per problem)."""
    import pandas as pd

    records = [
        dict(zip(by, key if isinstance(key, tuple) else (key,))) | _group_metrics(group, ks)
        for key, group in samples.groupby(by, sort=True)
    ]
    columns = by + [c for c in SUMMARY_COLUMNS if c not in GROUP_KEY]
    columns += [f"pass_at_{k}" for k in ks if f"pass_at_{k}" not in columns]  # pass_at_1 is there already
    return pd.DataFrame(records, columns=columns)


def _group_metrics(group, ks: tuple[int, ...] = ()) -> dict:
    """The metrics of one group of samples (one dataset × mode × budget, of one model)."""
    group = group.sort_values("sample_index", kind="stable")
    per_problem = group.groupby("problem_id", sort=True)["correct"].agg(["size", "sum"])  # [P, 2]
    n = int(per_problem["size"].min())
    answered = group["extracted_answer"].notna()
    forced = group["forced"].astype(bool)
    low, high = bootstrap_interval(per_problem["sum"], per_problem["size"])
    return {
        "problems": len(per_problem),
        "samples_per_problem": n,
        "accuracy": float(group["correct"].mean()),
        "accuracy_ci_low": low,
        "accuracy_ci_high": high,
        "pass_at_1": _mean_pass_at(per_problem, 1),
        "pass_at_k": _mean_pass_at(per_problem, n),
        "maj_at_k": _maj_at_k(group, answered),
        "k": n,
        "mean_think_tokens": float(group["think_tokens"].mean()),
        "mean_solve_tokens": float(group["solve_tokens"].mean()),
        "mean_total_tokens": float((group["think_tokens"] + group["solve_tokens"]).mean()),
        "forced_rate": float(forced.mean()),
        "natural_samples": int((~forced).sum()),
        "natural_accuracy": _mean_or_nan(group.loc[~forced, "correct"]),
        "forced_samples": int(forced.sum()),
        "forced_accuracy": _mean_or_nan(group.loc[forced, "correct"]),
        "unanswered_rate": float(1.0 - answered.mean()),
        **think_rates(group),
        **cell_spending(group),
        **trial_spending(group),
        **{f"pass_at_{k}": _mean_pass_at(per_problem, k) if k <= n else math.nan for k in ks},
    }


THOUGHT, EMPTY, PREFILLED, UNOPENED, UNKNOWN = "thought", "empty", "prefilled", "unopened", "unknown"
THINK_RATES = dict(zip((THOUGHT, EMPTY, PREFILLED, UNOPENED), THINK_RATE_COLUMNS))  # kind -> its summary column


def thinking_kinds(samples):
    """Per sample, whether it thought, from ``think_end`` (and, for thinking that began, whether its text
    is blank): :data:`THOUGHT`, :data:`EMPTY`, :data:`PREFILLED`, :data:`UNOPENED`, or :data:`UNKNOWN` where
    ``think_end`` is missing or not one e1 writes (:data:`e1.engine.THINK_ENDS`). The one definition every
    think rate is read from."""
    import numpy as np
    import pandas as pd

    from e1.engine import THINK_ENDS

    end = samples["think_end"] if "think_end" in samples else pd.Series(None, index=samples.index, dtype="string")
    end = end.astype("string").fillna("")
    text = samples["think_text"].astype("string").fillna("") if "think_text" in samples else end.str.slice(0, 0)
    blank = text.str.strip().str.len().fillna(0).to_numpy() == 0
    kinds = np.select(
        [end.isin([PREFILLED, UNOPENED]).to_numpy(), ~end.isin(THINK_ENDS).to_numpy(), blank],
        [end.to_numpy(dtype=object), UNKNOWN, EMPTY],
        THOUGHT,
    )
    return pd.Series(kinds, index=samples.index, dtype=object)


def think_rates(group) -> dict:
    """Of ``group``'s samples whose ``think_end`` is known, the share of each kind :func:`thinking_kinds`
    names (they sum to 1); NaN where none is known."""
    kinds = thinking_kinds(group)
    known = int((kinds != UNKNOWN).sum())
    return {column: float((kinds == kind).sum()) / known if known else math.nan for kind, column in THINK_RATES.items()}


def censored(group):
    """Per sample: whether the budget, not the model, ended it."""
    return group["forced"].astype(bool) | (group["finish_reason"] == "length")


def cell_spending(group) -> dict:
    """``tokens_per_correct`` and ``censored_rate`` of one cell's samples."""
    tokens = float((group["think_tokens"] + group["solve_tokens"]).sum())
    correct = float(group["correct"].sum())
    return {
        "tokens_per_correct": tokens / correct if correct else math.nan,
        "censored_rate": float(censored(group).mean()),
    }


def trial_spending(group) -> dict:
    """``mean_decoded_tokens`` (output + rolled-back trial tokens) and ``overthinking_share``: of the
    thinking tokens of samples with trial answers (early-exit), the share written after the first
    correct one; NaN in modes without trials (and for frames made before these columns)."""
    if "decoded_tokens" not in group or "overthinking_tokens" not in group:
        return {"mean_decoded_tokens": math.nan, "overthinking_share": math.nan}
    with_trials = group["overthinking_tokens"].notna()
    think = float(group.loc[with_trials, "think_tokens"].sum())
    late = float(group.loc[with_trials, "overthinking_tokens"].sum())
    return {
        "mean_decoded_tokens": float(group["decoded_tokens"].mean()),
        "overthinking_share": late / think if think else math.nan,
    }


def _maj_at_k(group, answered) -> float:
    """The share of problems whose majority answer is correct; ``group`` in ``sample_index`` order.
    Code rows are those with a ``tests_passed`` fraction (NaN for every other task)."""
    votes: dict[str, tuple[list, list]] = {}  # problem -> (vote keys, correct), in sample order
    for problem, answer, has_answer, code, correct in zip(
        group["problem_id"], group["extracted_answer"], answered, group["tests_passed"].notna(), group["correct"]
    ):
        keys, oks = votes.setdefault(problem, ([], []))
        keys.append(vote_key(answer if has_answer else None, code))
        oks.append(bool(correct))
    return float(sum(majority_correct(keys, oks) for keys, oks in votes.values()) / len(votes))


def _mean_pass_at(per_problem, k: int) -> float:
    return float(sum(pass_at_k(int(s), int(c), k) for s, c in per_problem.itertuples(index=False)) / len(per_problem))


def _mean_or_nan(correct) -> float:
    return float(correct.mean()) if len(correct) else math.nan


def mode_differences(samples, by: list[str] = GROUP_KEY):
    """Every pair of modes at the same budget, paired over the problems both have: one row per pair
    and group of ``by`` without ``mode`` (:data:`DIFFERENCE_COLUMNS`, led by any extra keys such as
    ``model``). Pairs follow the order in which modes first appear: ``mode`` before ``other_mode``.

    Per problem, accuracy is the mean over its samples; the difference is the mean over problems
    of (mode − other_mode), and its interval resamples problems, so each problem's two
    accuracies move together and what the problems share cancels out.
    """
    import pandas as pd

    keys = [column for column in by if column != "mode"]
    per_problem = samples.pivot_table(
        index=[*keys, "problem_id"], columns="mode", values="correct", aggfunc="mean", sort=True
    )  # [groups × P, modes]
    modes = list(dict.fromkeys(samples["mode"]))  # in order of first appearance
    records = []
    for key, table in per_problem.groupby(level=keys, sort=False):
        for index, mode in enumerate(modes):
            for other in modes[index + 1 :]:
                pair = table[[mode, other]].dropna()  # [P, 2]: problems both modes have
                if len(pair):
                    records.append(
                        dict(zip(keys, key if isinstance(key, tuple) else (key,))) | _paired(pair, mode, other)
                    )
    extra = [column for column in keys if column not in DIFFERENCE_COLUMNS]
    return pd.DataFrame(records, columns=[*extra, *DIFFERENCE_COLUMNS])


def _paired(pair, mode: str, other: str) -> dict:
    """One row of :func:`mode_differences` from a [P, 2] table of per-problem accuracies."""
    difference = pair[mode] - pair[other]  # [P]
    low, high = bootstrap_interval(difference)
    return {
        "mode": mode,
        "other_mode": other,
        "problems": len(pair),
        "accuracy": float(pair[mode].mean()),
        "other_accuracy": float(pair[other].mean()),
        "accuracy_difference": float(difference.mean()),
        "difference_ci_low": low,
        "difference_ci_high": high,
    }
