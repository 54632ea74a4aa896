"""How a model spends a budget: tokens per correct answer, answers the budget cut off, the area
under a whole accuracy-vs-tokens curve, and the smallest budget that solves each problem.

    cell_spending(group)              # in e1.report.metrics: {"tokens_per_correct", "censored_rate"} of a cell
    areas = curve_areas(samples)      # one row per dataset × mode (× model): normalised AUC and its CI
    solved = solving_budgets(samples) # one row per dataset × mode × problem: b*, censored samples

Definitions (tokens = thinking + solution tokens of a sample; rates are fractions):

- ``tokens_per_correct`` = Σ tokens / Σ correct over a cell's samples (NaN when none is correct).
- ``censored_rate``: the share of samples the budget cut off before the model finished: thinking
  forced at t, or the output stopped at its token limit (``finish_reason == "length"``).
- ``auc``: with a curve's cells as points (x = log2 of mean tokens, y = accuracy) in x order,
  the trapezoid area divided by the x range: the mean accuracy over the tokens the curve spans,
  on the plot's log axis, in [0, 1]. One point (or one x) has no area: NaN. ``auc_ci_low/high``:
  its 95% bootstrap interval, resampling problems (the same draw for every cell of the curve).
- ``b_star``: a problem's smallest total budget (t + s) at which it is solved more often than
  not (avg@n ≥ 0.5), with that cell's ``b_star_think``; NA when no budget of the curve solves it.
  ``censored``: how many of its samples, over all budgets of the curve, the budget cut off.
"""

from __future__ import annotations

import math

from e1.report.metrics import LEVEL, RESAMPLES, SEED, censored

CURVE_KEY = ["dataset", "mode"]
AREA_COLUMNS = ["points", "problems", "min_tokens", "max_tokens", "auc", "auc_ci_low", "auc_ci_high"]
PROBLEM_COLUMNS = ["problem_id", "b_star", "b_star_think", "censored", "samples"]
SOLVED = 0.5  # a problem is solved at a budget when at least this share of its samples is correct


def area(x, y) -> float:
    """Normalised area under ``y`` over ``x`` (points in any order).

    >>> area([1, 2, 3], [0.2, 0.4, 0.6])
    0.4
    >>> math.isnan(area([5], [1.0]))
    True
    """
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    span = x[-1] - x[0] if len(x) else 0.0
    return float(np.trapezoid(y, x) / span) if span > 0 else math.nan


def curve_areas(
    samples,
    by: list[str] = CURVE_KEY,
    *,
    cells: tuple[str, ...] = ("think_budget", "solve_budget"),
    resamples: int = RESAMPLES,
    seed: int = SEED,
):
    """One row per curve (``by``: dataset, mode, and ``model`` in a sweep) with :data:`AREA_COLUMNS`;
    ``cells``: the columns that tell a curve's points apart (an effort axis adds ``effort``)."""
    import pandas as pd

    records = [
        dict(zip(by, key if isinstance(key, tuple) else (key,))) | _curve_area(curve, list(cells), resamples, seed)
        for key, curve in samples.groupby(by, sort=False)
    ]
    return pd.DataFrame(records, columns=[*by, *AREA_COLUMNS])


def _curve_area(curve, points: list[str], resamples: int, seed: int) -> dict:
    """The area of one curve and its interval; problems are those every cell of the curve has."""
    import numpy as np

    curve = curve.assign(tokens=curve["think_tokens"] + curve["solve_tokens"])
    cells = curve.groupby([*points, "problem_id"])
    table = cells.agg(correct=("correct", "sum"), samples=("correct", "size"), tokens=("tokens", "sum"))
    wide = table.unstack(points).dropna()  # [P, 3 × C]: problems every cell has
    correct, count, tokens = (wide[name].to_numpy(dtype=float) for name in ("correct", "samples", "tokens"))  # [P, C]
    if not len(wide):
        return dict(
            points=0,
            problems=0,
            min_tokens=math.nan,
            max_tokens=math.nan,
            auc=math.nan,
            auc_ci_low=math.nan,
            auc_ci_high=math.nan,
        )
    x = np.log2(np.maximum(tokens.sum(0) / count.sum(0), 1.0))  # [C]
    y = correct.sum(0) / count.sum(0)  # [C]
    auc, low, high = area(x, y), math.nan, math.nan
    if not math.isnan(auc):  # no area, no interval: the resamples are not drawn
        weights = np.random.default_rng(seed).multinomial(
            len(wide), [1 / len(wide)] * len(wide), size=resamples
        )  # [R, P]
        drawn = weights @ count  # [R, C]
        xs = np.log2(np.maximum((weights @ tokens) / drawn, 1.0))  # [R, C]
        ys = (weights @ correct) / drawn  # [R, C]
        tail = (1 - LEVEL) / 2
        low, high = np.quantile([area(row_x, row_y) for row_x, row_y in zip(xs, ys)], [tail, 1 - tail])
    return dict(
        points=len(x),
        problems=len(wide),
        min_tokens=float(2 ** x.min()),
        max_tokens=float(2 ** x.max()),
        auc=auc,
        auc_ci_low=float(low),
        auc_ci_high=float(high),
    )


def solving_budgets(samples, by: list[str] = CURVE_KEY):
    """One row per curve (``by``) × problem with :data:`PROBLEM_COLUMNS`."""
    import pandas as pd

    frame = samples.assign(total=samples["think_budget"] + samples["solve_budget"], cut=censored(samples))
    per_cell = (
        frame.groupby([*by, "problem_id", "total", "think_budget"], sort=True)
        .agg(accuracy=("correct", "mean"), cut=("cut", "sum"), samples=("correct", "size"))
        .reset_index()
    )
    records = []
    for key, cells in per_cell.groupby([*by, "problem_id"], sort=False):
        solved = cells[cells["accuracy"] >= SOLVED]  # in budget order (sorted above)
        first = solved.iloc[0] if len(solved) else None
        records.append(
            dict(zip([*by, "problem_id"], key))
            | {
                "b_star": None if first is None else int(first["total"]),
                "b_star_think": None if first is None else int(first["think_budget"]),
                "censored": int(cells["cut"].sum()),
                "samples": int(cells["samples"].sum()),
            }
        )
    frame = pd.DataFrame(records, columns=[*by, *PROBLEM_COLUMNS])
    return frame.astype({"b_star": "Int64", "b_star_think": "Int64"})
