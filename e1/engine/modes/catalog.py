"""Adding to the modes and listing them: :func:`register` (a mode class, by its name), :func:`extend`
(an option, to every mode it fits), and :func:`names`, :func:`usage` and :func:`reference` (for help and
completion), all over the one table of :mod:`e1.engine.modes.mode` (``REGISTRY``).

    @register
    class Halfway(Mode):
        name, summary = "halfway", "thinking cut at half of t"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from e1.engine.modes.mode import REGISTRY, Mode, load_plugins, lookup
from e1.errors import ConfigError

if TYPE_CHECKING:
    from e1.engine.modes.options import Option

EXTENSIONS: list[tuple[Option, Callable[[type[Mode]], bool]]] = []  # options added to the modes they fit (extend)


def register(cls: type[Mode]) -> type[Mode]:
    """Add a mode class to the registry under its ``name`` (a class decorator); a name another class
    holds (a built-in's included) is refused in one line."""
    REGISTRY[cls.name] = cls
    for option, fits in EXTENSIONS:
        _add_option(cls, option, fits)
    return cls


def extend(option: Option, fits: Callable[[type[Mode]], bool]) -> Option:
    """Add ``option`` to every registered mode class that ``fits`` (and to those registered later), after
    its own options: how a module brings one option to existing modes without editing them."""
    EXTENSIONS.append((option, fits))
    for cls in list(REGISTRY.values()):
        _add_option(cls, option, fits)
    return option


def _add_option(cls: type[Mode], option: Option, fits: Callable[[type[Mode]], bool]) -> None:
    held = next((declared for declared in cls.options if declared.name == option.name), None) if fits(cls) else option
    if held is not None and held is not option:  # an extension adds an option: it never replaces one, nor is dropped
        raise ConfigError(f"mode {cls.name!r} already has an option {option.name!r}", hint="name the option apart")
    if held is None:
        cls.options = (*cls.options, option)


def names() -> tuple[str, ...]:
    """Every registered mode name, built-in ones first."""
    load_plugins()
    return tuple(REGISTRY)


def usage() -> str:
    """Every mode with its options, for ``--help`` (read from the registry, so it never drifts).

    >>> usage().split(" | ")[1]
    'truncate'
    """

    def option(o) -> str:
        choices = getattr(o, "choices", ())
        return f"{o.name}={'|'.join(choices) if choices else '…' if o.default in (None, '') else o.format(o.default)}"

    return " | ".join(
        kind.name + (f"[:{':'.join(map(option, kind.options))}]" if kind.options else "")
        for kind in (lookup(name) for name in names())
    )


def reference() -> list[tuple[str, str, tuple[str, ...]]]:
    """Every mode as ``(name, summary, each option's help)``, for ``e1 help modes``.

    >>> reference()[1]
    ('truncate', 'one budget t + s over thinking and solution together; nothing is forced', ())
    """
    return [
        (kind.name, kind.summary, tuple(option.help for option in kind.options))
        for kind in (lookup(name) for name in names())
    ]
