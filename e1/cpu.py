"""How many CPU threads e1's torch work uses: all of torch's team on a machine e1 has to itself, fewer as other
processes take cores (docs/architecture.md, "CPU threads").

    cpu_threads()   # e1's entry point, first: pacing on (unless the caller set OMP_NUM_THREADS)
    pace()          # each decode step and micro-batch: cheap; every WINDOW seconds it reads the load

torch runs its CPU kernels on an OpenMP team, one thread per core, whose idle threads spin before they sleep
(libgomp: 300,000 rounds). Alone, the spin buys a quick start of the next kernel. Beside another busy process the
spinners hold the cores it needs and that e1's own working thread waits for: ``e1 demo --fast``'s SFT fell from
4 to 0.42 steps/s beside one torch job on 2 cores. Making every idle thread sleep at once
(``OMP_WAIT_POLICY=PASSIVE``) cost grpo 0.36-0.60x and decoding 0.55-0.85x alone. So e1 chooses, once, as torch
is first looked up (:func:`choose_waiting`: the OpenMP runtime reads its environment when it loads): beside other work
(at least :data:`QUIET` cores busy elsewhere since the entry point) idle threads sleep at once, and torch's team
takes its fair share; on a quiet machine threads wait as torch's do, and :func:`pace` sizes the team as load
comes and goes: every window it measures the CPU time that other processes took on the cores this process may
run on (``/proc/stat`` less this process's own), and gives torch the cores they leave free (:func:`threads_for`):
a team of one spins on nothing.

Pacing is a default that never stands in anyone's way:

- ``/proc/stat`` is outside input (a kernel's, or an emulation's: FreeBSD's linprocfs writes four counters per
  cpu line, sys/compat/linprocfs/linprocfs.c ``linprocfs_dostat``). :meth:`Pacer.reading` is its one gate; a
  reading it cannot use turns pacing off and gives torch its own count back, so pacing never stops a run.
- torch's count is per thread: ``torch.set_num_threads`` calls libgomp's ``omp_set_num_threads``, which writes
  the calling thread's ICV (GCC libgomp/env.c, ``gomp_icv (true)``); another thread keeps its count. So a pacer
  paces the one thread that first calls it.
- A count that is not the one the pacer set last, or a ``torch.set_num_threads`` that is not the one it found,
  was someone else's decision (user code, an ``--include`` module, a library: accelerate sets the count for its
  CPU ranks, vLLM's CPU worker replaces the function with one that warns and does nothing, vllm 0.32
  vllm/v1/worker/cpu_worker.py ``init_device``): pacing stops there for good.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping

WINDOW = 0.5  # seconds between two readings of the load
LOOK = 0.1  # seconds of load, at least, seen before torch loads
QUIET = 0.5  # cores busy elsewhere below which a machine counts as e1's own
# a caller who sets any of these has said how threads wait: e1 leaves waiting to them
WAITING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")
PROC_STAT = "/proc/stat"
STAT_BYTES = 4 << 20  # read at most: 4,096 cores' lines and their interrupt counts take well under 1 MiB
UNUSABLE = (OSError, ValueError, ArithmeticError)  # what reading a foreign or damaged /proc/stat may raise
_pacer: Pacer | None = None


def threads_for(cores: int, others: float, most: int) -> int:
    """The team for ``cores`` cores of which other processes keep ``others`` busy (in cores, over the last
    window): torch's own count ``most`` on a quiet machine (under half a core), else the cores they leave free,
    rounded, at least 1 and at most ``most``."""
    if others != others:  # NaN: nothing known, one thread is safe
        return 1
    if others < QUIET:
        return most
    free = cores - others + 0.5
    return 1 if free < 2 else min(most, int(free))


def busy_seconds(stat: str, cpus: Collection[int]) -> float:
    """CPU seconds spent working (all but idle and iowait) on ``cpus``, summed, from ``/proc/stat``'s text.
    ValueError where a cpu of ``cpus`` has no line, or a line with fewer than four counters (user nice system
    idle) or one that is not a count."""
    tick, total, seen = os.sysconf("SC_CLK_TCK"), 0, set()
    for line in stat.splitlines():
        if not line.startswith("cpu"):  # the long lines (intr: one count per interrupt) are not split
            continue
        name, *fields = line.split()
        if name[3:].isdecimal() and int(name[3:]) in cpus:
            ticks = [int(field) for field in fields[:8]]  # user nice system idle iowait irq softirq steal
            if len(ticks) < 4 or min(ticks) < 0:
                raise ValueError(f"{name}: {len(ticks)} counters, or a negative one")
            total += sum(ticks) - ticks[3] - sum(ticks[4:5])
            seen.add(int(name[3:]))
    if len(seen) < len(cpus):
        raise ValueError(f"no line for cpus {sorted(set(cpus) - seen)}")
    return total / tick


class Pacer:
    """Sizes one thread's torch team every :data:`WINDOW` seconds from the load that other processes put on
    ``cpus``. ``read`` gives (busy seconds on ``cpus``, this process's seconds): /proc/stat's and os.times' unless
    a test passes its own."""

    def __init__(
        self, cpus: frozenset[int], read: Callable[[], tuple[float, float]] | None = None, clock=time.monotonic
    ):
        self.cpus, self.clock = cpus, clock
        self.read = read or (lambda: (busy_seconds(_read(PROC_STAT), cpus), _own_seconds()))
        self.thread = self.most = self.threads = self.setter = None
        self.at, self.last = clock(), self.reading()
        self.on = self.last is not None

    def due(self) -> bool:
        """Whether a call from this thread now should look at torch and the load (cheap: most calls are not)."""
        return self.on and (
            self.thread is None or (self.clock() - self.at >= WINDOW and self.thread == threading.get_ident())
        )

    def reading(self) -> tuple[float, float] | None:
        """The gate of /proc/stat: its reading, or None where it cannot be read or used."""
        try:
            return self.read()
        except UNUSABLE:
            return None

    def __call__(self, count: Callable[[], int], setter: object = None) -> int | None:
        """The team this thread should use now, if it should change (None: keep it). ``count`` gives torch's
        count in this thread; ``setter`` is the function that would set it (a new one: someone took over)."""
        if not self.on:
            return None
        if self.thread is None:
            self.thread, self.most, self.setter = threading.get_ident(), count(), setter
            self.threads = self.most
        elif self.thread != threading.get_ident():
            return None
        now = self.clock()
        if now - self.at < WINDOW:
            return None
        if count() != self.threads or setter is not self.setter:  # someone else's decision: theirs from now on
            self.on = False
            return None
        return self._decide(now)

    def others(self, now: float) -> float | None:
        """The cores other processes kept busy since the last reading (None: unusable, and pacing is off)."""
        reading = self.reading()
        if reading is None:
            self.on = False
            return None
        (busy, own), (busy_before, own_before) = reading, self.last
        self.at, self.last, since = now, reading, max(now - self.at, 1e-9)
        return max(0.0, (busy - busy_before) - (own - own_before)) / since

    def _decide(self, now: float) -> int | None:
        others = self.others(now)
        if others is None:  # unusable: off, with torch's own count back
            return None if self.threads == self.most else self.most
        threads = threads_for(len(self.cpus), others, self.most)
        if threads == self.threads:
            return None
        self.threads = threads
        return threads


def cpu_threads(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn pacing on for this process (the ``e1`` command calls it first), and have :func:`choose_waiting` run
    as torch is first imported; both off where the caller decided the count (``OMP_NUM_THREADS``, even empty) or
    where ``/proc/stat`` cannot be read or used (not Linux); no choice of waiting where the caller said how
    threads wait (:data:`WAITING`) or torch is loaded already. Returns whether pacing is on."""
    global _pacer
    cpu_done()  # a second call (tests call main() many times in one process) replaces the first's finder
    if said_thread_count(environ):
        return False
    try:
        pacer = Pacer(frozenset(os.sched_getaffinity(0)))
    except (OSError, AttributeError):  # no affinity to read (not Linux)
        return False
    _pacer = pacer if pacer.on else None
    if _pacer is not None and "torch" not in sys.modules and not said_how_threads_wait(environ):
        sys.meta_path.insert(0, _BeforeTorch(environ))
    return _pacer is not None


def said_thread_count(environ: Mapping[str, str]) -> bool:
    """Whether the caller decided torch's team (``OMP_NUM_THREADS``, even empty): then e1 never paces it."""
    return "OMP_NUM_THREADS" in environ


def said_how_threads_wait(environ: Mapping[str, str]) -> bool:
    """Whether the caller said how idle threads wait (:data:`WAITING`): then e1 leaves waiting to them."""
    return any(name in environ for name in WAITING)


def cpu_done() -> None:
    """Pacing off, torch's own team back where pacing changed it (and nobody since), and the finder gone: ``e1``'s
    entry point calls it as its command ends, so a process that goes on (a test, a library user) runs torch as
    torch's own and is never paced."""
    global _pacer
    pacer, _pacer = _pacer, None
    if pacer is not None and pacer.thread == threading.get_ident() and pacer.threads != pacer.most:
        torch = sys.modules.get("torch")
        if torch is not None and torch.get_num_threads() == pacer.threads:  # still the count pacing gave it
            torch.set_num_threads(pacer.most)
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _BeforeTorch)]


class _BeforeTorch:
    """An import finder that finds nothing: it looks at the load once, as torch is first looked up (torch's OpenMP
    runtime reads ``OMP_WAIT_POLICY`` when it loads, never again), and chooses how idle threads wait. It stays in
    ``sys.meta_path``, spent, until :func:`cpu_done`: Python before 3.14 walks that very list (importlib
    ``_find_spec``; 3.14 walks a copy, gh-130094), so removing itself mid-lookup would skip the finder after it."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ, self.spent = environ, False

    def find_spec(self, name: str, path=None, target=None) -> None:
        global _pacer
        if name == "torch" and not self.spent:
            self.spent = True  # under the import lock: one lookup, of all threads', chooses
            try:
                choose_waiting(self.environ)
            except Exception:  # noqa: BLE001 - choosing is a default: it never breaks an import (and stops pacing)
                _pacer = None


def choose_waiting(environ, sleep=time.sleep) -> bool:
    """Beside other work (at least :data:`QUIET` cores busy elsewhere since the entry point, over :data:`LOOK`
    seconds at least) idle threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``: torch's whole team then takes its
    fair share without spinning) and pacing is off; else threads wait as torch's do, and pacing stays on.
    Returns whether it chose PASSIVE. What the caller set after the entry point (an ``--include`` module, a
    library) still wins: their waiting is kept, and their count turns pacing off."""
    global _pacer
    if said_thread_count(environ):
        _pacer = None
    pacer = _pacer
    if pacer is None or said_how_threads_wait(environ):
        return False
    seen = pacer.clock() - pacer.at
    if seen < LOOK:
        sleep(LOOK - seen)
    others = pacer.others(pacer.clock())
    if others is None or others < QUIET:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    _pacer = None
    return True


def pace() -> None:
    """Give this thread's torch the team the load allows (a no-op unless :func:`cpu_threads` turned pacing on)."""
    if _pacer is not None and _pacer.due():
        import torch

        if (threads := _pacer(torch.get_num_threads, torch.set_num_threads)) is not None:
            torch.set_num_threads(threads)


def _read(path: str) -> str:
    with open(path) as file:
        return file.read(STAT_BYTES)


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system
