"""The one gate a request body to ``e1 serve`` crosses before any work is done on it.

A client of ``e1 serve`` must not stall or crash it: every byte it sends is bounded here, and
anything malformed becomes one line (:class:`Refused`, an HTTP 4xx naming the field), never
another exception. The middleware (:mod:`e1.serve.middleware`) reads at most ``MAX_BODY_BYTES``
(HTTP 413 past it), then calls :func:`admit` **in a worker thread** (``anyio.to_thread``): the
JSON parse, the exit text's tokenization and the stop pattern's compilation never run on the
event loop that answers every other client.

    request, plan = admit(body, served)   # what vLLM is handed, and how its reply is rewritten
    admit(b"[1, 2]", served)              # None: not a JSON object (vLLM answers it, as it would)

What it bounds, in order:

- the JSON: nesting at most ``MAX_DEPTH`` deep, no ``NaN``/``Infinity`` (not JSON; vLLM would take
  them as sampling values), no lone surrogate in any string (no UTF-8 carries it; a tokenizer
  raises on it) — each a 400 naming where (``messages[0].content``);
- e1's fields (top level or in ``vllm_xargs``): a budget or ``budget_room`` is a number or a text of
  at most ``MAX_NUMBER_CHARS`` characters; ``budget_mode`` is a text of at most ``MAX_MODE_TEXT``
  characters, whose options :meth:`~e1.engine.modes.Mode.parse` bounds (texts 2,048 characters,
  ``stop=`` 512 and RE2's linear-time syntax, :func:`~e1.engine.stop.compile_stop`);
- then :func:`~e1.serve.responses.prepare` (budgets against the context, defaults, early-exit's
  own refusals). vLLM bounds the rest itself (its request schema, ``max_tokens`` against the context).
"""

from __future__ import annotations

import json
import os

from e1.engine import MAX_MODE_TEXT
from e1.errors import E1Error
from e1.serve.budgets import FIELDS, MODE_FIELD, ROOM_FIELD, Served
from e1.serve.responses import Plan, prepare

# bytes of one request body: a prompt of 128k tokens is ~1 MB of JSON; images sent inline may need
# more (raise it with $E1_SERVE_MAX_BODY_BYTES). Parsing JSON holds Python's lock, thread or not:
# 4 MiB of token ids take ~0.1 s, the most one request may take from everyone else.
MAX_BODY_BYTES = int(os.environ.get("E1_SERVE_MAX_BODY_BYTES", 4 << 20))
MAX_DEPTH = 64  # JSON nesting (a chat message with tool calls nests ~6 deep)
MAX_NUMBER_CHARS = 32  # "1.5k", "2048": a budget written as text


class Refused(E1Error):
    """A request answered with HTTP ``status`` and one line, before any work was done on it."""

    def __init__(self, message: str, hint: str | None = None, status: int = 400):
        super().__init__(message, hint)
        self.status = status


def admit(body: bytes, served: Served) -> tuple[dict, Plan] | None:
    """``body`` as vLLM is handed it, and its plan; None when it is not a JSON object (vLLM's own
    400); a :class:`Refused` or another :class:`~e1.errors.E1Error` (HTTP 400) when malformed."""
    request = read_json(body)
    if request is None:
        return None
    check_fields(request)
    return prepare(request, served)


def read_json(body: bytes) -> dict | None:
    """The body's JSON object, checked (depth, constants, surrogates); None when it is not one."""
    try:
        request = json.loads(body, parse_constant=_not_json)
    except RecursionError:
        raise Refused(f"the request body nests deeper than {MAX_DEPTH} levels", hint="send flat JSON") from None
    except ValueError:  # not JSON, not UTF-8, a number of over 4,300 digits: vLLM answers it as it would
        return None
    if not isinstance(request, dict):
        return None
    _check_tree(request)
    return request


def check_fields(request: dict) -> None:
    """e1's fields, at the top level and in ``vllm_xargs``, within their size bounds (their values
    are parsed, and named in any error, by :func:`~e1.serve.budgets.request_budget`)."""
    xargs = request.get("vllm_xargs")
    for where, fields in (("", request), ("vllm_xargs.", xargs if isinstance(xargs, dict) else {})):
        for name in (*FIELDS, ROOM_FIELD):
            if name not in fields or fields[name] is None:
                continue
            value, most = fields[name], MAX_MODE_TEXT if name == MODE_FIELD else MAX_NUMBER_CHARS
            if name == MODE_FIELD and not isinstance(value, str):
                raise Refused(f"{where}{name} must be a text such as 'elastic:grace=32', not {type(value).__name__}")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise Refused(
                    f"{where}{name} must be a number of tokens such as 512 or '1.5k', not {type(value).__name__}"
                )
            if isinstance(value, str) and len(value) > most:
                raise Refused(f"{where}{name} holds {len(value)} characters, more than {most}", hint="a shorter value")


def _check_tree(value) -> None:
    """Every string in the JSON (keys too) is UTF-8 text, and no container is nested past ``MAX_DEPTH``."""
    stack = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise Refused(
                f"the request body nests deeper than {MAX_DEPTH} levels (at {_where(where)})", hint="send flat JSON"
            )
        if isinstance(item, str):
            _text(item, where)
        elif isinstance(item, dict):
            for key, child in item.items():
                _text(key, where)
                stack.append((child, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item))


def _text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"{_where(where)} holds a lone surrogate, which is not text", hint="send valid UTF-8") from None


def _where(where: str) -> str:
    """A field's path as written in an error: shortened, and itself free of surrogates."""
    where = where.encode("utf-8", "backslashreplace").decode("utf-8") or "the body"
    return where if len(where) <= 80 else where[:77] + "..."


def _not_json(constant: str):
    raise Refused(f"the request body holds {constant}, which JSON does not have", hint="send finite numbers")
