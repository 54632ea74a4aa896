"""What e1 makes of results and shows: numbers, curves, tables and progress.

- :mod:`e1.report.metrics`: avg@n with intervals, pass@k, maj@k, forced vs natural, paired differences;
- :mod:`e1.report.elo`: a Codeforces rating and percentile from per-problem results, offline;
- :mod:`e1.report.plots`: accuracy-vs-tokens curves as a PNG;
- :mod:`e1.report.ui`: result tables and the closing line on a terminal;
- :mod:`e1.report.progress`: progress bars (or plain lines) and the protocol library code reports through;
- :mod:`e1.report.eta`: time left from work at batch ends, not from the rate of finished samples.
"""

from e1.report.curve_tables import spending_table
from e1.report.elo import FetchConfig, check_elo_options, estimate_rating, fetch_contests, load_results
from e1.report.eta import WorkEta
from e1.report.export import FORMATS
from e1.report.export import export as export_run  # its own name would hide the module e1.report.export
from e1.report.hub_export import check_repo_id
from e1.report.metrics import DIFFERENCES, bootstrap_interval, mode_differences, summarize
from e1.report.plots import plot_curves
from e1.report.progress import NullProgress, RichProgress, step_status
from e1.report.push import push as push_results
from e1.report.reporting import (
    REPORTERS,
    Reporters,
    TensorBoardReporter,
    WandbReporter,
    check_trackers,
    open_reporters,
    parse_report_to,
    report_results,
)
from e1.report.spending import curve_areas, solving_budgets
from e1.report.ui import (
    curves_table,
    datasets_table,
    differences_table,
    elo_table,
    next_steps,
    quiet_libraries,
    results_line,
    summary_table,
)

__all__ = [
    "DIFFERENCES",
    "FORMATS",
    "REPORTERS",
    "FetchConfig",
    "NullProgress",
    "Reporters",
    "RichProgress",
    "TensorBoardReporter",
    "WandbReporter",
    "WorkEta",
    "bootstrap_interval",
    "check_elo_options",
    "check_repo_id",
    "check_trackers",
    "curve_areas",
    "curves_table",
    "datasets_table",
    "differences_table",
    "elo_table",
    "estimate_rating",
    "export_run",
    "fetch_contests",
    "load_results",
    "mode_differences",
    "next_steps",
    "open_reporters",
    "parse_report_to",
    "plot_curves",
    "push_results",
    "quiet_libraries",
    "report_results",
    "results_line",
    "solving_budgets",
    "spending_table",
    "step_status",
    "summarize",
    "summary_table",
]
