"""What e1 shows on a terminal besides progress: result tables, the closing "results in" line.

Library code reports progress through the :class:`~e1.report.progress.Progress` protocol
(:mod:`e1.report.progress`: ``NullProgress`` when nobody watches); the commands pass a ``RichProgress``
and render what the library returns with the table builders here. Files hold fractions; these tables show percent.

    progress = RichProgress()
    _, summary = evaluate(config, progress=progress)
    Console().print(summary_table(summary, title="aime"))
    Console().print(results_line(config.out, "samples.parquet", "summary.parquet"))
"""

from __future__ import annotations

from pathlib import Path

BARS = " ▁▂▃▄▅▆▇█"


def results_line(out: Path, *files: str) -> str:
    """The closing line of a command: where its results are."""
    return f"results in [bold]{out}[/bold] ({', '.join(files)})"


def next_steps(out: Path, *commands: str) -> str:
    """The line after a run's results: the commands that look at it next (default: e1 view, e1 export).

    >>> next_steps(Path("runs/eval/x"))
    'next: e1 view runs/eval/x   ·   e1 export runs/eval/x'
    """
    import shlex

    place = shlex.quote(str(out))
    return "next: " + "   ·   ".join(commands or (f"e1 view {place}", f"e1 export {place}"))


def summary_table(summary, title: str = "Results"):
    """A summary DataFrame as a rich table: rates in percent, token counts as means.

    Under avg@n, its 95% interval (bootstrap over problems); "forced" and "natural" are the shares
    of samples whose thinking was forced at t or ended by itself, each with its accuracy (✓)
    below; "no ans." is the share with no extracted answer; "tok/✓" is tokens per correct answer
    and "cut" the share the budget cut off (:mod:`e1.report.spending`); "thought", "empty", "prefilled",
    "unopened": the think rates where they differ between rows; pass@k for every ``--k`` follows pass@n
    (pass@1 = avg@n); key cells are whole: a narrow terminal loses the least needed columns (captioned).
    """
    from rich.markup import escape

    from e1.budget import format_tokens

    k = int(summary["k"].max()) if len(summary) else 1
    keys = {
        column: [escape(str(value)) for value in summary[column]]
        for column in ("model", "dataset", "mode")
        if column in summary.columns
    }
    keys["t+s"] = [
        f"{format_tokens(int(t))}+{format_tokens(int(s))}"
        for t, s in zip(summary["think_budget"], summary["solve_budget"])
    ]
    rows = list(summary.itertuples(index=False))
    figures = {  # most needed first: the last ones go first when the width is short
        "avg@n": [
            _under(_percent(r.accuracy), f"{_percent(r.accuracy_ci_low)}–{_percent(r.accuracy_ci_high)}") for r in rows
        ],
        "think": [f"{r.mean_think_tokens:.0f}" for r in rows],
        "solve": [f"{r.mean_solve_tokens:.0f}" for r in rows],
        "forced": [_under(f"{_percent(r.forced_rate, 0)}%", f"✓ {_percent(r.forced_accuracy)}") for r in rows],
        f"pass@{k}": [_percent(r.pass_at_k) for r in rows],
        f"maj@{k}": [_percent(r.maj_at_k) for r in rows],
        "natural": [_under(f"{_percent(1 - r.forced_rate, 0)}%", f"✓ {_percent(r.natural_accuracy)}") for r in rows],
        **_spending_figures(summary),
        **_think_figures(summary),
        "no ans.": [f"{_percent(r.unanswered_rate, 0)}%" for r in rows],
        "probs": [str(r.problems) for r in rows],
        **_pass_figures(summary, k),
    }
    order = [
        "probs",
        "avg@n",
        f"pass@{k}",
        *_pass_figures(summary, k),
        f"maj@{k}",
        "think",
        "solve",
        *(["tok/✓"] if "tok/✓" in figures else []),
        "forced",
        "natural",
        *(["cut"] if "cut" in figures else []),
        *(header for header in THINK_HEADERS.values() if header in figures),
        "no ans.",
    ]
    caption = f"rates in %, under avg@n its 95% CI, under forced/natural their accuracy; tokens: means; k = {k}"
    return FittedTable(
        title, caption, keys, {name: figures[name] for name in order}, shed=list(figures)[::-1], keep=("avg@n",)
    )


def _spending_figures(summary) -> dict[str, list[str]]:
    """Tokens per correct answer and the share the budget cut off, where the summary has them."""
    figures = {}
    if "tokens_per_correct" in summary.columns:
        figures["tok/✓"] = ["–" if v != v else _count(v) for v in summary["tokens_per_correct"]]
    if "censored_rate" in summary.columns:
        figures["cut"] = [f"{_percent(v, 0)}%" for v in summary["censored_rate"]]
    return figures


# the think rates (e1.report.metrics.think_rates), each a column only where it differs between rows
THINK_HEADERS = {
    "think_rate": "thought",
    "empty_think_rate": "empty",
    "prefilled_rate": "prefilled",
    "unopened_rate": "unopened",
}


def _think_figures(summary) -> dict[str, list[str]]:
    """How often the model thought (its thinking empty, closed by the prompt, never opened): the rates that
    are not the same in every row; none where each is constant (a table of runs that all think says nothing)."""
    figures = {}
    for column, header in THINK_HEADERS.items():
        if column in summary.columns and summary[column].astype(float).round(6).nunique(dropna=False) > 1:
            figures[header] = ["–" if v != v else f"{_percent(v, 0)}%" for v in summary[column]]
    return figures


def _pass_figures(summary, k: int) -> dict[str, list[str]]:
    """pass@k for each ``--k`` (its ``pass_at_{k}`` column) other than 1 (= avg@n) and n (shown already)."""
    ks = sorted(
        int(c.removeprefix("pass_at_"))
        for c in summary.columns
        if c.startswith("pass_at_") and c.removeprefix("pass_at_").isdigit()
    )
    return {f"pass@{j}": [_percent(v) for v in summary[f"pass_at_{j}"]] for j in ks if j not in (1, k)}


class FittedTable:
    """A table that fits the width it is printed at by leaving out whole columns, least needed
    first (``shed``), and never by cutting the cells of its ``keys`` columns (where the keys alone
    are wider than the terminal, a key cell folds onto a second line rather than lose its end)."""

    def __init__(
        self,
        title: str,
        caption: str,
        keys: dict[str, list[str]],
        figures: dict[str, list[str]],
        shed: list[str],
        keep: tuple[str, ...] = (),
    ):
        keys, figures, constant = _drop_constant(keys, figures, keep)
        if constant:
            caption += "; the same in every row: " + ", ".join(f"{name} {value}" for name, value in constant.items())
        self.title, self.caption, self.keys, self.figures = title, caption, keys, figures
        self.shed = [header for header in shed if header in figures]

    def table(self, hidden: frozenset = frozenset(), fold: bool = False):
        from rich import box
        from rich.table import Table

        caption = self.caption + (
            f"; left out at this width: {', '.join(h for h in self.shed if h in hidden)}" if hidden else ""
        )
        table = Table(
            title=self.title,
            caption=caption,
            header_style="bold",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            show_edge=False,
        )
        for header, cells in self.keys.items():
            if fold:  # the keys alone are wider than the terminal: fold their cells, never cut them
                table.add_column(header, overflow="fold")
            else:
                table.add_column(header, no_wrap=True, min_width=max(map(len, cells), default=0))
        shown = [header for header in self.figures if header not in hidden]
        for header in shown:
            table.add_column(header, justify="right", no_wrap=True)
        for index in range(len(next(iter(self.keys.values())))):
            table.add_row(*[cells[index] for cells in self.keys.values()], *[self.figures[h][index] for h in shown])
        return table

    def __rich_console__(self, console, options):
        hidden: frozenset = frozenset()
        for header in [None, *self.shed]:
            hidden = hidden | {header} - {None}
            table = self.table(hidden)
            if console.measure(table, options=options.update_width(1 << 16)).maximum <= options.max_width:
                break
        else:
            table = self.table(hidden, fold=True)
        yield table


def _drop_constant(keys: dict[str, list[str]], figures: dict[str, list[str]], keep: tuple[str, ...]):
    """Columns of two rows or more whose every cell is the same leave the table for its caption
    (``{header: plain value}``), but those in ``keep`` and the last key column (a row needs a name)."""
    from rich.text import Text

    def same(cells: list[str]) -> bool:
        return len(cells) >= 2 and len(set(cells)) == 1

    dropped_keys = [h for h in list(keys)[:-1] if same(keys[h]) and h not in keep]
    dropped = [h for h in figures if same(figures[h]) and h not in keep]
    constant = {
        h: Text.from_markup(cells[0]).plain.replace("\n", " ")
        for h, cells in [*((h, keys[h]) for h in dropped_keys), *((h, figures[h]) for h in dropped)]
    }
    return (
        {h: cells for h, cells in keys.items() if h not in dropped_keys},
        {h: cells for h, cells in figures.items() if h not in dropped},
        constant,
    )


def _under(value: str, detail: str) -> str:
    """A two-line cell: the value, and a dim detail below it."""
    return f"{value}\n[dim]{detail}[/dim]"


def _percent(fraction: float, decimals: int = 1) -> str:
    """A fraction as percent for a table cell; "–" where there is nothing to measure (NaN)."""
    return "–" if fraction != fraction else f"{100 * fraction:.{decimals}f}"


def _count(tokens: float) -> str:
    """Mean token counts for the terminal: 87, 950, 1.2k, 12k."""
    if tokens < 1000:
        return f"{tokens:.0f}"
    return f"{tokens / 1024:.1f}k" if tokens < 10 * 1024 else f"{tokens / 1024:.0f}k"


def _bar(accuracy: float) -> str:
    """A one-character bar for an accuracy fraction."""
    return BARS[max(0, min(8, round(accuracy * 8)))]


def curves_table(curves, names: dict[str, str] | None = None):
    """A sweep's curves as rich tables (one per dataset): a row per model × mode, a column per
    budget, each cell a bar and the accuracy (%) over the mean tokens used."""
    from rich import box
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from e1.budget import format_tokens
    from e1.report.plots import curve_lines, in_budget_order

    names = names or {}
    ordered = in_budget_order(curves)
    budgets = list(dict.fromkeys(zip(ordered["think_budget"], ordered["solve_budget"])))
    one_solve = len({s for _, s in budgets}) == 1
    headers = [format_tokens(t) if one_solve else f"{format_tokens(t)}+{format_tokens(s)}" for t, s in budgets]
    axis = f"think budget t (s = {format_tokens(budgets[0][1])})" if one_solve and budgets else "budget t+s"
    several = curves["model"].nunique() > 1
    tables = []
    for dataset in dict.fromkeys(curves["dataset"]):
        table = Table(
            title=f"{dataset}: accuracy % by budget",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            header_style="bold",
            title_justify="left",
        )
        table.add_column("model · mode" if several else "mode", overflow="fold")
        for header in headers:
            table.add_column(header, justify="right", no_wrap=True)
        shown = None
        for _, model, mode, points in (line for line in curve_lines(curves) if line[0] == dataset):
            if several and model != shown:  # the model on a row of its own, its modes indented below
                table.add_row(f"[bold]{escape(names.get(model, model))}[/bold]", *[""] * len(budgets))
                shown = model
            cells = {
                (t, s): f"[cyan]{_bar(a)}[/cyan] {100 * a:.1f}\n[dim]{_count(x)}[/dim]"
                for t, s, a, x in zip(
                    points["think_budget"], points["solve_budget"], points["accuracy"], points["mean_total_tokens"]
                )
            }
            table.add_row(f"  {mode}" if several else mode, *[cells.get(b, "[dim]–[/dim]") for b in budgets])
        tables.append(table)
    key = Text(f"columns: {axis}; cells: accuracy (avg@n %) over mean tokens used", style="dim")
    return Group(*tables, key)


def differences_table(differences, names: dict[str, str] | None = None):
    """A sweep's paired comparisons (:func:`e1.report.metrics.mode_differences`): at each budget, mode minus
    other mode over the problems both have, in points, with the paired bootstrap 95% interval."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from e1.budget import format_tokens

    names = names or {}
    several = "model" in differences.columns and differences["model"].nunique() > 1
    table = Table(
        title="paired: mode − other mode at the same budget",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        header_style="bold",
        title_justify="left",
        caption="accuracy points, paired over problems; [95% bootstrap interval over problems]",
    )
    for column in (["model"] if several else []) + [
        "dataset",
        "budget",
        "mode",
        "other",
        "mode %",
        "other %",
        "difference",
    ]:
        table.add_column(column, justify="left" if column in ("model", "dataset", "mode", "other") else "right")
    for row in differences.itertuples(index=False):
        interval = f" [{100 * row.difference_ci_low:+.1f}, {100 * row.difference_ci_high:+.1f}]"
        cells = [
            escape(row.dataset),
            f"{format_tokens(row.think_budget)}+{format_tokens(row.solve_budget)}",
            escape(row.mode),
            escape(row.other_mode),
            f"{100 * row.accuracy:.1f}",
            f"{100 * row.other_accuracy:.1f}",
            f"{100 * row.accuracy_difference:+.1f}{interval}",
        ]
        table.add_row(*([escape(names.get(row.model, row.model))] if several else []), *cells)
    return table


def elo_table(estimate, min_participants: int):
    """An :class:`e1.report.elo.EloEstimate` as a table per contest and a closing line with the mean and its interval."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title="Codeforces contests")
    for column in ("contest", "type", "participants", "solved", "points", "penalty", "rank", "rating"):
        table.add_column(column, justify="left" if column in ("contest", "type") else "right")
    for c in estimate.contests:
        rating = str(c.rating) if c.rating is not None else "[dim]skipped[/dim]"
        table.add_row(
            str(c.contest_id), c.kind, str(c.participants), f"{c.solved}/{c.problems}",
            f"{c.points:g}", str(c.penalty), str(c.rank), rating,
        )  # fmt: skip
    rated = sum(c.rating is not None for c in estimate.contests)
    low, high = estimate.rating_ci
    line = f"rating [bold]{estimate.rating:.1f}[/bold] (mean over {rated} contests; 95% CI {low:.1f}–{high:.1f})"
    if estimate.percentile is not None:
        line += f", percentile [bold]{estimate.percentile:.1f}[/bold]"
    if rated < len(estimate.contests):
        line += f"; skipped: contests with <= {min_participants} rated participants"
    return Group(table, line)


def datasets_table(benchmarks, prepared: set[str], folder: Path, descriptions: bool = False):
    """The benchmark registry as a table: task, source, split, rows, and whether it is prepared."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"datasets (data dir: {folder})", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("name", "task", "hub id", "split", "rows", "prepared"):
        # only the hub id may fold, so a narrow terminal still shows every other cell whole
        wraps = column == "hub id"
        table.add_column(column, justify="right" if column == "rows" else "left", no_wrap=not wraps, overflow="fold")
    if descriptions:
        table.add_column("description")
    for benchmark in benchmarks:
        cells = [
            benchmark.name,
            benchmark.task,
            benchmark.hub_id + (f"\n[dim]config {benchmark.config}[/dim]" if benchmark.config else "")
            if benchmark.hub_id
            else f"[dim]{benchmark.source}[/dim]",
            benchmark.split or "-",
            f"{benchmark.expected_rows:,}" if benchmark.expected_rows else "?",
            "[green]yes[/green]" if benchmark.name in prepared else "no",
        ]
        table.add_row(*cells, *([benchmark.description] if descriptions else []))
    return table


def quiet_libraries() -> None:
    """Silence the progress bars, retries and warnings that transformers, datasets and
    huggingface_hub print themselves; e1 shows its own progress and one-line errors."""
    import logging
    import os

    # the libraries read these when first imported (and reset their loggers then)
    for variable in ("TRANSFORMERS_VERBOSITY", "HF_HUB_VERBOSITY", "DATASETS_VERBOSITY"):
        os.environ.setdefault(variable, "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # transformers imports DeepSpeed (when installed) while saving; on a machine without any
    # accelerator device DeepSpeed then warns that it falls back to the CPU. Name the CPU up front
    # there (what DeepSpeed would pick anyway); machines with a GPU keep DeepSpeed's own detection.
    if not any(os.path.exists(dev) for dev in ("/dev/nvidiactl", "/dev/kfd", "/dev/accel", "/dev/dri")):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for name in ("huggingface_hub", "datasets", "transformers", "fsspec", "filelock"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a base dependency
        pass
