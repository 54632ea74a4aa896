"""Paired comparisons in a sweep: each budgeted mode against ``truncate`` at the same budget.

    paired = paired_differences(samples)    # samples: a sweep's samples.parquet (with its model column)

Sample ``j`` of a problem under ``elastic`` at ``Budget(t, s)`` is paired with sample ``j`` of the
same problem under ``truncate`` at the same budget (one total ``t + s``). In a shared sweep the
two grew from the same root (:mod:`e1.shared_sweep`), so the pair differs only where the modes
do and the difference of their correctness has far less variance than two independent draws;
in an independent sweep the pairs are independent and the same formula still holds.

The standard error is clustered by problem: the differences are averaged per problem
(``d_p``), and ``se = sd(d_p) / sqrt(P)`` over the ``P`` problems (NaN for a single problem),
so samples of one problem are never counted as independent evidence. All values are fractions.
"""

from __future__ import annotations

import math

BASELINE = "truncate"
PAIRED_COLUMNS = [
    "model", "dataset", "mode", "baseline", "think_budget", "solve_budget", "problems", "pairs", "accuracy",
    "baseline_accuracy", "difference", "difference_se",
]
_PAIR = ["problem_id", "sample_index"]


def paired_differences(samples, baseline: str = BASELINE):
    """One row per model × dataset × mode (budgeted: elastic, budget-forcing) × budget that the
    sweep also ran in ``baseline``: both accuracies, their paired difference and its clustered
    standard error (see the module docstring). Empty when the sweep has no baseline mode."""
    import pandas as pd

    records = []
    for (model, dataset, think, solve), group in samples.groupby(["model", "dataset", "think_budget", "solve_budget"],
                                                                  sort=False):
        base = group[group["mode"] == baseline].set_index(_PAIR)["correct"].astype(float)
        if base.empty:
            continue
        for mode, rows in group[~group["mode"].isin([baseline, "none"])].groupby("mode", sort=False):
            pairs = rows.set_index(_PAIR)["correct"].astype(float).to_frame("mode").join(base.rename("base"), how="inner")
            if pairs.empty:
                continue
            per_problem = (pairs["mode"] - pairs["base"]).groupby(level="problem_id").mean()  # d_p
            records.append(dict(
                model=model, dataset=dataset, mode=mode, baseline=baseline, think_budget=think, solve_budget=solve,
                problems=len(per_problem), pairs=len(pairs), accuracy=float(pairs["mode"].mean()),
                baseline_accuracy=float(pairs["base"].mean()), difference=float((pairs["mode"] - pairs["base"]).mean()),
                difference_se=clustered_se(per_problem.tolist()),
            ))
    return pd.DataFrame(records, columns=PAIRED_COLUMNS)


def clustered_se(per_problem: list[float]) -> float:
    """Standard error of the mean of per-problem values: sd (n − 1) / sqrt(P); NaN below 2 problems.

    >>> clustered_se([0.0, 1.0])   # sd = sqrt(0.5), / sqrt(2)
    0.5
    """
    count = len(per_problem)
    if count < 2:
        return float("nan")
    mean = sum(per_problem) / count
    variance = sum((x - mean) ** 2 for x in per_problem) / (count - 1)
    return math.sqrt(variance / count)
