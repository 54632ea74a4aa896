"""Run untrusted programs (model-written code) confined, bounded and without leftovers.

    >>> result = run_sandboxed("print(int(input()) * 2)", stdin=b"21\\n")
    >>> result.stdout, result.returncode
    (b'42\\n', 0)
    >>> with Sandbox(workers=2, limits=Limits(wall_s=2)) as box:
    ...     [r.stdout for r in box.run_many([("print(1)", b""), ("print(2)", b"")])]
    [b'1\\n', b'2\\n']

A ``program`` is Python source (written to ``main.py`` in the run's private ``/tmp``, its
cwd and ``HOME``, and run with this interpreter as ``python -S -B main.py``;
``site_packages=True`` drops ``-S``) or an argv.

Backends (``backend=`` or the ``E1_SANDBOX`` environment variable; default ``auto``):

- ``unshare`` (root; what ``auto`` picks for root): every run is PID 1 of fresh mount, PID, IPC,
  UTS, cgroup and (empty) network namespaces of its own, under a throwaway uid with
  ``no_new_privs`` and the seccomp filter of :mod:`e1.sandbox.seccomp`. Its root is a tmpfs
  with read-only binds of /usr, /bin, /lib*, /etc and this interpreter only: no /home,
  /root, /run, /var, so no host files or pathname sockets; /tmp and /dev/shm are private
  tmpfs of ``Limits.scratch_bytes`` and ``scratch_inodes``. Memory and processes are
  bounded per run by a cgroup (v2, else v1) where the machine has one, and per process by
  rlimits always; where that cgroup has the cpu controller, the run gets ``Limits.cpus`` CPUs. Nothing of it outlives this process, even killed. See :mod:`e1.sandbox.server`.
- ``bwrap`` (bubblewrap, for users without root where user namespaces are allowed; what
  ``auto`` picks for them; it refuses root): the same namespaces, seccomp filter, minimal root
  and private scratch, but the caller's uid, no cgroup tree limits and no CPU share. See
  :mod:`e1.sandbox.local`.
- ``none``: the explicit opt-out. A private temporary directory, rlimits, a wall-clock limit
  and a process group killed afterwards; nothing else. It logs a warning saying so.

Where neither can run (no namespaces, bubblewrap missing) ``auto`` raises :class:`SandboxError`
naming what is missing: model code never runs unconfined by accident. Per-run failures are
results (a non-zero ``returncode``), never exceptions out of :meth:`Sandbox.map`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from e1.sandbox.backends import BACKEND_NAMES, backend_name, get_backend
from e1.sandbox.program import PYTHON_FLAGS, UID_BASE, UID_SPAN, Program, check_program, off_stdio
from e1.sandbox.types import GiB, Isolation, Limits, MiB, RunResult, SandboxError

__all__ = [
    "BACKEND_NAMES",
    "backend_name",
    "GiB",
    "Isolation",
    "Limits",
    "MiB",
    "PYTHON_FLAGS",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "UID_BASE",
    "UID_SPAN",
    "isolation",
    "run_sandboxed",
]

T = TypeVar("T")
R = TypeVar("R")


def run_sandboxed(
    program: Program,
    stdin: bytes = b"",
    limits: Limits = Limits(),
    *,
    site_packages: bool = False,
    backend: str | None = None,
) -> RunResult:
    """Run ``program`` (Python source or an argv) confined; block until it ends or is killed."""
    return Sandbox(limits=limits, site_packages=site_packages, backend=backend).run(program, stdin)


def isolation(backend: str | None = None) -> Isolation:
    """What ``backend`` (None: ``$E1_SANDBOX`` or auto) confines here; starts it."""
    return get_backend(backend).isolation


class Sandbox:
    """Runs programs with shared limits, ``workers`` at a time (threads over subprocesses).

    ``run`` blocks in the calling thread; ``map`` and ``run_many`` spread work over the
    workers, e.g. ``box.map(lambda code: run_code_tests(code, tests, sandbox=box), programs)``
    (the code reward runs a batch this way, through :class:`e1.rewards.registry.ScoringContext`).
    """

    def __init__(
        self, workers: int = 1, limits: Limits = Limits(), *, site_packages: bool = False, backend: str | None = None
    ):
        if not isinstance(workers, int) or workers < 1:
            raise SandboxError(f"workers must be a whole number >= 1, got {workers!r}", hint="e.g. workers=4")
        self.workers, self.limits, self.site_packages, self.backend = workers, limits, site_packages, backend
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def isolation(self) -> Isolation:
        return get_backend(self.backend).isolation

    def run(
        self, program: Program, stdin: bytes = b"", limits: Limits | None = None, fds: Sequence[int] = ()
    ) -> RunResult:
        """Run one program. ``fds`` (taken over and closed here) are handed to it, their numbers
        there in ``$E1_FDS`` (3, 4, ... on the unshare backend; never 0, 1 or 2)."""
        try:
            check_program(program)
            backend = get_backend(self.backend)
            fds = off_stdio(fds)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        start = time.monotonic()
        try:
            return backend.run(program, stdin, limits or self.limits, self.site_packages, fds)
        except OSError as err:  # the machinery failed for this run (no fds or processes left): its result
            return RunResult(
                127,
                b"",
                f"e1 sandbox: the run could not be started: {err}\n".encode(),
                timed_out=False,
                killed_reason=None,
                wall_s=time.monotonic() - start,
                isolation=backend.isolation,
            )

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(item) for item in items]``, ``workers`` at a time, in order."""
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="e1-sandbox")
        return list(self._pool.map(fn, items))

    def run_many(self, jobs: Iterable[tuple[Program, bytes]]) -> list[RunResult]:
        """Run independent ``(program, stdin)`` jobs in parallel; results in job order."""
        return self.map(lambda job: self.run(*job), jobs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
