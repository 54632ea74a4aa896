"""A sweep's whole-curve figures as a terminal table: the area under each accuracy-vs-tokens curve
and the smallest budget that solves each problem (computed in :mod:`e1.report.spending`).

    console.print(spending_table(read_parquet(out / "areas.parquet"), read_parquet(out / "problems.parquet")))
"""

from __future__ import annotations

from e1.report.ui import _percent


def spending_table(areas, problems, names: dict[str, str] | None = None):
    """A sweep's whole curves (:mod:`e1.report.spending`): per dataset × model × mode, the area under the
    accuracy-vs-tokens curve with its 95% interval, how many problems some budget solves, the median
    b* (smallest total budget solving a problem) over those, and the share of samples the budget cut off."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from e1.budget import format_tokens

    names = names or {}
    several = "model" in areas.columns and areas["model"].nunique() > 1
    table = Table(
        title="whole curves: area and smallest solving budget",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        header_style="bold",
        title_justify="left",
        caption="AUC: mean accuracy % over the tokens the curve spans (log axis) [95% CI]; "
        "b*: median over solved problems; cut: samples cut off by the budget",
    )
    for column in ["dataset", *(["model"] if several else []), "mode", "AUC", "solved", "b*", "cut"]:
        table.add_column(column, justify="left" if column in ("dataset", "model", "mode") else "right")
    by = [c for c in ("model", "dataset", "mode") if c in areas.columns]
    grouped = {key if isinstance(key, tuple) else (key,): group for key, group in problems.groupby(by, sort=False)}
    for row in areas.itertuples(index=False):
        key = tuple(getattr(row, c) for c in by)
        group = grouped.get(key)
        solved = group["b_star"].dropna() if group is not None else []
        auc = (
            "–"
            if row.auc != row.auc
            else f"{_percent(row.auc)} [{_percent(row.auc_ci_low)}, {_percent(row.auc_ci_high)}]"
        )
        cut = "–" if group is None else f"{_percent(group['censored'].sum() / max(1, group['samples'].sum()), 0)}%"
        table.add_row(
            escape(row.dataset),
            *([escape(names.get(row.model, row.model))] if several else []),
            escape(row.mode),
            auc,
            f"{len(solved)}/{0 if group is None else len(group)}",
            format_tokens(int(solved.median())) if len(solved) else "–",
            cut,
        )
    return table
