"""Evaluation runs: one model under budgets, budget sweeps, and how both scale.

- :mod:`e1.eval.run`: ``evaluate(EvalConfig)`` -> samples + summary (datasets -> prompts ->
  engine -> rewards -> the run directory);
- :mod:`e1.eval.sweep`: models x datasets x modes x budgets, each model loaded once -> curves;
- :mod:`e1.eval.shared`: one unconstrained trajectory per sample serves every cell of a grid;
- :mod:`e1.eval.distributed`: torchrun ranks share the work of one run;
- :mod:`e1.eval.overlap`: scoring batch k while batch k + 1 generates (training uses it too).

    >>> from e1.eval import EvalConfig, evaluate
"""

from e1.eval.distributed import is_main_process
from e1.eval.overlap import overlapped
from e1.eval.run import EvalConfig, evaluate
from e1.eval.sweep import (AREAS, DECODED_PLOT, PROBLEMS, SweepConfig, axis_budgets, display_names, effort_grid,
                           parse_modes)
from e1.eval.sweep import sweep as run_sweep  # its own name would hide the module e1.eval.sweep

__all__ = ["AREAS", "DECODED_PLOT", "PROBLEMS", "EvalConfig", "SweepConfig", "axis_budgets",
           "display_names", "effort_grid", "evaluate", "is_main_process", "overlapped", "parse_modes", "run_sweep"]

