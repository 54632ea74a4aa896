"""Names e1 is given, and the registries they key: one check for each.

A name that becomes a column, a path, a registry key, a field or a task passes :meth:`Name.check`
(or :meth:`Name.matches`), which matches the *whole* text: Python's ``$`` also matches before a
final newline, so a ``^...$`` pattern lets ``reward\\n`` through; a :class:`Name` uses
``re.fullmatch`` and nothing else.

    >>> NAME.matches("math"), NAME.matches("math\\n"), NAME.matches(" math")
    (True, False, False)

A registry (rewards, benchmarks, prompt styles, decoding modes, length rewards) is a
:class:`Registry`: a dict whose one way in is assignment, ``registry[name] = value``, the gate
every registration passes. It refuses a name that is not a :class:`Name`, and a name another
definition holds already (one of e1's own, or the user's), in one line naming the name and the
module that holds it: user code (``--include``, ``E1_MODES``) never replaces e1's own silently.
The same definition registered again is no change and passes: the same object, or (user code
imported twice) the same function or class of the same module; e1's own definitions only as
themselves, so code that names itself after an e1 module replaces nothing.

    >>> styles = Registry("prompt style")
    >>> styles["shout"] = str.upper
    >>> styles["shout"] = str.lower  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    e1.errors.ConfigError: prompt style 'shout' is already registered by ... (register yours under another name)
"""

from __future__ import annotations

import re
import sys
from typing import Any

from e1.errors import ConfigError, E1Error

_SHOWN_CHARS = 40  # of a refused name, in its error line


class Name:
    """A kind of name: ``pattern`` must match the whole text; ``rule`` says it in words, for hints."""

    def __init__(self, pattern: str, rule: str):
        self.pattern, self.rule = re.compile(pattern), rule

    def matches(self, value: Any) -> bool:
        return isinstance(value, str) and self.pattern.fullmatch(value) is not None

    def check(self, value: Any, what: str, error: type[E1Error] = ConfigError) -> str:
        """``value`` when it is such a name; else ``error`` naming ``what`` it was to be, and the rule."""
        if not self.matches(value):
            raise error(f"{what} {shown(value)} is not a name", hint=self.rule)
        return value


def shown(value: Any) -> str:
    """A name as an error line shows it: quoted, escaped (a newline reads ``\\n``), cut short."""
    text = (
        repr(value) if not isinstance(value, str) or len(value) <= _SHOWN_CHARS else repr(value[:_SHOWN_CHARS]) + "..."
    )
    return text


# a registry key, a task, a prompt style, a length reward: what a user types and a file holds
NAME = Name(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
    "letters, digits, '.', '_' or '-', a letter or digit first, at most 64 characters",
)

# the environment variable naming modules (.py files or module names) that register more modes: user code,
# recorded and checked as --include is (e1.data.include)
MODES_ENV = "E1_MODES"


def mode_plugins() -> list[str]:
    """The items ``$E1_MODES`` names (comma-separated .py files or module names), in order."""
    import os

    return list(filter(None, (part.strip() for part in os.environ.get(MODES_ENV, "").split(","))))


# a whole number as typed: ASCII digits only (``str.isdigit`` takes ``²`` and ``١``, which ``int`` refuses or reads)
DIGITS = Name(r"[0-9]+", "digits 0-9")


class Registry(dict):
    """Names to definitions, written only through ``registry[name] = value`` (the one gate)."""

    def __init__(self, kind: str, error: type[E1Error] = ConfigError, name: Name = NAME):
        super().__init__()
        self.kind, self.error, self.name = kind, error, name
        self.origins: dict[str, str] = {}  # name -> the module that registered it

    def __setitem__(self, key: str, value: Any) -> None:
        self.name.check(key, f"a {self.kind}'s name", self.error)
        origin = _registering_module()
        held = self.origins.get(key, "?")
        own = _own(held)  # e1's own definition is replaced by nothing but itself
        if key in self and not (self[key] is value or (not own and _same(self[key], value))):
            whose = f"e1's own ({held})" if own else f"already registered by {held}"
            raise self.error(f"{self.kind} {key!r} is {whose}", hint="register yours under another name")
        super().__setitem__(key, value)
        self.origins.setdefault(key, origin)

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other):
        self.update(other)
        return self

    def copy(self) -> Registry:
        """A registry holding the same names, behind the same gate (a test's scratch copy)."""
        copied = Registry(self.kind, self.error, self.name)
        dict.update(copied, self)
        copied.origins.update(self.origins)
        return copied

    def pop(self, key, *default):
        if key in self:
            self._removable(key)
        self.origins.pop(key, None)
        return super().pop(key, *default)

    def __delitem__(self, key: str) -> None:
        self._removable(key)
        super().__delitem__(key)
        self.origins.pop(key, None)

    def popitem(self):
        key = next(reversed(self), None)
        if key is None:
            return super().popitem()  # its own KeyError
        return key, self.pop(key)

    def clear(self) -> None:
        for key in list(self):
            self.pop(key)

    def _removable(self, key: str) -> None:
        """Refuse removing e1's own definition (removing it, then registering, would replace it)."""
        held = self.origins.get(key, "?")
        if _own(held):
            raise self.error(
                f"{self.kind} {key!r} is e1's own ({held}) and cannot be removed",
                hint="register yours under another name",
            )


def _own(origin: str) -> bool:
    """Whether a registering module is one of e1's own (its dotted name under ``e1``; the user's is a file)."""
    return origin.split(".")[0] == "e1"


def _same(held: Any, value: Any) -> bool:
    """One user definition: the same function or class of the same module (imported again), or an equal value."""
    if hasattr(held, "__qualname__") and hasattr(value, "__qualname__"):
        return (getattr(held, "__module__", None), held.__qualname__) == (
            getattr(value, "__module__", None),
            value.__qualname__,
        )
    return type(held) is type(value) and held == value


def _registering_module() -> str:
    """The module whose code registers: the first caller outside this module and outside the
    ``register*`` functions that wrap the gate (``@register_reward``, ``register(Benchmark(...))``):
    e1's by its name (``e1.rewards.math``), the user's by its file (an ``--include``'s path)."""
    frame = sys._getframe(2)  # the caller of __setitem__ (a register* wrapper, or the registering module)
    while frame is not None and (
        frame.f_globals.get("__name__") == __name__ or frame.f_code.co_name.startswith("register")
    ):
        frame = frame.f_back
    if frame is None:
        return "?"
    name, file = str(frame.f_globals.get("__name__", "?")), frame.f_globals.get("__file__")
    return name if name.split(".")[0] == "e1" or not file else str(file)


def e1_state() -> dict[tuple[str, ...], Any]:
    """What user code could replace of e1's own, to check it did not: each loaded ``e1`` module's
    globals, and the attributes of each class it defines, as (module, [class,] name) -> object."""
    state: dict[tuple[str, ...], Any] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] != "e1":
            continue
        for name, value in list(vars(module).items()):
            state[(module_name, name)] = value
            if isinstance(value, type) and value.__module__ == module_name:
                state.update({(module_name, name, key): member for key, member in list(vars(value).items())})
            elif isinstance(value, Registry):  # its entries: past its gate (dict.__setitem__) is no way in either
                state.update({(module_name, name + "[]", key): member for key, member in list(value.items())})
    return state


def replaced(before: dict[tuple[str, ...], Any], by: tuple[str, ...] = ()) -> str | None:
    """The first of e1's own names (``e1.rewards.math.solution_of``) rebound, removed or overridden since
    ``before`` (:func:`e1_state`), each put back as it was, or (in an e1 module first loaded since) set
    to a function or class of the modules named ``by*``; None when none was. A name that held None
    may be set (e1's lazy start-up)."""
    after, missing = e1_state(), object()
    changed = [key for key, value in before.items() if value is not None and after.get(key, missing) is not value]
    added = [
        key
        for key in after
        if key not in before
        and not key[1].endswith("[]")  # a new name in a registry is a registration: its gate checked it
        and (
            key[:2] in before and len(key) == 3 or (by and str(getattr(after[key], "__module__", None)).startswith(by))
        )
    ]  # an override, or the user's code
    for key in changed + [key for key in added if key[:2] in before]:
        owner = sys.modules[key[0]] if len(key) == 2 else vars(sys.modules[key[0]])[key[1].removesuffix("[]")]
        if isinstance(owner, Registry):
            dict.__setitem__(owner, key[-1], before[key])
        else:
            setattr(owner, key[-1], before[key]) if key in before else delattr(owner, key[-1])
    return ".".join((changed + added)[0]) if changed or added else None
