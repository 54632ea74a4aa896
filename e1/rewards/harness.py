"""The two programs that judge ``call`` and ``code`` tests, and the plain-data codec they share.

This file is run *as source* inside the sandbox (standard library only), with one line
appended: ``serve(SOLUTION, PRELUDE)`` or ``check(TEST_CODE, ENTRY_POINT)``.

- ``serve`` runs the model's code as module ``solution``, then answers requests
  ``[name, args]`` read from fd ``$E1_FDS[0]`` with ``{"ok": value}`` or ``{"error": "Type: msg"}``
  on fd ``$E1_FDS[1]``. Values are encoded as plain data (numbers, strings, None, lists,
  tuples, dicts, sets); anything else is an error, so an object "equal to everything" fails.
- ``check`` runs the trusted test code in *another* sandboxed run, with every name the test
  uses but does not define (``candidate``, helpers such as ``poly``) a proxy calling ``serve``.
  Its exit status is the verdict; the model's code never runs in that process, so nothing it
  does can forge a pass. ``EXIT_SOLUTION_GONE`` means ``serve`` stopped answering.

The parent decodes replies with :func:`decode` too, so what it sees is plain data.
"""

import builtins
import json
import os
import sys

EXIT_SOLUTION_GONE = 3


def encode(value, depth=0):
    """Plain data -> JSON-able tagged form; raises TypeError on anything else."""
    if depth > 100:
        raise TypeError("value nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"i": str(int.__index__(value))}  # big ints exactly
    if isinstance(value, float):
        return {"f": repr(float.__float__(value))}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        tag = "s" if isinstance(value, (set, frozenset)) else "t" if isinstance(value, tuple) else "l"
        return {tag: [encode(item, depth + 1) for item in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]}
    if hasattr(value, "tolist") and type(value).__module__.startswith("numpy"):
        return encode(value.tolist(), depth + 1)
    raise TypeError(f"returned a {type(value).__name__}, not plain data")


def decode(value):
    """The inverse of :func:`encode`; builds nothing but plain data."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (tag, body), = value.items()
        if tag == "i":
            return int(body)
        if tag == "f":
            return float(body)
        if tag in ("l", "t", "s"):
            items = [decode(item) for item in body]
            return {"l": list, "t": tuple, "s": _set}[tag](items)
        if tag == "d":
            return {_key(decode(k)): decode(v) for k, v in body}
    raise TypeError(f"not plain data: {value!r:.60}")


def _set(items):
    return {_key(item) for item in items}


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
        try:
            owner, _, method = name.rpartition(".")
            if (owner or method) not in namespace:
                raise NameError(f"name {owner or method!r} is not defined")
            target = getattr(namespace[owner](), method) if owner else namespace[method]
            reply = {"ok": encode(target(*decode(args)))}
        except Exception as err:  # noqa: BLE001 - the checker re-raises it
            reply = {"error": [type(err).__name__, str(err)]}
        sys.stdout.flush()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class SolutionGone(Exception):
    pass


def proxy(name, requests, replies):
    def call(*args):
        try:
            requests.write(json.dumps([name, encode(list(args))]) + "\n")
            requests.flush()
        except BrokenPipeError:
            raise SolutionGone(name) from None
        line = replies.readline()
        if not line:
            raise SolutionGone(name)
        reply = json.loads(line)
        if "ok" in reply:
            return decode(reply["ok"])
        kind, message = reply["error"]
        error = getattr(builtins, kind, None)
        is_exception = isinstance(error, type) and issubclass(error, Exception)
        raise (error if is_exception else RuntimeError)(message if is_exception else f"{kind}: {message}")

    call.__name__ = name
    return call


def check(test_code, entry_point):
    replies, requests = _channel()  # the checker reads replies and writes requests
    code = compile(test_code, "test.py", "exec")
    namespace = {"__name__": "test"}
    for name in _names(code) - set(dir(builtins)):
        namespace[name] = proxy(name, requests, replies)
    try:
        exec(code, namespace)
        if entry_point:
            namespace["check"](proxy(entry_point, requests, replies))
    except SolutionGone:
        os._exit(EXIT_SOLUTION_GONE)


def _names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names
