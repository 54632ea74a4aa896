"""Where this machine lets the sandbox put each run in its own cgroup (memory and pids for
the whole process tree, and a CPU share): cgroup v2 if its memory and pids controllers can be
delegated to a fresh child, else the cgroup v1 memory and pids hierarchies, else nowhere. The
cpu controller (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``) is used where it can be, and only then
does a run get a CPU share (:func:`has_cpu_share`).

    kind, parents = make_parents("e1-sandbox-1234")   # ("cgroup v1", [(dir, {limit: file})])
    ...
    remove_parents(parents)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V2_FILES = {"memory_bytes": "memory.max", "zero": "memory.swap.max", "processes": "pids.max"}
V2_CPU = {"cpu_max": "cpu.max"}  # "QUOTA PERIOD" in microseconds
V1_FILES = {"memory": {"memory_bytes": "memory.limit_in_bytes"}, "pids": {"processes": "pids.max"}}
V1_CPU = {"cpu": {"cpu_period_us": "cpu.cfs_period_us", "cpu_quota_us": "cpu.cfs_quota_us"}}  # period first
CPU_PERIOD_US = 100_000


def cpu_limits(cpus: float) -> dict[str, int | str]:
    """The cgroup values (every hierarchy's) that let a run use ``cpus`` CPUs at most."""
    quota = max(round(cpus * CPU_PERIOD_US), 1000)  # the kernel's smallest quota: 1 ms
    return {"cpu_max": f"{quota} {CPU_PERIOD_US}", "cpu_period_us": CPU_PERIOD_US, "cpu_quota_us": quota}


def has_cpu_share(parents: list[tuple[str, dict[str, str]]]) -> bool:
    return any(key in files for _, files in parents for key in ("cpu_max", "cpu_quota_us"))


def make_parents(name: str) -> tuple[str | None, list[tuple[str, dict[str, str]]]]:
    """Create ``name`` as the parent of this process's runs' cgroups; (kind, [(path, files)])."""
    mounts, own = _mounts(), _own_paths()
    if "cgroup2" in mounts and "" in own:
        path = _mkdir(mounts["cgroup2"], own[""], name)
        if path and _delegate_v2(path):
            files = {key: file for key, file in V2_FILES.items() if Path(path, file).exists() or key != "zero"}
            files |= V2_CPU if _delegate_v2(path, "cpu") else {}
            return "cgroup v2", [(path, files)]  # memory.swap.max exists only with swap accounting
        if path:
            os.rmdir(path)
    made = []
    for controller, files in V1_FILES.items():
        path = _mkdir(mounts[controller], own.get(controller, "/"), name) if controller in mounts else None
        if path is None:
            remove_parents(made)
            return None, []
        made.append((path, files))
    for controller, files in V1_CPU.items():  # optional: without it, runs get no CPU share
        path = _mkdir(mounts[controller], own.get(controller, "/"), name) if controller in mounts else None
        if path is not None:
            made.append((path, files))
    return "cgroup v1", made


def remove_parents(parents: list[tuple[str, dict[str, str]]]) -> None:
    for path, _ in parents:
        for child in Path(path).glob("*slot-*"):
            _rmdir(str(child))
        _rmdir(path)


def _delegate_v2(path: str, *controllers: str) -> bool:
    """Enable ``controllers`` (default: memory and pids) for the children of ``path``."""
    controllers = controllers or ("memory", "pids")
    available = Path(path, "cgroup.controllers").read_text().split()
    if not set(controllers) <= set(available):
        return False
    try:
        Path(path, "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in controllers))
    except OSError:
        return False
    return True


def _mkdir(mount: tuple[str, str], own: str, name: str) -> str | None:
    point, root = mount
    path = os.path.join(point, os.path.relpath(own, root), name)
    try:
        os.mkdir(path, 0o700)
    except OSError:
        return None
    return path


def _rmdir(path: str) -> None:
    for _ in range(200):  # the last run's processes may take a moment to be released
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)


def _mounts() -> dict[str, tuple[str, str]]:
    """ "cgroup2" and each v1 controller ("memory", "pids") -> (mount point, root of the mount)."""
    found: dict[str, tuple[str, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = (right.split() + ["", "", ""])[:3]
        mount = (left.split()[4], left.split()[3])
        if fstype == "cgroup2":
            found.setdefault("cgroup2", mount)
        elif fstype == "cgroup":
            for option in options.split(","):
                found.setdefault(option, mount)
    return found


def _own_paths() -> dict[str, str]:
    """Controller ("" for v2) -> this process's cgroup path in that hierarchy."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own
