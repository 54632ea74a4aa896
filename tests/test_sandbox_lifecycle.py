"""The sandbox's machinery: nothing of it outlives e1, a run starts in a clean cgroup slot, a
failure of the machinery is one run's failed result, and set-ups of ordinary users work
(an interpreter in a venv under /tmp, a parent that started e1 with its standard fds closed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e1.sandbox import UID_BASE, Limits, MiB, Sandbox, SandboxError, isolation, run_sandboxed
from e1.sandbox.backends import get_backend

ROOT = Path(__file__).resolve().parents[1]
unshare_only = pytest.mark.skipif(isolation().mode != "unshare", reason="the root (unshare) backend's machinery")

E1 = """
import json, sys, threading, time
from e1.sandbox import Limits, Sandbox
from e1.sandbox.backends import get_backend
print(json.dumps([path for path, _ in get_backend("unshare")._cgroups]), flush=True)
limits = Limits(wall_s=120)
plain, site = Sandbox(limits=limits, backend="unshare"), Sandbox(limits=limits, backend="unshare", site_packages=True)
for box, program in [(plain, [sys.executable, "-S", "-c", "import time; time.sleep(120)"]),
                     (plain, "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\ntime.sleep(120)"),
                     (site, "import time\\ntime.sleep(120)")]:
    threading.Thread(target=box.run, args=(program,), daemon=True).start()
time.sleep(120)
"""


def processes_of(name: str) -> dict[int, int]:
    """Live processes (pid -> uid) of the sandbox whose cgroups are called ``name``: the fork
    server and its forks carry it in their command line, every run in its cgroup path."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path("/proc", pid, "status").read_text()
            text = Path("/proc", pid, "cmdline").read_bytes().decode(errors="replace") + Path("/proc", pid, "cgroup").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if name in text and not fields["State"].strip().startswith("Z"):
            found[int(pid)] = int(fields["Uid"].split()[0])
    return found


@unshare_only
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_no_run_and_no_cgroup_outlives_e1(how):
    e1 = subprocess.Popen([sys.executable, "-c", E1], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        parents = json.loads(e1.stdout.readline())
        name = os.path.basename(parents[0])
        deadline = time.monotonic() + 30
        while sum(uid >= UID_BASE for uid in processes_of(name).values()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # three runs and the child of one
        assert sum(uid >= UID_BASE for uid in processes_of(name).values()) >= 4
    finally:
        e1.send_signal(how)
        e1.wait()
    deadline = time.monotonic() + 5
    while (processes_of(name) or any(map(os.path.exists, parents))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(name) == {}
    assert [path for path in parents if os.path.exists(path)] == []
