"""When an answer is right: the code judge's comparison rules, exact for integers.

    >>> compare_output("0.5\\n", "0.5000004\\n") is None      # a decimal: within 1e-6
    True
    >>> compare_output("999999937\\n", "999999000\\n")        # an integer: exact
    "expected '999999937', got '999999000'"
    >>> compare_output("3\\n", "3.0\\n") is None, compare_output("3\\n", "3.0000001\\n")   # exactly 3, or not
    (True, "expected '3', got '3.0000001'")
    >>> same_value(0.1 + 0.2, 0.3), same_value(1e18, 10**18 + 7), same_value(3.0, 3)
    (True, False, True)
    >>> same_value((1, 2), [1, 2]), same_value({2, 1}, [1, 2]), same_value({1: "a"}, {"1": "a"})
    (True, False, False)

Output (``stdio`` tests, :func:`compare_output`): ``\\r\\n`` is ``\\n``, trailing whitespace on
each line and trailing blank lines are ignored, and lines are compared token by token (split on
whitespace). Two tokens match when their texts are equal, or:

- the expected token is an integer (``[-+]?[0-9]+``): the answer must be a number of exactly
  the same value, no tolerance (exact at any size; ``+7`` and ``007`` match ``7``, ``-0``
  matches ``0``, and ``3.0`` or ``30e-1`` match ``3`` as LiveCodeBench's checker reads them
  (exact decimal equality), ``3.0000001`` does not);
- the expected token is a decimal (a number with a point or an exponent: ``2.5``, ``1e5``): the
  answer must be a number (``2.5000001``, ``100000``) within 1e-6 of it, relative or absolute,
  both finite as float64; a number beyond float64 (``1e999``) matches only its own text;
- anything else matches only itself.

Values (``call`` tests, :func:`same_value`), ``got`` against ``expected``, by type, as
LiveCodeBench and EvalPlus compare them (Python's ``==`` of the returned value, where a set is
never a list and ``{1: x}`` is never ``{"1": x}``); ``got`` keeps the types the solution
returned (:func:`e1.rewards.harness.read_reply` with ``hashless``):

- booleans equal only booleans;
- an expected integer equals an exactly equal number (Python's exact ``==`` of int and float:
  ``3.0`` equals ``3``, ``1e18`` does not equal ``10**18 + 7``);
- an expected float equals a number within 1e-6 (relative or absolute) when both are finite,
  else only an exactly equal one: ``inf`` equals ``inf``, NaN equals nothing, and neither an
  infinity nor an integer beyond float64 equals a finite float;
- an expected list equals a list or a tuple of the same length and equal items (JSON, in which
  tests are written, has no tuples; LiveCodeBench reads a returned tuple as a list too); an
  expected tuple only a tuple;
- an expected dict equals a dict with the same keys and equal values; an expected set or
  frozenset a set or frozenset with the same items. Keys and set items compare by type and
  value, exactly: ``1`` is not ``"1"``, ``1.0`` nor ``True``. So a returned set equals no
  value written in JSON (no sorting makes it a list), nor does a dict with a key that is not
  a string; a set inside a returned set or dict key equals nothing;
- anything else must be of the same type and ``==``.

Both take untrusted input: time linear in its size (no backtracking, no int <-> str
conversion), no recursion, and a verdict, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from itertools import zip_longest
from typing import Any

from e1.rewards.harness import DictItems, SetItems

FLOAT_TOLERANCE = 1e-6  # relative or absolute, for decimals only

# every part matches in one way only, so a failing match backtracks in linear time
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_INTEGER = re.compile(r"[-+]?[0-9]+")


def compare_output(expected: str, got: str) -> str | None:
    """None if ``got`` matches ``expected`` (see the module docstring), else the first difference.

    >>> compare_output("1 2.5\\n\\n", "1   2.5000001  \\n")
    >>> compare_output("3\\n4\\n", "3\\n5\\n")
    "expected '4', got '5' on line 2"
    """
    want, have = _lines(expected), _lines(got)
    where = len(want) > 1 or len(have) > 1
    for number, (line, answer) in enumerate(zip_longest(want, have), 1):
        suffix = f" on line {number}" if where else ""
        if line is None:
            return f"expected end of output, got {short(answer)!r}{suffix}"
        if answer is None:
            return f"expected {short(line)!r}, got end of output{suffix}"
        if not _same_line(line, answer):
            return f"expected {short(line)!r}, got {short(answer)!r}{suffix}"
    return None


def same_value(got: Any, expected: Any) -> bool:
    """Whether the plain data ``got`` (Python values, or as a reply is read: sets as ``SetItems``,
    dicts as ``DictItems``) equals ``expected`` (see the module docstring)."""
    pending = [(got, expected)]
    while pending:  # a stack, not recursion: any depth is fine
        got, expected = pending.pop()
        if type(expected) in (list, tuple):
            if type(got) not in ((list, tuple) if type(expected) is list else (tuple,)) or len(got) != len(expected):
                return False
            pending.extend(zip(got, expected))
        elif type(expected) is dict:
            values = _matched(_items(got, dict, DictItems), expected.items())
            if values is None:
                return False
            pending.extend(values)
        elif type(expected) in (set, frozenset):
            items = _items(got, (set, frozenset), SetItems)
            if items is None or _matched([(item, None) for item in items], [(item, None) for item in expected]) is None:
                return False
        elif not _same_scalar(got, expected):
            return False
    return True


def _items(got: Any, python: type | tuple[type, ...], read: type) -> list | None:
    """``got``'s items (a dict's pairs) if it is a ``python`` value or ``read`` from a reply."""
    if type(got) is read:
        return got.items
    if type(got) in (python if isinstance(python, tuple) else (python,)):
        return list(got.items()) if type(got) is dict else list(got)
    return None


def _matched(got: list | None, expected) -> list | None:
    """Pair each ``(key, value)`` of ``got`` with the one of ``expected`` whose key has the same
    type and value: the ``(got value, expected value)`` pairs, or None if the keys differ.
    Only the trusted ``expected`` keys are hashed into a table (looking a key up costs what
    ``expected``'s own keys make it cost, whatever the solution chose)."""
    if got is None:
        return None
    table = {_typed(key): value for key, value in expected}
    if len(got) != len(table) or None in table:
        return None
    seen, pairs = set(), []
    for key, value in got:
        typed = _typed(key)
        if typed is None or typed in seen or typed not in table:
            return None
        seen.add(typed)
        pairs.append((value, table[typed]))
    return pairs


def _typed(key: Any) -> tuple | None:
    """A stand-in for a dict key or set item, equal only to one of the same types and values
    (``1``, ``1.0``, ``True`` and ``"1"`` all differ); None for what cannot be one."""
    if type(key) in (type(None), bool, int, float, str):
        return type(key).__name__, key
    if type(key) is tuple:
        items = tuple(map(_typed, key))
        return None if any(item is None for item in items) else ("tuple", items)
    if type(key) is frozenset:
        items = frozenset(map(_typed, key))
        return None if None in items else ("frozenset", items)
    return None


def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def show(value: Any) -> str:
    """A value as JSON (a set read from a reply as ``{"set": [...]}``, a dict whose keys are not
    all strings as ``{"dict": [[key, value], ...]}``), shortened for a failure message."""
    try:
        return short(json.dumps(value, default=_shown))
    except (TypeError, ValueError, RecursionError):  # not JSON, too deep, an int past the digit limit
        return f"a {type(value).__name__}"


def _shown(value: Any) -> Any:
    if isinstance(value, DictItems):
        if all(type(key) is str for key, _ in value.items):
            return {key: item for key, item in value.items}
        return {"dict": [list(pair) for pair in value.items]}
    if isinstance(value, (SetItems, set, frozenset)):
        return {"set": list(value.items if isinstance(value, SetItems) else value)}
    raise TypeError(type(value).__name__)


def printable(text: str, width: int = 300) -> str:
    """``text`` shortened to ``width``, with what UTF-8 cannot carry (lone surrogates) escaped:
    safe to store in a results table and to print."""
    return short(text, width).encode("utf-8", "backslashreplace").decode("utf-8")


def _same_scalar(got: Any, expected: Any) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if type(got) in (int, float) and type(expected) is float:
        return _close_value(got, expected)
    if type(got) in (int, float) and type(expected) is int:
        return got == expected  # exact, whatever the sizes: Python compares int and float exactly
    return type(got) is type(expected) and got == expected


def _close_value(got: int | float, expected: float) -> bool:
    if not math.isfinite(expected):
        return got == expected
    try:
        got = float(got)
    except OverflowError:  # an int beyond float64
        return False
    return _close(got, expected)


def _close(got: float, expected: float) -> bool:
    return (
        math.isfinite(got)
        and math.isfinite(expected)
        and math.isclose(got, expected, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
    )


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _same_line(expected: str, got: str) -> bool:
    want, have = expected.split(), got.split()
    return len(want) == len(have) and all(map(_same_token, want, have))


def _same_token(expected: str, got: str) -> bool:
    if expected == got:
        return True
    if _INTEGER.fullmatch(expected):
        if _INTEGER.fullmatch(got):
            return _integer(expected) == _integer(got)
        return _NUMBER.fullmatch(got) is not None and _exactly(got, expected)
    if _NUMBER.fullmatch(expected) and _NUMBER.fullmatch(got):
        return _close(float(got), float(expected))  # float() of a numeral: linear, never raises
    return False


def _exactly(numeral: str, integer: str) -> bool:
    """Whether a decimal numeral is exactly the integer token's value (Decimal reads both exactly,
    in linear time). An exponent past Decimal's range (over 18 digits) makes a value that is 0, or
    has more digits than any output, or is no integer: only the first can equal an integer token."""
    try:
        return Decimal(numeral) == Decimal(integer)
    except InvalidOperation:
        mantissa = numeral.lstrip("+-").partition("e")[0].partition("E")[0]
        return mantissa.strip("0.") == "" and _integer(integer) == (False, "0")


def _integer(token: str) -> tuple[bool, str]:
    """An integer token's value as (negative, digits without leading zeros): no int() needed."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return token.startswith("-") and digits != "0", digits
