"""Progress on a terminal: the :class:`Progress` protocol library code reports through, a silent
:class:`NullProgress` and a rich bar (plain lines when stderr is no terminal), and a training step's status.

    progress = RichProgress()
    with progress.task("aime", total=120) as bar:
        bar.advance(8)
        bar.status(step_status(row))
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Protocol

from e1.errors import redact
from e1.report.eta import PlainTask, WorkEta, eta_column


class Progress(Protocol):
    def task(self, description: str, total: int) -> ProgressTask: ...

    def stage(self, description: str):
        """A context manager around a step without a count (loading a model)."""


class ProgressTask(Protocol):
    def advance(self, amount: int = 1) -> None: ...

    def work(self, done: float, total: float) -> None:
        """Optional: a piece of work ended, ``done`` of ``total`` units finished (time left)."""


class NullProgress:
    @contextmanager
    def task(self, description: str, total: int) -> Iterator[NullProgress]:
        yield self

    def stage(self, description: str):
        return nullcontext()

    def advance(self, amount: int = 1) -> None:
        pass

    def work(self, done: float, total: float) -> None:
        pass


class RichProgress:
    """A rich progress bar per task, on stderr, with samples done/total, time left and a status (:meth:`status`).
    Time left comes from work as calls end (:meth:`work`; :class:`e1.report.eta.WorkEta`), not sample rate.

    When stderr is not a terminal (a SLURM log, nohup, CI) it prints plain lines instead: the
    task's start, then ``done/total``, rate and time left every ``interval_s`` seconds, and its end.
    """

    def __init__(self, console=None, interval_s: float = 30.0):
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.interval_s = interval_s
        self._bar = self._task = self._plain = self._eta = None

    @contextmanager
    def task(self, description: str, total: int):
        if not self.console.is_terminal:
            self._plain = PlainTask(self.console, description, total, self.interval_s, WorkEta(total))
            try:
                yield self
            finally:
                self._plain = self._plain.close()
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            eta_column(),
            TextColumn("{task.fields[status]}"),
        ]
        with Progress(*columns, console=self.console, transient=False) as bar:
            self._eta = WorkEta(total)
            self._bar, self._task = bar, bar.add_task(redact(description), total=total, status="", eta=self._eta)
            try:
                yield self
            finally:
                self._bar = self._task = self._eta = None

    @contextmanager
    def stage(self, description: str):
        """A spinner on a terminal; elsewhere a line when it starts and one with its duration."""
        description = redact(description)
        if self.console.is_terminal:
            with self.console.status(description):
                yield
            return
        started = time.monotonic()
        self.console.print(f"{description} ...", markup=False, highlight=False)
        yield
        self.console.print(f"{description}: done in {time.monotonic() - started:.1f}s", markup=False, highlight=False)

    def advance(self, amount: int = 1) -> None:
        if self._plain is not None:
            self._plain.advance(amount)
        else:
            self._eta.advance(amount)
            self._bar.advance(self._task, amount)

    def work(self, done: float, total: float) -> None:
        """A call or batch ended with ``done`` of ``total`` units of worst-case work finished (sets time left)."""
        eta = self._plain.eta if self._plain is not None else self._eta
        if eta is not None:
            eta.work(done, total)

    def status(self, text: str) -> None:
        """Show ``text`` after the running task's bar (nothing happens between tasks)."""
        text = redact(text)  # statuses and lines pass the redactor: no key reaches the terminal
        if self._plain is not None:
            self._plain.status = text
        elif self._bar is not None:
            self._bar.update(self._task, status=text)


def step_status(row: dict) -> str:
    """One training step's metrics row as the progress bar's status: GRPO or SFT figures."""
    if "reward_mean" in row:
        return (
            f"reward {row['reward_mean']:.3f}  acc {row['accuracy']:.2f}  kl {row['kl']:.4f}  "
            f"think {row['mean_think_tokens']:.0f}  forced {row['forced_rate']:.0%}  {row['step_s']:.1f}s/step"
        )
    return f"loss {row['loss']:.3f}  lr {row['lr']:.2e}  {row['step_s']:.2f}s/step"
