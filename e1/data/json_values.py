"""The one gate of a JSON value read from a local data file: nested at most :data:`MAX_DEPTH` deep,
and every text (field names included) true text, with no lone surrogate (``"\\ud800"`` is valid JSON
but no character: parquet, the tokenizer and the terminal would each fail on it later, in their own words).

    record = load_json(line, "probs.jsonl: line 3")   # json.loads, a too-deep value as one DataError
    check_value(record, "probs.jsonl: line 3")        # DataError naming the field, else nothing

A value that passes is plain JSON a little deep, so nothing past the gate recurses far or meets a
string it cannot encode.
"""

from __future__ import annotations

import json
import re

from e1.errors import DataError

MAX_DEPTH = 64  # a code test list is 3 deep, chat messages 3: far more than any dataset needs
_SURROGATE = re.compile("[\ud800-\udfff]")


def load_json(text: str, where: str):
    """``json.loads(text)``; a value nested past Python's recursion limit is a DataError naming ``where``
    (a malformed text is still ``json.JSONDecodeError``, for the caller's own line)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise DataError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels", hint=_DEPTH_HINT) from None


def check_value(value, where: str) -> None:
    """Refuse a value nested deeper than :data:`MAX_DEPTH`, or holding a lone surrogate, naming the field."""
    stack = [(value, "", 0)]
    while stack:  # no recursion: the depth is what is being checked
        item, field, depth = stack.pop()
        if depth > MAX_DEPTH:
            top = re.split(r"[.\[]", field, maxsplit=1)[0]
            raise DataError(
                f"{where}: field {top or '(the row)'} is nested deeper than {MAX_DEPTH} levels", hint=_DEPTH_HINT
            )
        if isinstance(item, str):
            _check_text(item, where, field)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(str(key), where, f"{field}.{key!r}" if field else repr(key))
                stack.append((child, f"{field}.{key}" if field else str(key), depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{field}[{index}]", depth + 1) for index, child in enumerate(item))


def lone_surrogate(text: str) -> re.Match | None:
    """Where ``text`` holds a lone surrogate (half of a UTF-16 pair, no character), or None.

    >>> lone_surrogate("a" + chr(0xD800)).start(), lone_surrogate("a" + chr(0x1F600))
    (1, None)
    """
    return _SURROGATE.search(text)


def _check_text(text: str, where: str, field: str) -> None:
    found = lone_surrogate(text)
    if found:
        raise DataError(
            f"{where}: field {field or '(the row)'} holds a lone surrogate {found.group()!r} at "
            f"character {found.start()}, which is no text",
            hint="fix the file's text (a \\ud800-\\udfff escape must be half of a pair)",
        )


_DEPTH_HINT = "a problem's fields are text, numbers or shallow lists and objects"
