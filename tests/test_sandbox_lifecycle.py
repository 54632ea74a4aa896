"""The sandbox's machinery: nothing of it outlives e1, a run starts in a clean cgroup slot, a
failure of the machinery is one run's failed result, and set-ups of ordinary users work
(an interpreter in a venv under /tmp, a parent that started e1 with its standard fds closed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e1.sandbox import UID_BASE, Limits, MiB, Sandbox, isolation, run_sandboxed
from e1.sandbox.backends import get_backend

ROOT = Path(__file__).resolve().parents[1]


def skip_unusable(backend: str) -> None:
    if backend == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("no bubblewrap here")
    if backend == "bwrap" and os.geteuid() == 0:
        pytest.skip("bwrap refuses root (tests/test_hostile_bwrap.py runs its checks under another uid)")


unshare_only = pytest.mark.skipif(isolation().mode != "unshare", reason="the root (unshare) backend's machinery")

E1 = """
import json, os, sys, threading, time
from e1.sandbox import Limits, Sandbox
from e1.sandbox.backends import get_backend
print(json.dumps([path for path, _ in get_backend("unshare")._cgroups]), flush=True)
limits = Limits(wall_s=120)
plain, site = Sandbox(limits=limits, backend="unshare"), Sandbox(limits=limits, backend="unshare", site_packages=True)
for box, program in [(plain, [sys.executable, "-S", "-c", "import time; time.sleep(120)"]),
                     (plain, "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\ntime.sleep(120)"),
                     (site, "import time\\ntime.sleep(120)")]:
    threading.Thread(target=box.run, args=(program,), daemon=True).start()
child = os.fork()
if child == 0:  # a forked child (a data loader, ...) that outlives e1 by a while
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(120)
"""


def processes_of(name: str) -> dict[int, int]:
    """Live processes (pid -> uid) of the sandbox whose cgroups are called ``name``: the fork
    server and its forks carry it in their command line, every run in its cgroup path."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path("/proc", pid, "status").read_text()
            text = (
                Path("/proc", pid, "cmdline").read_bytes().decode(errors="replace")
                + Path("/proc", pid, "cgroup").read_text()
            )
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if name in text and not fields["State"].strip().startswith("Z"):
            found[int(pid)] = int(fields["Uid"].split()[0])
    return found


@unshare_only
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_no_run_and_no_cgroup_outlives_e1(how):
    e1 = subprocess.Popen(
        [sys.executable, "-c", E1], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        parents, child = json.loads(e1.stdout.readline()), int(e1.stdout.readline())
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
    os.kill(child, signal.SIGKILL)  # (it held copies of e1's fds all along)
    assert processes_of(name) == {}
    assert [path for path in parents if os.path.exists(path)] == []


@unshare_only
def test_a_run_sees_its_own_cgroup_as_the_root():
    result = run_sandboxed("print(open('/proc/self/cgroup').read())", b"", Limits(wall_s=20))
    assert result.ok and {line.rsplit(":", 1)[1] for line in result.stdout.decode().split()} == {"/"}


def memory_slots() -> list[Path]:
    backend = get_backend("unshare")
    return sorted(
        slot for path, files in backend._cgroups if "memory_bytes" in files for slot in Path(path).glob("slot-*")
    )


@unshare_only
@pytest.mark.skipif(isolation().tree_limits is None, reason="no cgroup slots here")
def test_a_run_never_starts_in_a_slot_holding_memory_of_another(tmp_path):
    # what a dying run can leave: pages charged to its slot that no reclaim frees (tmpfs, no swap)
    with Sandbox(workers=4, limits=Limits(wall_s=20)) as box:  # more slots than zygotes wait in
        box.run_many([("import time\ntime.sleep(0.5)", b"")] * 8)
    left = []
    for slot in memory_slots():
        left.append(Path("/dev/shm", f"e1-test-{slot.name}-{os.getpid()}"))
        charge = (
            "import os, sys\nopen(sys.argv[1] + '/cgroup.procs', 'w').write(str(os.getpid()))\n"
            "open(sys.argv[2], 'wb').write(b'x' * (96 << 20))"
        )
        subprocess.run([sys.executable, "-S", "-c", charge, str(slot), str(left[-1])], check=True)
    try:
        results = [
            run_sandboxed("print(sum(range(10)))", b"", Limits(wall_s=20, memory_bytes=64 * MiB)) for _ in range(12)
        ]
    finally:
        for file in left:
            file.unlink()
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(0, b"45\n", b"")] * 12


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@unshare_only
def test_a_failure_of_the_machinery_is_a_failed_run_and_later_runs_work():
    backend = get_backend("unshare")
    middles = [pid for pid in children(backend._server.pid) if len(children(pid)) == 1]
    for pid in middles:  # every waiting run's middle process (its one child is the run): they cannot start now
        os.kill(pid, signal.SIGKILL)
    with Sandbox(workers=2, limits=Limits(wall_s=20)) as box:
        first = box.run_many([("print(1)", b"")] * 6)
        os.kill(backend._server.pid, signal.SIGKILL)  # the fork server itself
        time.sleep(0.2)
        later = box.run_many([("print(2)", b"")] * 4)
    site = max(children(backend._server.pid), key=lambda pid: len(children(pid)))  # the flavour with site-packages
    os.kill(site, signal.SIGKILL)
    with Sandbox(workers=2, limits=Limits(wall_s=20), site_packages=True) as box:
        box.run_many([("print(3)", b"")] * 4)
        last = box.run_many([("print(3)", b"")] * 4)
    assert all(r.returncode in (0, 127) for r in first) and first[-1].stdout == b"1\n"
    assert [(r.returncode, r.stdout) for r in later + last] == [(0, b"2\n")] * 4 + [(0, b"3\n")] * 4


VENV_E1 = """
import sys
from e1.sandbox import Limits, Sandbox
box = Sandbox(limits=Limits(wall_s=20), backend=sys.argv[1])
for program, site in [("import os, sys; print(os.path.isfile(sys.executable))", False),
                      ("import numpy, sys; print(sys.prefix)", True), ([sys.executable, "-c", "import sys; print(sys.prefix)"], False)]:
    box.site_packages = site
    result = box.run(program)
    print(result.stdout.decode().strip() or result.stderr.decode()[-300:])
"""


@pytest.mark.parametrize("backend", ["unshare", "bwrap"])
def test_an_interpreter_in_a_venv_under_tmp_works(tmp_path, backend):
    skip_unusable(backend)
    venv = tmp_path / "venv"  # tmp_path is under /tmp, which every run has its own of
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", VENV_E1, backend],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert ran.stdout.split("\n")[:3] == ["True", str(venv), str(venv)], ran.stderr[-2000:]


CLOSED_STDIO_E1 = """
import json, os, sys
os.close(0)
os.close(1)  # as some service managers and close_fds parents start e1
from e1.sandbox import Limits, Sandbox
box = Sandbox(limits=Limits(wall_s=20), backend=sys.argv[1])
if sys.argv[2] == "after":
    box.run("pass")  # the backend starts with 0 and 1 closed
into, ask = os.pipe()  # 0 and 1 if the backend did not start yet
answer, out = os.pipe()
os.write(ask, b"ping")
os.close(ask)
program = "import os\\nr, w = map(int, os.environ['E1_FDS'].split())\\nos.write(w, os.read(r, 4)[::-1])"
result = box.run(program, b"stdin", fds=[into, out])
os.write(2, result.stderr + json.dumps([into, result.returncode, os.read(answer, 10).decode()]).encode())
"""


@pytest.mark.parametrize("backend", ["unshare", "bwrap", "none"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_runs_get_their_fds_when_e1_started_with_stdin_and_stdout_closed(backend, when):
    """``before``: the fds handed to the run are 0 and 1; ``after``: the backend started (its
    own sockets and memfds made) while 0 and 1 were closed."""
    skip_unusable(backend)
    ran = subprocess.run(
        [sys.executable, "-c", CLOSED_STDIO_E1, backend, when],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        close_fds=True,
    )
    into, returncode, answer = json.loads(ran.stderr[ran.stderr.rindex("[") :])
    assert (returncode, answer) == (0, "gnip"), ran.stderr[-2000:]
    assert into < 3 or when == "after"


STARVED_E1 = """
import resource, sys
from e1.sandbox import Limits, Sandbox
box = Sandbox(limits=Limits(wall_s=20), backend=sys.argv[1])
box.run("pass")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (3, hard))  # no new fd: no pipes for a run
starved = box.run("print(1)")
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
later = box.run("print(2)")
print(starved.returncode, later.returncode, later.stdout.decode().strip(), starved.stderr.decode().strip())
"""


@pytest.mark.parametrize("backend", ["unshare", "bwrap", "none"])
def test_a_run_the_machinery_cannot_start_is_a_failed_result_on_every_backend(backend):
    skip_unusable(backend)
    ran = subprocess.run(
        [sys.executable, "-c", STARVED_E1, backend],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert ran.stdout.split(" ", 3)[:3] == ["127", "0", "2"], ran.stderr[-2000:]
    assert "Too many open files" in ran.stdout


def test_extra_fds_reach_a_run_whose_open_files_limit_is_small():
    read_fd, write_fd = os.pipe()
    result = Sandbox(limits=Limits(wall_s=20, open_files=6)).run(
        "import os\nos.write(int(os.environ['E1_FDS']), b'over')", fds=[write_fd]
    )
    assert (result.returncode, result.stderr, os.read(read_fd, 10)) == (0, b"", b"over")
    os.close(read_fd)


FD_LAYOUT_E1 = """
import json, os, sys
held, cgroups_too, release = json.loads(sys.argv[1])
for fd in held:  # the fds this process happens to hold when the sandbox starts (0-2 only, else)
    os.dup2(0, fd)
if not cgroups_too:
    from e1.sandbox import cgroups
    cgroups.make_parents = lambda name: (None, [])
from e1.sandbox import isolation
from e1.rewards.code_tests import run_code_tests
isolation()  # as e1 eval does before scoring: the fork server starts with this layout
if release:
    for fd in held:
        os.close(fd)
call = [{"kind": "call", "fn": "square", "args": [3], "expected": 9}]
code = [{"kind": "code", "code": "def check(candidate):\\n    assert candidate(3) == 9\\n", "entry_point": "square"}]
results = [run_code_tests("def square(x):\\n    return x * x", tests) for tests in (call, code) for _ in range(3)]
print(json.dumps([[r.passed, r.first_failure] for r in results]))
"""


@unshare_only
def test_honest_call_and_code_tests_pass_whatever_fds_e1_held_when_the_sandbox_started():
    """A stale socket object of the fork server, finalised inside a run, once closed the run's
    harness channel when fds 3-6 were free at start-up (EBADF: honest code failed)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=5, deadline=None, database=None)
    @given(st.sets(st.integers(3, 9), max_size=4), st.booleans(), st.booleans())
    def any_layout(held, cgroups_too, release):
        ran = subprocess.run(
            [sys.executable, "-c", FD_LAYOUT_E1, json.dumps([sorted(held), cgroups_too, release])],
            capture_output=True,
            text=True,
            timeout=120,
            close_fds=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert json.loads(ran.stdout.splitlines()[-1]) == [[1, None]] * 6, ran.stderr[-2000:]

    any_layout()
