"""e1's budgets inside other tools: each module plugs them into one library through that library's own
extension point (``e1.integrations.lm_eval``: the model ``e1`` of lm-evaluation-harness). Those modules
import their library at the top, so their names load on first use (``__getattr__``); nothing else in e1
imports this package.

    >>> from e1.integrations import parse_model_args
"""

from __future__ import annotations

_LAZY = {
    **dict.fromkeys(("E1LM", "parse_model_args", "request_settings"), "e1.integrations.lm_eval"),
}

__all__ = [*_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.integrations' has no attribute {name!r}")
    import importlib

    module, _, attribute = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)
