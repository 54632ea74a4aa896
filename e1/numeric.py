"""Every number a user gives is checked for what it is: finite, in range, whole where it must be.

A numeric option or config field declares a :class:`Number` (its kind and bounds) once, in a
table beside its dataclass; the dataclass's ``__post_init__`` checks its fields against the table
(:func:`check_numbers`), so the CLI, config files and Python callers all get the same check,
before anything loads. ``nan < 0`` is False, so a bare ``< 0`` lets NaN through: this module is
the one place that compares.

    >>> Number(int, min=1).check(3, "--steps")
    3
    >>> Number(int, min=1).check(0, "--steps")
    Traceback (most recent call last):
    e1.errors.ConfigError: --steps must be >= 1, got 0
    >>> Number(float, min=0, above=True).check(float("nan"), "lr")
    Traceback (most recent call last):
    e1.errors.ConfigError: lr must be a finite number > 0, got nan
    >>> Number(int, min=0).check(10**30, "--seed")
    Traceback (most recent call last):
    e1.errors.ConfigError: --seed must be <= 9223372036854775807, got 1000000000000000000000000000000
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from e1.errors import ConfigError

INT64_MAX = 2**63 - 1  # whole numbers end up in torch, numpy and parquet int64 columns


@dataclass(frozen=True)
class Number:
    """What a numeric setting may hold. ``kind`` int: whole numbers only (never a bool), bounded
    by int64 unless ``max`` says less; float: any finite real. ``min``/``max`` are inclusive unless
    ``above``/``below`` (then ``> min``, ``< max``); ``optional``: None (unset) is allowed too."""

    kind: type = float
    min: float | None = None
    max: float | None = None
    above: bool = False
    below: bool = False
    optional: bool = False
    hint: str | None = None

    def __post_init__(self):
        if self.kind not in (int, float):
            raise TypeError(f"Number kind must be int or float, not {self.kind!r}")

    @property
    def low(self):
        """``min``, else the least int64 or float."""
        return self.min if self.min is not None else -INT64_MAX - 1 if self.kind is int else -sys.float_info.max

    @property
    def high(self):
        return self.max if self.max is not None else INT64_MAX if self.kind is int else sys.float_info.max

    def describe(self) -> str:
        """The range in words: ``>= 1``, ``> 0``, ``in (0, 1]``, ``in 1..65535``."""
        if self.min is not None and self.max is not None:
            if self.kind is int and not (self.above or self.below):
                return f"in {_show(self.min)}..{_show(self.max)}"
            return f"in {'(' if self.above else '['}{_show(self.min)}, {_show(self.max)}{')' if self.below else ']'}"
        if self.min is not None:
            return f"{'>' if self.above else '>='} {_show(self.min)}"
        if self.max is not None:
            return f"{'<' if self.below else '<='} {_show(self.max)}"
        return ""

    def fits(self, value) -> bool:
        """Whether ``value`` is allowed (:meth:`check` without the error)."""
        try:
            self.check(value, "value")
        except ConfigError:
            return False
        return True

    def check(self, value, name: str):
        """``value`` if it fits, else a ConfigError naming ``name``, the range and the value."""
        if value is None and self.optional:
            return value
        whole = self.kind is int
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
            expected = "a whole number" if whole else "a number"
            raise ConfigError(
                f"{name} must be {expected}{_space(self.describe())}, got {_show(value)}",
                hint=self.hint or _unset(self),
            )
        if not isinstance(value, numbers.Integral) and not math.isfinite(value):  # ints are finite (10**400 too)
            raise ConfigError(
                f"{name} must be a finite number{_space(self.describe())}, got {_show(value)}", hint=self.hint
            )
        low, high = self.low, self.high  # exact comparisons: 10**400 > 1.0 is True, no float conversion
        whole_range = not whole and self.min is not None and self.max is not None  # an interval reads best whole
        if value <= low if self.above else value < low:
            words = self.describe() if whole_range else f"{'>' if self.above else '>='} {_show(low)}"
        elif value >= high if self.below else value > high:
            words = self.describe() if whole_range else f"{'<' if self.below else '<='} {_show(high)}"
        else:
            return value
        raise ConfigError(f"{name} must be {words}, got {_show(value)}", hint=self.hint or _unset(self))


def _space(words: str) -> str:
    return f" {words}" if words else ""


def _unset(spec: Number) -> str | None:
    return "leave it out for the default" if spec.optional else None


def _show(value) -> str:
    """A value for a message: as typed, a 400-digit int shortened, bounds without a trailing .0."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(value) >= 10**40:
        if abs(value).bit_length() > 14000:  # str() refuses more than 4300 digits
            return f"a number of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
        return f"{str(value)[:12]}... (a number of {len(str(abs(value)))} digits)"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_numbers(config, specs: Mapping[str, Number], names: Mapping[str, str] | None = None) -> None:
    """Check each field of ``config`` named in ``specs``; the error names it as ``names`` says
    (a CLI flag such as ``--top-p``), else by the field's own name (a config file's key)."""
    names = names or {}
    for field, spec in specs.items():
        spec.check(getattr(config, field), names.get(field, field))
