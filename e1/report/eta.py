"""Time left from work, not from finished samples.

Rich's time-remaining divides the samples left by the recent rate of finished samples. In a
batch that runs short: its short samples finish first, while its long ones (near the ``t + s``
budget) set the batch's time, so half-way through a batch the rate of finished samples is far
above the rate at which batches go by.

:class:`WorkEta` estimates from boundaries instead: the caller weighs its work by its worst case
and reports, as each piece of it ends, the work done and the work in all (:meth:`WorkEta.work`).
``e1 eval`` reports each generate call (one per cell of a batch: its rows decode together, so it
lasts as long as its longest row, which the cell's ``t + s`` bounds) weighing ``t + s``. Then

    seconds per unit of work  r = (time at the last boundary) / (work done at it)
    time left                   = r * (work left after the last boundary) - (time since that boundary)

so samples finishing inside the running call move the count, never the estimate, and the
estimate counts down with the clock between boundaries (never below 0). If calls take between
``a`` and ``b`` seconds per unit of worst-case work, it under-estimates the true time left by at
most ``(1 - a / b)`` of (time left + the running call's time). Before the first boundary it falls
back to the count of finished samples (time so far / samples done * samples left).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from e1.errors import redact


class WorkEta:
    """Seconds left in a task of ``total`` samples (see the module's docstring for the estimator)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic):
        self.total, self.clock = total, clock
        self.started = clock()
        self.done = 0.0  # samples finished (the count shown beside the bar)
        self._boundary: tuple[float, float, float] | None = None  # (seconds since start, work done, work in all)

    def advance(self, samples: float = 1) -> None:
        self.done += samples

    def work(self, done: float, total: float) -> None:
        """A boundary: ``done`` units of (worst-case) work of ``total`` are finished."""
        if total > 0 and done > 0:
            self._boundary = (self.clock() - self.started, min(done, total), total)

    def remaining(self) -> float | None:
        """Seconds left; None while nothing has finished."""
        elapsed = self.clock() - self.started
        if self._boundary is not None:
            at, done, total = self._boundary
            return max(at / done * (total - done) - (elapsed - at), 0.0)
        if self.done <= 0:
            return None
        return elapsed / self.done * max(self.total - self.done, 0)


def eta_column():
    """A rich column: the task's :class:`WorkEta` (its ``eta`` field) as H:MM:SS, or rich's own
    time remaining for a task without one (training steps)."""
    from rich.progress import TimeRemainingColumn
    from rich.text import Text

    class EtaColumn(TimeRemainingColumn):
        def render(self, task):
            eta = task.fields.get("eta")
            if eta is None:
                return super().render(task)
            seconds = eta.remaining()
            if seconds is None:
                return Text("-:--:--", style="progress.remaining")
            return Text(clock_text(seconds), style="progress.remaining")

    return EtaColumn()


class PlainTask:
    """One task's progress as plain lines: ``stage: done/total (pct), rate/s, eta H:MM:SS  status``."""

    def __init__(self, console, description: str, total: int, interval_s: float, eta: WorkEta):
        self.console, self.description, self.total, self.interval_s, self.eta = (
            console,
            description,
            total,
            interval_s,
            eta,
        )
        self.done, self.status, self.started = 0, "", time.monotonic()
        self.shown_at = self.started
        self._print(f"{description}: 0/{total}")

    def advance(self, amount: int) -> None:
        self.done += amount
        self.eta.advance(amount)
        if time.monotonic() - self.shown_at >= self.interval_s:
            self._print(self.line())

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        left = self.eta.remaining()
        eta = clock_text(left) if left is not None else "?"
        percent = 100 * self.done / self.total if self.total else 100.0
        text = f"{self.description}: {self.done:.0f}/{self.total} ({percent:.0f}%), {rate:.2f}/s, eta {eta}"
        return f"{text}  {self.status}" if self.status else text

    def close(self) -> None:
        """The closing line (always printed, so a log shows how each task ended)."""
        self._print(self.line() + f", took {clock_text(time.monotonic() - self.started)}")

    def _print(self, text: str) -> None:
        self.shown_at = time.monotonic()
        self.console.print(redact(text), markup=False, highlight=False, soft_wrap=True)


def clock_text(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
