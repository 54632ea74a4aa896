"""e1.report.plots: curves.png panels, lines and the 95% bands."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from e1.report.plots import draw_curves, plot_curves  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def curves(bands: bool = True):
    """Two modes of one model on one dataset at three budgets; accuracy 0.2, 0.4, 0.6 (elastic)."""
    rows = []
    for mode, shift in (("elastic", 0.0), ("truncate", -0.1)):
        for t, accuracy in zip((256, 512, 1024), (0.2, 0.4, 0.6)):
            row = dict(
                model="m",
                dataset="aime",
                mode=mode,
                think_budget=t,
                solve_budget=512,
                accuracy=accuracy + shift,
                mean_total_tokens=float(t + 400),
            )
            if bands:
                row |= dict(accuracy_ci_low=accuracy + shift - 0.05, accuracy_ci_high=accuracy + shift + 0.1)
            rows.append(row)
    return pd.DataFrame(rows)


def test_each_line_gets_its_band_in_percent():
    fig, _ = draw_curves(curves())
    try:
        ax = fig.axes[0]
        assert len(ax.lines) == 2 and len(ax.collections) == 2  # a band per mode
        lows, highs = [], []
        for band, line in zip(ax.collections, ax.lines):
            ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
            lows.append(ys.min())
            highs.append(ys.max())
            assert band.get_facecolor()[0][:3] == pytest.approx(matplotlib.colors.to_rgb(line.get_color()))
        # elastic: 100 × (0.2 − 0.05) .. 100 × (0.6 + 0.1); truncate 10 points lower
        assert lows == pytest.approx([15.0, 5.0]) and highs == pytest.approx([70.0, 60.0])
        assert "95% CI" in ax.get_ylabel()
        assert ax.get_ylim()[1] == pytest.approx(1.03 * 80)  # room for the highest band (70 %), not just 60 %
    finally:
        plt.close(fig)


def test_curves_without_intervals_are_drawn_without_bands(tmp_path):
    fig, _ = draw_curves(curves(bands=False))
    try:
        assert len(fig.axes[0].lines) == 2 and not fig.axes[0].collections
        assert "CI" not in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)
    path = plot_curves(curves(), tmp_path / "curves.png")
    assert path.read_bytes()[:8] == PNG_MAGIC
