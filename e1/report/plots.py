"""Accuracy-vs-tokens curves from a sweep's ``curves`` DataFrame, as a PNG.

    plot_curves(curves, Path("runs/sweep/curves.png"))      # one panel per dataset, log x axis
    plot_curves(curves, path, x="think")                     # x: the measured thinking tokens (an effort axis)
    plot_curves(curves, Path("runs/sweep/curves_decoded.png"), x="decoded")   # x: output + trial tokens

The same curves as a terminal table: :func:`e1.report.ui.curves_table`. ``accuracy`` is a fraction
in the frame and is drawn in percent; where the frame has ``accuracy_ci_low``/``_high`` (the 95%
bootstrap interval, :mod:`e1.report.metrics`) each line gets a shaded band between them (curves
written before intervals existed are drawn without). matplotlib is imported inside
:func:`draw_curves` (Agg backend, no display needed), so importing this module stays light.
"""

from __future__ import annotations

from pathlib import Path

from e1.budget import format_tokens
from e1.engine import Mode
from e1.store import atomic_write

# one line style per decoding mode, one colour per model
BAND_COLUMNS = {"accuracy_ci_low", "accuracy_ci_high"}
MODE_STYLES = {
    "elastic": ("-", "o"),
    "truncate": ("--", "s"),
    "budget-forcing": (":", "^"),
    "none": ("-.", "D"),
    "early-exit": ((0, (5, 1, 1, 1)), "v"),
    "soft": ((0, (3, 1)), "P"),
    "dynasor": ((0, (1, 1)), "X"),
}
# the x axis: tokens output per sample, every token decoded for it (early-exit's rolled-back trials
# too), or the thinking tokens measured (an effort axis: a hosted API's levels have no budget to place)
X_AXES = {
    "output": ("mean_total_tokens", "mean tokens used per sample (think + solution)"),
    "decoded": ("mean_decoded_tokens", "mean tokens decoded per sample (output + trial answers)"),
    "think": ("mean_think_tokens", "mean thinking tokens per sample (measured)"),
}


def in_budget_order(curves):
    """Points of each line in budget order (the x values then mostly grow left to right)."""
    return curves.assign(_total=curves["think_budget"] + curves["solve_budget"]).sort_values(
        ["_total", "think_budget"], kind="stable"
    )


def curve_lines(curves):
    """(dataset, model, mode, points) per line, in the frame's order of datasets, models and modes."""
    for dataset in dict.fromkeys(curves["dataset"]):
        panel = curves[curves["dataset"] == dataset]
        for model in dict.fromkeys(panel["model"]):
            for mode in dict.fromkeys(panel.loc[panel["model"] == model, "mode"]):
                points = panel[(panel["model"] == model) & (panel["mode"] == mode)]
                yield dataset, model, mode, in_budget_order(points)


def effort_lines(curves):
    """Points of an effort axis (``effort`` set) joined into one line per model × mode: each row's
    mode without its level, the levels in order of measured thinking tokens."""
    if "effort" not in curves.columns or not (curves["effort"] != "").any():
        return curves
    base = curves["mode"].map(lambda mode: str(Mode.parse(mode).replace(effort="")))
    return curves.assign(mode=base).sort_values("mean_think_tokens", kind="stable")


def plot_curves(curves, path: Path, names: dict[str, str] | None = None, x: str = "output") -> Path:
    """:func:`draw_curves`, written atomically to ``path`` as a PNG."""
    import matplotlib.pyplot as plt

    fig, extra = draw_curves(curves, names, x)
    try:
        return atomic_write(
            path, lambda tmp: fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight", bbox_extra_artists=extra)
        )
    finally:
        plt.close(fig)


def draw_curves(curves, names: dict[str, str] | None = None, x_axis: str = "output"):
    """(figure, artists outside the axes): accuracy (avg@n, drawn in %) against mean tokens used
    (``x_axis`` "output") or decoded ("decoded", :data:`X_AXES`), one panel per dataset and one line
    per model × mode, with its 95% band where known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, curves = names or {}, effort_lines(curves)
    datasets = list(dict.fromkeys(curves["dataset"]))
    models = list(dict.fromkeys(curves["model"]))
    columns = min(len(datasets), 3) or 1
    rows = -(-len(datasets) // columns) or 1
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab10")
    banded = BAND_COLUMNS <= set(curves.columns)  # curves written before intervals existed have none
    highest = curves["accuracy_ci_high" if banded else "accuracy"]
    top = 100 * float(highest.max()) if len(curves) else 100.0
    upper = min(100.0, max(10.0, 10 * (top // 10 + 1)))  # the next multiple of 10 above the best accuracy (or band)
    for dataset, model, mode, points in curve_lines(curves):
        ax = axes.flat[datasets.index(dataset)]
        linestyle, marker = MODE_STYLES.get(mode.split(":")[0], ("-", "o"))
        label = f"{names.get(model, model)} · {mode}" if len(models) > 1 else mode
        column = X_AXES[x_axis][0]
        if "effort" in points.columns and (points["effort"] != "").any():
            points = points.sort_values(column, kind="stable")
            label += f" (effort: {', '.join(points['effort'])})"
        xs, colour = points[column].clip(lower=1), colours(models.index(model) % 10)
        ax.plot(
            xs,
            100 * points["accuracy"],
            linestyle=linestyle,
            marker=marker,
            color=colour,
            label=label,
            linewidth=1.6,
            markersize=5,
        )
        if banded:
            ax.fill_between(
                xs,
                100 * points["accuracy_ci_low"],
                100 * points["accuracy_ci_high"],
                color=colour,
                alpha=0.15,
                linewidth=0,
            )
    _style_panels(axes, datasets, x_axis, upper)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy, avg@n (%)" + (", band: 95% CI" if banded else ""))
    title = "Accuracy vs tokens used" + (f" — {names.get(models[0], models[0])}" if len(models) == 1 else "")
    extra = [fig.suptitle(title), _legend(fig, axes.flat[0], len(models))]
    fig.tight_layout()
    return fig, [a for a in extra if a]


def _style_panels(axes, datasets: list[str], x_axis: str, upper: float) -> None:
    """Each dataset's panel: its title, tokens on a log-2 axis, accuracy up to ``upper`` %; spare panels hidden."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for index, ax in enumerate(axes.flat):
        if index >= len(datasets):
            ax.set_visible(False)
            continue
        ax.set_title(datasets[index])
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=2, subs=(1.0, 1.5)))  # 512, 768, 1k, 1.5k, 2k, 3k, ...
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_tokens(round(x))))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(X_AXES[x_axis][1])
        ax.set_ylim(-0.03 * upper, 1.03 * upper)  # the margins keep markers at 0 % and at the top whole
        ax.grid(True, which="major", alpha=0.3)


def _legend(fig, ax, models: int):
    """Below the panels, one column per mode and one row per model (entries fill column by column)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    modes = len(handles) // models
    order = [model * modes + mode for mode in range(modes) for model in range(models)]
    if len(handles) % models:  # a panel without every model × mode: keep the plotting order
        modes, order = 3, range(len(handles))
    return fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="upper center",
        ncol=modes,
        frameon=False,
        fontsize=9,
        bbox_to_anchor=(0.5, 0.0),
    )
