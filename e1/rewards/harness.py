"""The two programs that judge ``call`` and ``code`` tests, and the plain-data codec they share.

This file is run *as source* inside the sandbox (standard library only), with one line
appended: ``serve(SOLUTION, PRELUDE)`` or ``check(TEST_CODE, ENTRY_POINT, MAX_REPLY_BYTES)``.

- ``serve`` runs the model's code as module ``solution``, then answers requests
  ``[name, args]`` read from fd ``$E1_FDS[0]`` with one line each on fd ``$E1_FDS[1]``:
  ``{"ok": value}`` or ``{"error": [kind, message]}``. Values cross as plain data (numbers,
  strings, None, lists, tuples, dicts, sets; see :func:`encode`); anything else is an error,
  so an object "equal to everything" fails.
- ``check`` runs the trusted test code in *another* sandboxed run, with every name the test
  uses but does not define (``candidate``, helpers such as ``poly``) a proxy calling ``serve``.
  Its exit status is the verdict; the model's code never runs in that process. Only plain data
  comes back through a proxy: an exception the solution raised, a reply that cannot be read or
  is too long, or a solution that stopped answering ends the check on the spot
  (``EXIT_SOLUTION_FAILED``, ``EXIT_SOLUTION_GONE``), so no test code (a ``map`` that a
  ``StopIteration`` would end, an ``except``) can turn it into a pass.
- EvalPlus's test helper ``assertion(out, exp, atol)`` (HumanEval+) gets the rule of
  EvalPlus's own evaluator: an answer not equal to the expected one (a float within tolerance)
  must be of the expected type and, for a list or tuple, length. The helper alone lets numpy
  broadcast, so ``[]`` would pass for any float.

Every reply, in the checker and in the parent alike, is read by :func:`read_reply`: one line
of at most ``MAX_REPLY_BYTES`` (or the run's output limit, if larger), nesting at most
``MAX_DEPTH``, integers of at most ``MAX_INT_DIGITS`` digits; anything else is :class:`BadReply`.
"""

import builtins
import json
import os
import sys

EXIT_SOLUTION_GONE = 3  # the solution stopped answering: the parent reports how its run ended
EXIT_SOLUTION_FAILED = 4  # the last line on stderr says why (raised, unreadable or too long a reply)
MAX_REPLY_BYTES = 4 << 20  # one reply line: about 400,000 ten-digit integers
MAX_DEPTH = 100  # nesting of a value, both ways
MAX_INT_DIGITS = 4300  # Python's own default limit for int <-> str
MAX_MESSAGE_CHARS = 1000  # of an exception's message in an error reply


class BadReply(Exception):
    """A reply that is not one line of plain data within the bounds; ``str()`` is the failure."""


class SetItems:
    """A set as :func:`read_reply` reads it with ``hashless``: its items, in reply order, never hashed."""

    __slots__ = ("items",)
    __hash__ = None

    def __init__(self, items):
        self.items = items

    def __eq__(self, other):
        return type(other) is type(self) and self.items == other.items

    def __repr__(self):
        return f"{type(self).__name__}({self.items!r})"


class DictItems(SetItems):
    """A dict as :func:`read_reply` reads it with ``hashless``: its ``(key, value)`` pairs, keys
    of their own types, in reply order, never hashed."""

    __slots__ = ()


def encode(value, depth=0):
    """Plain data -> its JSON form (tuples, sets, dicts tagged); raises TypeError on anything else.

    None, booleans, integers, floats (``Infinity``, ``NaN`` as Python writes them), strings and
    lists are themselves; ``{"t": [...]}`` is a tuple, ``{"s": [...]}`` a set,
    ``{"d": [[key, value], ...]}`` a dict. Subclasses are reduced to their plain base value.
    """
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [encode(item, depth + 1) for item in value]
    if isinstance(value, (tuple, set, frozenset)):
        return {"t" if isinstance(value, tuple) else "s": [encode(item, depth + 1) for item in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]}
    if hasattr(value, "tolist") and type(value).__module__.startswith("numpy"):
        return encode(value.tolist(), depth + 1)
    raise TypeError(f"returned a {type(value).__name__}, not plain data")


def read_reply(line, max_bytes, hashless=False):
    """One reply line (str or bytes) -> ``(True, value)`` or ``(False, "Kind: message")``.

    ``hashless``: every type kept, but sets as :class:`SetItems` and dicts as :class:`DictItems`,
    built without hashing anything the solution chose (a set of integers that all hash alike
    would take quadratic time); else the Python value. Raises :class:`BadReply` for anything
    that is not a reply within the bounds.
    """
    if len(line) > max_bytes:
        raise BadReply(f"reply longer than {max_bytes} bytes")
    try:
        reply = json.loads(line, parse_int=_bounded_int)
    except RecursionError:
        raise BadReply("unreadable reply: nested too deeply") from None
    except ValueError as err:  # not JSON, not UTF-8, an integer too long
        raise BadReply(f"unreadable reply: {str(err)[:80]}") from None
    if not isinstance(reply, dict) or len(reply) != 1:
        raise BadReply(f"unreadable reply: not a reply ({type(reply).__name__})")
    ((kind, body),) = reply.items()
    if kind == "ok":
        return True, decode(body, hashless=hashless)
    if kind == "error" and isinstance(body, list) and len(body) == 2 and all(isinstance(p, str) for p in body):
        return False, f"{body[0]}: {body[1]}" if body[1] else body[0]
    raise BadReply("unreadable reply: neither a value nor an error")


def decode(value, depth=0, hashless=False):
    """The inverse of :func:`encode` (see :func:`read_reply` for ``hashless``); builds nothing but
    plain data; :class:`BadReply` if ``value`` is not plain data or nests deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise BadReply(f"unreadable reply: nested more than {MAX_DEPTH} deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(item, depth + 1, hashless) for item in value]
    if isinstance(value, dict) and len(value) == 1:
        ((tag, body),) = value.items()
        if tag in ("t", "s") and isinstance(body, list):
            items = [decode(item, depth + 1, hashless) for item in body]
            if tag == "t":
                return tuple(items)
            return SetItems(items) if hashless else _hashed(set, map(_key, items))
        if tag == "d" and isinstance(body, list):
            pairs = [_pair(pair, depth, hashless) for pair in body]
            return DictItems(pairs) if hashless else _hashed(dict, pairs)
    raise BadReply(f"unreadable reply: not plain data ({type(value).__name__})")


def _hashed(kind, items):
    try:
        return kind(items)
    except TypeError:  # a list as a set item or dict key
        raise BadReply("unreadable reply: an unhashable set item or dict key") from None


def _pair(pair, depth, hashless):
    if not (isinstance(pair, list) and len(pair) == 2):
        raise BadReply("unreadable reply: a dict item that is not a pair")
    key, value = (decode(part, depth + 1, hashless) for part in pair)
    return (key if hashless else _key(key)), value


def _bounded_int(text):
    if len(text) > MAX_INT_DIGITS + 1:  # a sign and MAX_INT_DIGITS digits; int() is quadratic beyond
        raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _key(value):
    return frozenset(value) if isinstance(value, set) else value


def _channel():
    read_fd, write_fd = map(int, os.environ["E1_FDS"].split())
    return os.fdopen(read_fd, "r", encoding="utf-8"), os.fdopen(write_fd, "w", encoding="utf-8")


def serve(solution, prelude):
    requests, replies = _channel()
    namespace = {"__name__": "solution"}
    exec(prelude, namespace)
    exec(compile(solution, "solution.py", "exec"), namespace)
    for line in requests:
        name, args = json.loads(line)
        reply = _answer(namespace, name, decode(args))
        sys.stdout.flush()
        replies.write(reply + "\n")
        replies.flush()


def _answer(namespace, name, args):
    """The reply line to one call of ``name(*args)``."""
    try:
        owner, _, method = name.rpartition(".")
        if (owner or method) not in namespace:
            raise NameError(f"name {owner or method!r} is not defined")
        target = getattr(namespace[owner](), method) if owner else namespace[method]
        return json.dumps({"ok": encode(target(*args))})
    except Exception as err:  # noqa: BLE001 - the checker reports it
        try:
            message = str(err)[:MAX_MESSAGE_CHARS]
        except Exception:  # noqa: BLE001 - an exception whose str() raises
            message = ""
        return json.dumps({"error": [type(err).__name__, message]})


class _Gone(Exception):
    pass


def proxy(name, requests, replies, max_reply_bytes):
    """A function calling ``name`` in the solution server. It returns plain data or ends the
    check (os._exit): nothing else the solution does can reach the test code."""

    def call(*args):
        try:
            try:
                requests.write(json.dumps([name, encode(list(args))]) + "\n")
                requests.flush()
            except BrokenPipeError:
                raise _Gone from None
            line = replies.readline(max_reply_bytes + 1)
            if not line:
                raise _Gone
            ok, value = read_reply(line, max_reply_bytes)
        except _Gone:
            _end(EXIT_SOLUTION_GONE, f"{name}: the solution stopped answering")
        except BadReply as err:
            _end(EXIT_SOLUTION_FAILED, str(err))
        except BaseException as err:  # noqa: BLE001 - whatever it is, it must not reach the test code
            _end(EXIT_SOLUTION_FAILED, f"unreadable reply: {type(err).__name__}")
        if not ok:
            _end(EXIT_SOLUTION_FAILED, f"runtime error: {value}")
        return value

    call.__name__ = name
    return call


def _end(status, reason):
    """Exit the checker now with ``status``, ``reason`` as the last line on stderr."""
    line = " ".join(reason.split())[:500] + "\n"
    os.write(2, line.encode("utf-8", "backslashreplace"))
    os._exit(status)


def typed(assertion):
    """EvalPlus's evaluator's rule around its test helper ``assertion(out, exp, atol)``."""

    def checked(out, exp, *args, **kwargs):
        if not _equal(out, exp):
            if type(out) is not type(exp):
                raise AssertionError(f"returned a {type(out).__name__} where a {type(exp).__name__} is expected")
            if isinstance(exp, (list, tuple)) and len(out) != len(exp):
                raise AssertionError(f"returned {len(out)} items where {len(exp)} are expected")
        return assertion(out, exp, *args, **kwargs)

    return checked


def _equal(out, exp):
    try:
        return bool(out == exp)
    except Exception:  # noqa: BLE001 - e.g. numpy's ambiguous truth value: not equal
        return False


def _evalplus_rule(test_code, namespace):
    """``test_code`` with EvalPlus's top-level ``def assertion`` renamed, ``assertion`` bound in
    ``namespace`` to :func:`typed` around it: in place before the test code calls it (HumanEval+
    tests call ``check`` at their end), at no parsing cost."""
    if "def assertion(" not in test_code:
        return test_code
    import re  # here: the solution server never needs it

    test_code, renamed = re.subn(r"^def assertion\(", "def __e1_assertion__(", test_code, flags=re.MULTILINE)
    if renamed:
        namespace["assertion"] = typed(lambda *args, **kwargs: namespace["__e1_assertion__"](*args, **kwargs))
    return test_code


def check(test_code, entry_point, max_reply_bytes):
    replies, requests = _channel()  # the checker reads replies and writes requests
    namespace = {"__name__": "test"}
    code = compile(_evalplus_rule(test_code, namespace), "test.py", "exec")
    for name in _names(code) - set(dir(builtins)) - set(namespace):
        namespace[name] = proxy(name, requests, replies, max_reply_bytes)
    exec(code, namespace)
    if entry_point:
        namespace["check"](proxy(entry_point, requests, replies, max_reply_bytes))


def _names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names
