"""Evaluation runs: one model under budgets, budget sweeps, and how both scale.

- :mod:`e1.eval.run`: ``evaluate(EvalConfig)`` -> samples + summary (datasets -> prompts ->
  engine -> rewards -> the run directory);
- :mod:`e1.eval.sweep`: models x datasets x modes x budgets, each model loaded once -> curves
  (:mod:`e1.eval.axes`: its budgets and modes from the command line's lists);
- :mod:`e1.eval.shared`: one unconstrained trajectory per sample serves every cell of a grid;
- :mod:`e1.eval.distributed`: torchrun ranks share the work of one run;
- :mod:`e1.eval.overlap`: scoring batch k while batch k + 1 generates (training uses it too).

    >>> from e1.eval import EvalConfig, evaluate
"""

from __future__ import annotations

from e1.eval.settings import RunSettings, parse_ks

# The run's modules import the engine's API clients and the reporters at the top: their names load on
# first use (``__getattr__``), so that the command line reads RunSettings without them (--help).
_LAZY = {
    "is_main_process": "e1.eval.distributed",
    "overlapped": "e1.eval.overlap",
    "EvalConfig": "e1.eval.run",
    "evaluate": "e1.eval.run",
    **dict.fromkeys(
        (
            "AREAS",
            "DECODED_PLOT",
            "PROBLEMS",
            "SweepConfig",
            "display_names",
        ),
        "e1.eval.sweep",
    ),
    **dict.fromkeys(("axis_budgets", "effort_grid", "parse_modes", "sweep_axes"), "e1.eval.axes"),
    "run_sweep": "e1.eval.sweep:sweep",  # its own name would hide the module e1.eval.sweep
}

__all__ = ["RunSettings", "parse_ks", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.eval' has no attribute {name!r}")
    import importlib

    module, _, attribute = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)
