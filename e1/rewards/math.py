"""Math reward: 1.0 when the last ``\\boxed{}`` after the end of thinking equals the gold answer.

Only the solution counts: the text after the *last* end-of-thinking marker. A completion
without the marker (thinking never ended) or without a box there scores 0.0.

    >>> extract_boxed(r"so \\boxed{\\frac{1}{2}} and then \\boxed{x^{2}}")
    'x^{2}'
    >>> [s.reward for s in math_reward([r"<think>maybe \\boxed{3}</think> It is \\boxed{\\dfrac12}.",
    ...                                  r"<think>it is \\boxed{7}"], ["0.5", "7"])]  # the second never ended thinking
    [1.0, 0.0]

Equivalence is decided by math-verify (sympy underneath), which can hang on inputs such as
``9^{9^{9^{9}}}``, and whose own timeout uses ``signal.alarm`` (main thread only). So
math-verify never runs in the caller's process: a few persistent worker processes run it
with its signal timeouts off, and the caller waits on a pipe with a wall-clock deadline
that works from any thread. A worker that misses the deadline is killed (the answer
counts as not equivalent) and a fresh one starts on demand; should the caller die first,
a kernel CPU limit set per comparison ends the worker, so no orphan keeps computing.
Identical strings after a light normalisation, and pairs of plain integers, are decided
in-process without a worker (about 1 µs; a worker round trip costs about 0.1 ms plus
math-verify's own 1-10 ms).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from e1.errors import RewardError
from e1.rewards.registry import Scored, register_reward, solution_of

DEFAULT_TIMEOUT_S = 5.0  # wall-clock limit for one math-verify comparison
STARTUP_TIMEOUT_S = 60.0  # a worker imports sympy once; not counted in DEFAULT_TIMEOUT_S
MAX_WORKERS = min(4, os.cpu_count() or 1)  # comparisons that may run at the same time
WORKER_MEMORY_BYTES = 8 << 30  # a runaway comparison fails with MemoryError instead of swapping

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BARE_ARGUMENT = re.compile(r"[ \t]*([^\s$]+)")  # `\boxed 5`: the argument is one token
_INTEGER = re.compile(r"-?\d+")
_SPACING = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!,;: ]|\s+")


@register_reward("math")
def math_reward(
    completions: Sequence[str], answers: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S, **columns
) -> list[Scored]:
    """1.0 where the last boxed answer after the last ``</think>`` equals the answer, else 0.0;
    a comparison that takes longer than ``timeout_s`` counts as not equal."""
    return [
        _score_one(completion, str(answer), timeout_s) for completion, answer in zip(completions, answers, strict=True)
    ]


def _score_one(completion: str, answer: str, timeout_s: float) -> Scored:
    solution = solution_of(completion)
    boxed = extract_boxed(solution) if solution is not None else None
    if boxed is None:
        return Scored(0.0, None)
    return Scored(1.0 if is_equivalent(boxed, answer, timeout_s) else 0.0, boxed)


def extract_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed 5`` in ``text``."""
    for match in reversed(list(_BOX.finditer(text))):
        content = _box_content(text, match.end())
        if content is not None:
            return content
    return None


def _box_content(text: str, start: int) -> str | None:
    """The argument that begins at ``start`` (just after ``\\boxed``), or None if unclosed."""
    brace = start
    while brace < len(text) and text[brace] in " \t":
        brace += 1
    if brace == len(text) or text[brace] != "{":
        bare = _BARE_ARGUMENT.match(text, start)
        return bare.group(1) if bare else None
    depth = 0
    position = brace
    while position < len(text):
        char = text[position]
        if char == "\\":  # an escaped brace such as \{ does not open or close the box
            position += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : position].strip()
        position += 1
    return None


def is_equivalent(prediction: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether ``prediction`` and ``gold`` (LaTeX or plain) are the same mathematical answer.

    Never runs longer than about ``timeout_s`` seconds: a comparison that takes longer
    counts as not equivalent. Safe from any thread. Raises :class:`RewardError` only when
    math-verify itself cannot be started.
    """
    prediction, gold = _strip_dollars(str(prediction)), _strip_dollars(str(gold))
    if not prediction or not gold:
        return False
    if _normalise(prediction) == _normalise(gold):
        return True
    if _INTEGER.fullmatch(prediction) and _INTEGER.fullmatch(gold):
        return int(prediction) == int(gold)
    return _pool().check(prediction, gold, timeout_s)


def answer_key(text: str) -> str:
    """An answer as majority voting compares it: outer dollars, spacing and ``\\left``/``\\right``
    dropped, ``\\dfrac`` read as ``\\frac``, a trailing period dropped.

    >>> print(answer_key(r" $\\dfrac{1}{2}$ "), answer_key(r"\\left( 1, 2 \\right)."))
    \\frac{1}{2} (1,2)
    """
    return _normalise(_strip_dollars(str(text)))


def _strip_dollars(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


def _normalise(text: str) -> str:
    """Drop what never changes a value (spacing, ``\\left``/``\\right``); only for the fast path."""
    text = _SPACING.sub("", text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return text.rstrip(".")


# --- the worker process: runs math-verify, one comparison per JSON line on stdin ----------------


def _serve() -> None:
    """Worker main loop. Replies go to a private copy of stdout so stray prints cannot corrupt them."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        import logging

        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception as err:  # reported to the parent as one line
        reply({"error": f"cannot import math-verify: {type(err).__name__}: {err}"})
        return
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # silences "timeout disabled"
    extraction = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    limit_memory = _kernel_limit("RLIMIT_AS")
    limit_cpu = _kernel_limit("RLIMIT_CPU")
    limit_memory(WORKER_MEMORY_BYTES)

    def parsed(answer: str) -> list:
        # Both sides are bare answers; a box makes math-verify read the whole string as one.
        return parse("\\boxed{" + answer + "}", extraction, parsing_timeout=None)

    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        # A hung comparison sits in one C call (a huge integer power) that no Python-level
        # timer can interrupt. The parent kills us at its deadline; should the parent itself
        # die first, the kernel ends us with SIGXCPU once this CPU budget is spent.
        limit_cpu(_cpu_seconds_used() + request["timeout_s"] + 1)
        try:
            equal = bool(verify(parsed(request["gold"]), parsed(request["prediction"]), timeout_seconds=None))
        except Exception:
            equal = False
        reply({"equal": equal})


def _kernel_limit(name: str) -> Callable[[float], None]:
    """A setter for the soft limit ``resource.<name>`` (a no-op where the platform has none)."""
    try:
        import resource

        kind = getattr(resource, name)
        _, hard = resource.getrlimit(kind)
    except (ImportError, AttributeError, OSError):
        return lambda value: None

    def set_soft_limit(value: float) -> None:
        soft = int(value + 0.999)
        try:
            resource.setrlimit(kind, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        except (ValueError, OSError):
            pass  # best effort: the parent's deadline still bounds the wait

    return set_soft_limit


def _cpu_seconds_used() -> float:
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from e1.rewards.math import _serve; _serve()"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class _WorkerTimeout(Exception):
    pass


class _Worker:
    """One math-verify process and the parent's end of its pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buffer = b""
        self._selector = selectors.DefaultSelector()  # epoll/kqueue: no FD_SETSIZE limit
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            hello = self._read(STARTUP_TIMEOUT_S)
        except (_WorkerTimeout, EOFError):
            self.kill()
            raise RewardError(
                "the math-verify worker did not start", hint="check `python -c 'import math_verify'`"
            ) from None
        if "error" in hello:
            self.kill()
            raise RewardError(hello["error"], hint="pip install 'math-verify>=0.7'")

    def compare(self, prediction: str, gold: str, timeout_s: float) -> bool:
        request = json.dumps({"prediction": prediction, "gold": gold, "timeout_s": timeout_s}) + "\n"
        self.process.stdin.write(request.encode())
        self.process.stdin.flush()
        return bool(self._read(timeout_s)["equal"])

    def _read(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        stdout = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise _WorkerTimeout
            chunk = os.read(stdout, 1 << 16)
            if not chunk:
                raise EOFError("math-verify worker exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for resource in (self._selector, self.process.stdin, self.process.stdout):
            try:
                resource.close()
            except OSError:
                pass


class _Pool:
    """Up to ``size`` workers, started on demand; a worker serves one thread at a time."""

    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._alive: set[_Worker] = set()  # idle or busy: what close() must stop
        self._lock = threading.Lock()

    def check(self, prediction: str, gold: str, timeout_s: float) -> bool:
        with self._slots:
            for _attempt in range(2):
                worker = self._take()
                try:
                    equal = worker.compare(prediction, gold, timeout_s)
                except BrokenPipeError:  # it died while idle: retry once on a fresh worker
                    self._discard(worker)
                    continue
                except (_WorkerTimeout, EOFError, OSError, ValueError, KeyError):
                    self._discard(worker)  # hung or crashed on this input: not equivalent
                    return False
                with self._lock:
                    self._idle.append(worker)
                return equal
            return False

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        worker = _Worker()  # outside the lock: other threads keep using idle workers meanwhile
        with self._lock:
            self._alive.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._alive.discard(worker)
        worker.kill()

    def close(self) -> None:
        with self._lock:
            alive, self._alive, self._idle = self._alive, set(), []
        for worker in alive:
            worker.kill()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    """The process-wide pool; a forked child gets its own instead of sharing the parent's pipes."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = _Pool(MAX_WORKERS)
        return _POOL


@atexit.register
def _close_pool() -> None:
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()
