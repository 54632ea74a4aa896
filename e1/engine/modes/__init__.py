"""Decoding modes: one small module per mode, one registry, one wire format (``str`` / ``Mode.parse``).

    >>> from e1.budget import Budget
    >>> names()[:6]
    ('elastic', 'truncate', 'budget-forcing', 'soft', 'early-exit', 'none')
    >>> Mode.parse("soft:strength=4").think_limit(Budget(100, 10))
    150

See :mod:`e1.engine.modes.mode` for what a mode answers, and any module here for an example of adding one.
"""

from __future__ import annotations

from e1.engine.modes.catalog import extend, names, reference, register, usage
from e1.engine.modes.mode import MODE_NAME, PLUGINS_ENV, REGISTRY, Mode, load_plugins, lookup
from e1.engine.modes.options import EXIT_TEXTS, Option
from e1.store import bound_counts

# the built-in modes, registered in this order (help and completion list them so)
from e1.engine.modes import elastic, truncate, budget_forcing, soft, early_exit, none, dynasor, nothinking  # noqa: E402,F401  isort: skip


def _load_package() -> None:
    """Import every other module of this package: a mode or option module dropped here registers itself."""
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        importlib.import_module(f"{__name__}.{info.name}")


_load_package()


def _count_bounds(text: str, think: int, solve: int) -> tuple[int | None, int | None]:
    """:meth:`Mode.count_bounds` of a stored row's mode text (none for a text no mode here reads)."""
    from e1.budget import Budget
    from e1.errors import E1Error

    try:
        return Mode.parse(text).count_bounds(Budget(int(think), int(solve)))
    except (E1Error, ValueError, TypeError):
        return None, None


bound_counts(_count_bounds)  # the samples gate (e1.store) reads each row's bounds from its mode

__all__ = [
    "EXIT_TEXTS",
    "MODE_NAME",
    "Mode",
    "Option",
    "PLUGINS_ENV",
    "REGISTRY",
    "extend",
    "load_plugins",
    "lookup",
    "names",
    "reference",
    "register",
    "usage",
]
