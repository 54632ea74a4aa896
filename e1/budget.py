"""Token budgets for separate budgeting: ``t`` thinking tokens and ``s`` solution tokens.

>>> Budget.parse("1.5k", "1k")
Budget(think=1536, solve=1024)
>>> parse_tokens("2K")
2048
>>> Budget(think=0, solve=1).total
1
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from e1.errors import BudgetError, ConfigError
from e1.numeric import Number

MAX_TOKENS = 2**31 - 1  # no context comes near it; a larger count would overflow int32 token buffers
_TOKENS = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([kK]?)")  # matched whole
_HINT = "use a whole number of tokens such as 512, 1k (=1024), 1.5k (=1536) or 2K"


def parse_tokens(text: str | int, what: str = "budget") -> int:
    """Parse ``512``, ``1k`` (1024), ``1.5k`` (1536), ``2K`` into a token count (0..MAX_TOKENS).

    Exact arithmetic: a 400-digit budget is refused as too large, never overflows a float.
    """
    if isinstance(text, bool):
        raise BudgetError(f"invalid {what} {text!r}", hint=_HINT)
    if isinstance(text, int):
        if text < 0:
            raise BudgetError(f"invalid {what} {text}: must be >= 0", hint=_HINT)
        return _in_range(text, what)
    match = _TOKENS.fullmatch(str(text).strip())
    if not match:
        shown = repr(text) if len(repr(text)) <= 40 else repr(text)[:37] + "..."
        raise BudgetError(f"invalid {what} {shown}", hint=_HINT)
    number, suffix = match.groups()
    if len(number.partition(".")[0]) > 18:  # more tokens than any context; Fraction of 5000 digits would refuse
        return _in_range(MAX_TOKENS + 1, what, shown=f"a number of {len(number.partition('.')[0])} digits")
    value = Fraction(number) * (1024 if suffix else 1)
    if value.denominator != 1:
        raise BudgetError(f"invalid {what} {text!r}: not a whole number of tokens", hint=_HINT)
    return _in_range(int(value), what)


_TOKEN_COUNT = Number(int, min=0, max=MAX_TOKENS)


def _in_range(count: int, what: str, shown: str | None = None) -> int:
    try:
        return _TOKEN_COUNT.check(count, what)
    except ConfigError as err:
        message = err.message if shown is None else f"{err.message.rpartition(', got ')[0]}, got {shown}"
        raise BudgetError(message, hint=_HINT) from None


def format_tokens(count: int) -> str:
    """Inverse of :func:`parse_tokens` for display: 1024 -> '1k', 1536 -> '1.5k', 500 -> '500'."""
    if count and count % 512 == 0:
        k = count / 1024
        return f"{k:g}k"
    return str(count)


@dataclass(frozen=True)
class Budget:
    """``think`` tokens for the thinking phase (0 = no thinking), ``solve`` (>= 1) for the solution."""

    think: int
    solve: int

    def __post_init__(self):
        for name, value, least in (("think budget", self.think, 0), ("solve budget", self.solve, 1)):
            try:
                Number(int, min=least, max=MAX_TOKENS).check(value, name)
            except ConfigError as err:
                raise BudgetError(err.message, hint=_HINT) from None

    @classmethod
    def parse(cls, think: str | int, solve: str | int) -> Budget:
        return cls(parse_tokens(think, "think budget"), parse_tokens(solve, "solve budget"))

    @property
    def total(self) -> int:
        return self.think + self.solve

    def __str__(self) -> str:
        return f"{format_tokens(self.think)}+{format_tokens(self.solve)}"
