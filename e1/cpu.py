"""How many CPU threads e1's torch work uses: all of torch's team on a machine e1 has to itself, fewer as other
processes take cores (docs/architecture.md, "CPU threads").

    cpu_threads()   # e1's entry point, first: pacing on (unless the caller set OMP_NUM_THREADS)
    pace()          # each decode step and micro-batch: cheap; every WINDOW seconds it reads the load

torch runs its CPU kernels on an OpenMP team, one thread per core, whose idle threads spin before they sleep
(libgomp: 300,000 rounds). Alone, the spin buys a quick start of the next kernel. Beside another busy process the
spinners hold the cores it needs and that e1's own working thread waits for: ``e1 demo --fast``'s SFT fell from
4 to 0.42 steps/s beside one torch job on 2 cores. Making every idle thread sleep at once
(``OMP_WAIT_POLICY=PASSIVE``) cost up to 43% alone. So e1 keeps torch's waiting and sizes the team instead:
:func:`pace` measures, over the last window, the CPU time that other processes took on the cores this process
may run on (``/proc/stat`` less this process's own), and gives torch the cores they leave free
(:func:`threads_for`): a team of one spins on nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Container, Mapping

WINDOW = 0.5  # seconds between two readings of the load
PROC_STAT = "/proc/stat"
_pacer: Pacer | None = None


def threads_for(cores: int, others: float, most: int) -> int:
    """The team for ``cores`` cores of which other processes keep ``others`` busy (in cores, over the last
    window): the cores they leave free, rounded, at least 1 and at most ``most`` (torch's own count)."""
    free = int(cores - others + 0.5) if others == others else 1  # NaN: nothing known, one thread is safe
    return max(1, min(most, free))


def busy_seconds(stat: str, cpus: Container[int]) -> float:
    """CPU seconds spent working (all but idle and iowait) on ``cpus``, summed, from ``/proc/stat``'s text."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for line in stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(field) for field in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks) - ticks[3] - ticks[4]
    return total / tick


class Pacer:
    """Sizes torch's team every :data:`WINDOW` seconds from the load that other processes put on ``cpus``;
    ``most`` (torch's own count) is read on the first call, once a command has loaded torch."""

    def __init__(self, cpus: frozenset[int], most: int | None = None, read=None, clock=time.monotonic):
        self.cpus, self.most, self.threads, self.clock = cpus, most, most, clock
        self.read = read or (lambda: (busy_seconds(_read(PROC_STAT), cpus), _own_seconds()))
        self.at = clock()
        self.busy, self.own = self.read()

    def __call__(self) -> int | None:
        """The team to use now if it changed (None: keep it)."""
        if self.most is None:
            import torch

            self.most = self.threads = torch.get_num_threads()
        now = self.clock()
        if now - self.at < WINDOW:
            return None
        busy, own = self.read()
        others = max(0.0, (busy - self.busy) - (own - self.own)) / (now - self.at)
        self.at, self.busy, self.own = now, busy, own
        threads = threads_for(len(self.cpus), others, self.most)
        if threads == self.threads:
            return None
        self.threads = threads
        return threads


def cpu_threads(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn pacing on for this process (the ``e1`` command calls it first); off where the caller decided the
    count (``OMP_NUM_THREADS``, even empty) or where ``/proc/stat`` cannot be read (not Linux). Returns whether
    it is on."""
    global _pacer
    _pacer = None
    if "OMP_NUM_THREADS" in environ:
        return False
    try:
        _pacer = Pacer(frozenset(os.sched_getaffinity(0)))
    except (OSError, AttributeError, ValueError):
        return False
    return True


def pace() -> None:
    """Give torch the team the load allows (a no-op unless :func:`cpu_threads` turned pacing on)."""
    if _pacer is not None and (threads := _pacer()) is not None:
        import torch

        torch.set_num_threads(threads)


def _read(path: str) -> str:
    with open(path) as file:
        return file.read()


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system
