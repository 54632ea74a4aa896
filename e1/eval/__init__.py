"""Evaluation runs: one model under budgets, budget sweeps, and how both scale.

- :mod:`e1.eval.run`: ``evaluate(EvalConfig)`` -> samples + summary (datasets -> prompts ->
  engine -> rewards -> the run directory);
- :mod:`e1.eval.sweep`: models x datasets x modes x budgets, each model loaded once -> curves;
- :mod:`e1.eval.shared`: one unconstrained trajectory per sample serves every cell of a grid;
- :mod:`e1.eval.distributed`: torchrun ranks share the work of one run;
- :mod:`e1.eval.overlap`: scoring batch k while batch k + 1 generates (training uses it too).

    >>> from e1.eval import EvalConfig, evaluate
"""

from e1.eval.run import EvalConfig, evaluate

__all__ = ["EvalConfig", "evaluate"]


def __getattr__(name: str):
    """``e1.eval``'s other names of e1 0.1 (it was one module): still found in :mod:`e1.eval.run`, with a warning."""
    import warnings

    from e1.eval import run

    if name.startswith("__") or not hasattr(run, name):
        raise AttributeError(f"module 'e1.eval' has no attribute {name!r}")
    warnings.warn(f"e1.eval.{name} moved to e1.eval.run.{name}; the old name goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(run, name)
