"""What e1 makes of results and shows: numbers, curves, tables and progress.

- :mod:`e1.report.metrics`: avg@n with intervals, pass@k, maj@k, forced vs natural, paired differences;
- :mod:`e1.report.elo`: a Codeforces rating and percentile from per-problem results, offline;
- :mod:`e1.report.plots`: accuracy-vs-tokens curves as a PNG;
- :mod:`e1.report.ui`: everything on a terminal (progress bars, result tables, the closing line).
"""
