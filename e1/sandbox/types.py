"""The sandbox's value types: per-run limits, what confines a run, how a run ended."""

from __future__ import annotations

import math
from dataclasses import dataclass

from e1.errors import E1Error

MiB = 1 << 20
GiB = 1 << 30


class SandboxError(E1Error):
    """The sandbox cannot be set up here or was given impossible limits."""


@dataclass(frozen=True)
class Limits:
    """Per-run limits. ``cpu_s=None`` means ``ceil(wall_s) + 1`` CPU seconds per process.

    ``memory_bytes`` and ``processes`` hold for the run's whole process tree where cgroups
    are available (``Isolation.tree_limits``), and per process / per uid always (rlimits).
    ``cpus`` holds for the whole tree where the cgroup has the cpu controller
    (``Isolation.cpu_share``): a run that spins 60 children still gets one CPU's time, so
    its neighbours' wall-clock limits stay honest.
    """

    wall_s: float = 6.0
    cpu_s: int | None = None
    memory_bytes: int = 1 * GiB  # the run's cgroup memory.max, and each process's RLIMIT_AS
    file_bytes: int = 16 * MiB  # largest file the program may write (RLIMIT_FSIZE)
    processes: int = 64  # processes and threads: the cgroup's pids.max and RLIMIT_NPROC
    open_files: int = 256  # RLIMIT_NOFILE
    output_bytes: int = 1 * MiB  # stdout and stderr each; the run is killed past this
    scratch_bytes: int = 64 * MiB  # size of the private /tmp (the cwd) and of /dev/shm
    scratch_inodes: int = 4096  # files and directories in each of them
    cpus: float = 1.0  # CPUs the whole run may use at once (cgroup cpu.max)

    def __post_init__(self):
        if not isinstance(self.wall_s, (int, float)) or isinstance(self.wall_s, bool) or self.wall_s <= 0:
            raise SandboxError(
                f"sandbox limit wall_s must be a positive number, got {self.wall_s!r}",
                hint="seconds, e.g. Limits(wall_s=6)",
            )
        if not isinstance(self.cpus, (int, float)) or isinstance(self.cpus, bool) or not 0.01 <= self.cpus <= 1024:
            raise SandboxError(
                f"sandbox limit cpus must be a number from 0.01 to 1024, got {self.cpus!r}",
                hint="CPUs the whole run may use at once, e.g. Limits(cpus=1)",
            )
        for name in (
            "cpu_s",
            "memory_bytes",
            "file_bytes",
            "processes",
            "open_files",
            "output_bytes",
            "scratch_bytes",
            "scratch_inodes",
        ):
            value = getattr(self, name)
            if (value is not None or name != "cpu_s") and (type(value) is not int or value <= 0):
                raise SandboxError(
                    f"sandbox limit {name} must be a positive whole number, got {value!r}",
                    hint="e.g. Limits(memory_bytes=1 << 30, processes=64); cpu_s=None: wall_s + 1",
                )

    @property
    def cpu_limit_s(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.wall_s) + 1

    def rlimits(self) -> dict[str, int]:
        """``resource`` names -> values, the same soft and hard."""
        return {
            "RLIMIT_CPU": self.cpu_limit_s,
            "RLIMIT_AS": self.memory_bytes,
            "RLIMIT_FSIZE": self.file_bytes,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


@dataclass(frozen=True)
class Isolation:
    """What confines a run with this backend on this machine."""

    mode: str  # the backend: "unshare" | "bwrap" | "none"
    network: bool  # no network at all (an empty network namespace)
    processes: bool  # own PID namespace: every descendant dies with the program
    user: bool  # a throwaway uid: host files read-only, our processes unsignalable
    filesystem: bool  # a minimal root: system dirs read-only, private /tmp and /dev/shm, no host sockets
    tree_limits: str | None = None  # "cgroup v2" | "cgroup v1": memory and pids for the whole run
    cpu_share: bool = False  # the cgroup's cpu controller caps the whole run at Limits.cpus

    def missing(self) -> list[str]:
        flags = [name for name in ("network", "processes", "user", "filesystem") if not getattr(self, name)]
        return flags + ([] if self.tree_limits else ["tree_limits"]) + ([] if self.cpu_share else ["cpu_share"])


@dataclass(frozen=True)
class RunResult:
    """How one run ended. ``returncode`` < 0 means killed by that signal (-9: SIGKILL)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    killed_reason: str | None  # "timeout" | "output limit" | "memory limit" | None
    wall_s: float
    isolation: Isolation

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.killed_reason is None

    @property
    def network_isolated(self) -> bool:
        return self.isolation.network
