"""e1: Elastic Reasoning under strict token budgets.

Separate budgeting gives the thinking phase ``t`` tokens and the solution phase ``s``
tokens; budget-constrained GRPO teaches a model to answer well from truncated thinking.

    >>> from e1.budget import Budget
    >>> Budget.parse("1k", "512")
    Budget(think=1024, solve=512)
"""

__version__ = "0.1.0"

# Modules that moved when the package took its layered shape (0.2): their old names still import,
# with a DeprecationWarning, until the next release. ``e1.eval`` is now a package that exports
# EvalConfig and evaluate (its other old names warn the same way: see e1/eval/__init__.py).
MOVED = {
    "e1.results": "e1.store.results", "e1.samples_store": "e1.store.samples", "e1.runlock": "e1.store.lock",
    "e1.preflight": "e1.store.preflight", "e1.metrics": "e1.report.metrics", "e1.plots": "e1.report.plots",
    "e1.ui": "e1.report.ui", "e1.elo": "e1.report.elo", "e1.prompts": "e1.data.prompts",
    "e1.demo.task": "e1.data.digits_task", "e1.sweep": "e1.eval.sweep", "e1.shared_sweep": "e1.eval.shared",
    "e1.distributed_eval": "e1.eval.distributed", "e1.overlap": "e1.eval.overlap", "e1.commands": "e1.cli",
    **{f"e1.commands.{name}": f"e1.cli.{name}" for name in ("data", "demo", "elo", "eval", "serve", "sweep", "train")},
}


def _install_moved_names() -> None:
    import importlib
    import importlib.abc
    import importlib.util
    import sys
    import warnings

    class Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Imports an old module name as the module itself at its new place (one object, not a copy)."""

        def find_spec(self, name, path, target=None):
            return importlib.util.spec_from_loader(name, self) if name in MOVED else None

        def create_module(self, spec):
            warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; the old name goes in the next release",
                          DeprecationWarning, stacklevel=2)
            module = importlib.import_module(MOVED[spec.name])
            self.real_spec = module.__spec__  # the import machinery sets the alias's spec: put it back
            return module

        def exec_module(self, module):
            module.__spec__ = self.real_spec

    if not any(type(finder).__name__ == "Moved" for finder in sys.meta_path):
        sys.meta_path.insert(0, Moved())


_install_moved_names()
