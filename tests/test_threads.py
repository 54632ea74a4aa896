"""torch's CPU team sized to the cores other processes leave free (e1/cpu.py): the rule over generated loads,
the reading of /proc/stat, the pacer over generated timelines, and the entry point against real busy processes.
Its speed is benchmarks/contention.py's business, not a test's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.cpu import WINDOW, Pacer, busy_seconds, threads_for

LOADS = st.floats(min_value=0.0, max_value=512.0) | st.sampled_from([float("nan"), float("inf")])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 256), LOADS, LOADS, st.integers(1, 256))
def test_the_team_fills_the_free_cores_at_least_one_at_most_torchs(cores, others, more, most):
    team = threads_for(cores, others, most)
    assert 1 <= team <= most
    if others == others and more == more and more >= others:
        assert threads_for(cores, more, most) <= team  # more load, never a bigger team
    if others < 0.5:
        assert team == most  # a quiet machine: torch's own team, even one larger than the cores
    if others == others and others >= max(0.5, cores - 1.5):
        assert team == 1  # at most one core left free


CPU_FIELDS = st.lists(st.integers(0, 10**9), min_size=10, max_size=10)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 63), CPU_FIELDS, min_size=1, max_size=8), st.data())
def test_busy_seconds_sums_the_working_ticks_of_the_chosen_cores_only(cores, data):
    chosen = data.draw(st.sets(st.sampled_from(sorted(cores))))
    lines = ["cpu " + " ".join(["7"] * 10)]  # the all-cores line: never counted
    lines += [f"cpu{n} " + " ".join(map(str, fields)) for n, fields in cores.items()]
    lines += ["intr 1 2 3", "ctxt 99", "cpu_weird 1 2"]
    working = sum(sum(f[:8]) - f[3] - f[4] for n, f in cores.items() if n in chosen)
    assert busy_seconds("\n".join(lines), chosen) == pytest.approx(working / os.sysconf("SC_CLK_TCK"))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 16),
    st.integers(1, 16),
    st.lists(st.tuples(st.floats(0.01, 3.0), st.floats(0.0, 16.0), st.floats(0.0, 16.0)), max_size=12),
)
def test_the_pacer_follows_each_windows_load_and_says_only_changes(cores, most, timeline):
    """A generated timeline of (seconds, other processes' cores, this process's cores): each call past a window
    sizes the team from the load since the last reading; a call within one changes nothing."""
    clock = [0.0]
    totals = [0.0, 0.0]  # busy seconds on the cores, this process's seconds
    pacer = Pacer(frozenset(range(cores)), read=lambda: tuple(totals), clock=lambda: clock[0])
    team, last, window_others = most, 0.0, 0.0
    count = lambda: team  # noqa: E731  torch's count: what the pacer said last
    for seconds, others, own in timeline:
        clock[0] += seconds
        totals[0] += (others + own) * seconds
        totals[1] += own * seconds
        window_others += others * seconds
        said = pacer(count)
        if clock[0] - last < WINDOW:
            assert said is None
            continue
        load = window_others / (clock[0] - last)
        if abs(load - round(load) - 0.5) < 1e-6 or abs(load - round(load) + 0.5) < 1e-6:
            expected = pacer.threads  # on a rounding edge the sums' float error may tip it either way
        else:
            expected = threads_for(cores, load, most)
        assert said == (None if expected == team else expected)
        team, last, window_others = expected, clock[0], 0.0


def child_env() -> dict[str, str]:
    """This process's environment less every thread setting, and less the LD_PRELOAD that vLLM's CPU platform puts
    into it (Intel OpenMP and tcmalloc: an earlier vLLM test's): a child that starts as a user's would."""
    threads = ("OMP_", "GOMP_", "KMP_", "LD_PRELOAD")
    return {k: v for k, v in os.environ.items() if not k.startswith(threads)}


# a CPU-bound process that ends once its parent has gone (a probe that fails or is killed leaves no hog behind),
# written to be pasted between double quotes in a probe's source
HOG = "import os\\nparent = os.getppid()\\nwhile os.getppid() == parent:\\n    for _ in range(100000): pass"

PROBE = f"""
import os, subprocess, sys, time
import e1.cli.app as cli
HOG = "{HOG}"

def command(prog_name):  # stands in for a command: loads torch, works, paces, as the engine and the trainer do
    import torch
    from e1.cpu import _own_seconds, busy_seconds, pace
    most = torch.get_num_threads()
    def work():
        pace()
        a, started = torch.randn(128, 128), time.monotonic()
        while time.monotonic() - started < 0.8:
            a @ a
        pace()
        return torch.get_num_threads()
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count())]
    time.sleep(0.5)
    beside = work()
    for hog in hogs:
        hog.kill()
        hog.wait()
    cpus = os.sched_getaffinity(0)
    others = lambda: busy_seconds(open("/proc/stat").read(), cpus) - _own_seconds()
    before, started = others(), time.monotonic()
    alone = work()
    load = (others() - before) / (time.monotonic() - started)  # what other processes (other tests) took meanwhile
    print("MOST", most, "BESIDE", beside, "ALONE", alone, "LOAD", load, flush=True)
cli.app = command
cli.main()
"""


def run_entry_point(extra: dict[str, str]) -> list[int]:
    env = child_env()
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True, env=env | extra
    )
    words = done.stdout.split()
    return [float(words[words.index(key) + 1]) for key in ("MOST", "BESIDE", "ALONE", "LOAD")]


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="pacing reads /proc/stat (Linux)")
def test_the_entry_point_paces_torch_beside_busy_processes_and_back_alone():
    most, beside, alone, load = run_entry_point({"OMP_WAIT_POLICY": "ACTIVE"})  # pacing whatever the start saw
    if most == 1:
        pytest.skip("one core: nothing to pace")
    assert beside < most  # every core busy elsewhere: a smaller team
    if load >= 0.3:  # a shared machine (the other tests) is not quiet: the smaller team is then right
        pytest.skip(f"other processes kept {load:.1f} cores busy while this one was to be alone")
    assert alone == most  # the others gone: torch's own team again


def test_the_callers_thread_count_is_left_alone():
    most, beside, alone, _ = run_entry_point({"OMP_NUM_THREADS": "2"})
    assert most == beside == alone == 2


WAIT_PROBE = f"""
import os, subprocess, sys, time
hogs = [subprocess.Popen([sys.executable, "-c", "{HOG}"]) for _ in range(int(sys.argv[1]))]
time.sleep(0.3 if hogs else 0)
import e1.cli.app as cli
def command(prog_name):
    import torch
    from e1 import cpu
    print("POLICY", os.environ.get("OMP_WAIT_POLICY"), "PACING", cpu._pacer is not None, flush=True)
    for hog in hogs:
        hog.kill()
cli.app = command
cli.main()
"""


def run_waiting(hogs: int, extra: dict[str, str]) -> tuple[str, str]:
    env = child_env()
    done = subprocess.run(
        [sys.executable, "-c", WAIT_PROBE, str(hogs)], capture_output=True, text=True, timeout=120, env=env | extra
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the load is read from /proc/stat (Linux)")
def test_beside_busy_processes_idle_threads_sleep_and_the_openmp_runtime_reads_it():
    out, err = run_waiting(os.cpu_count() or 1, {"OMP_DISPLAY_ENV": "TRUE"})
    assert "POLICY PASSIVE PACING False" in out
    if "OPENMP DISPLAY ENVIRONMENT" in err:  # libgomp prints what it read as torch loads it
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in err
    out, _ = run_waiting(os.cpu_count() or 1, {"OMP_WAIT_POLICY": "ACTIVE"})
    assert "POLICY ACTIVE PACING True" in out  # the caller's word on waiting: kept, the count still paced


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 2.0), st.floats(0.0, 64.0), st.booleans())
def test_waiting_is_chosen_from_at_least_a_look_of_load(seen, others, said):
    """Threads sleep at once (and pacing is off) exactly where other processes kept at least QUIET cores busy over
    the time since the entry point, looked at for LOOK seconds at least; a caller's waiting word is kept."""
    import e1.cpu as cpu

    clock, slept = [0.0], []
    pacer = cpu.Pacer(frozenset({0, 1}), read=lambda: (others * clock[0], 0.0), clock=lambda: clock[0])
    clock[0] = seen
    environ = {"OMP_WAIT_POLICY": "ACTIVE"} if said else {}
    before = cpu._pacer
    try:
        cpu._pacer = None if said else pacer  # cpu_threads sets no finder where the caller said how threads wait
        chose = cpu.choose_waiting(environ, sleep=lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
        busy = not said and others >= cpu.QUIET - 1e-9 * max(1.0, others)
        if abs(others - cpu.QUIET) > 1e-6:
            assert chose == busy
            assert environ.get("OMP_WAIT_POLICY") == ("PASSIVE" if busy else "ACTIVE" if said else None)
            assert (cpu._pacer is None) == (busy or said)
        assert slept == ([cpu.LOOK - seen] if seen < cpu.LOOK and not said else [])
    finally:
        cpu._pacer = before


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda pid: ())(0)) < 2, reason="needs 2 cores")
def test_the_cores_are_the_ones_the_process_had_before_openmp_bound_its_thread():
    """With OMP_PROC_BIND, libgomp binds the thread that runs a kernel to one core: the cores pacing counts are
    read once, at the entry point, before torch loads (reread later, they would be that one core)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core to run on: nothing for OpenMP to narrow")
    probe = (
        "import os\nfrom e1 import cpu\nbefore = os.sched_getaffinity(0)\nassert cpu.cpu_threads()\n"
        "import torch\n(torch.ones(256, 256) @ torch.ones(256, 256)).sum()\ncpu.pace()\n"
        "print(sorted(before), sorted(os.sched_getaffinity(0)), sorted(cpu._pacer.cpus), sep='|')"
    )
    env = child_env()
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env=env | {"OMP_PROC_BIND": "true", "OMP_WAIT_POLICY": "ACTIVE"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, bound, counted = done.stdout.strip().split("|")
    assert counted == before != bound, done.stderr[-2000:]


# ---- pace() end to end, against a generated /proc/stat and a torch whose count is kept per thread ----------------


class Team:
    """torch's thread count as libgomp keeps it: per thread (omp_set_num_threads writes the calling thread's ICV);
    a thread's first read takes the count last set anywhere (ATen's lazy init). ``sets`` records every change."""

    def __init__(self, most: int):
        self.last, self.local, self.sets = most, threading.local(), []

    def get(self) -> int:
        if not hasattr(self.local, "count"):
            self.local.count = self.last
        return self.local.count

    def set(self, count: int) -> None:
        self.local.count = self.last = count
        self.sets.append((threading.get_ident(), count))


@contextlib.contextmanager
def pacing():
    """``(team, load)``: pacing on, over a /proc/stat file that ``load(busy ticks or text)`` rewrites (None: gone),
    every pace() call a window, this process's CPU time still, torch's count a :class:`Team` of 2, cores {0, 1}."""
    import torch

    import e1.cpu

    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        stat, team = Path(folder) / "stat", Team(2)
        patch.setattr(torch, "get_num_threads", team.get)
        patch.setattr(torch, "set_num_threads", team.set)
        patch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
        patch.setattr(e1.cpu, "PROC_STAT", str(stat))
        patch.setattr(e1.cpu, "WINDOW", 0.0)
        patch.setattr(e1.cpu, "_own_seconds", lambda: 0.0)

        def load(reading: int | str | None) -> None:
            if reading is None:
                stat.unlink(missing_ok=True)
            else:
                stat.write_text(stat_text(reading) if isinstance(reading, int) else reading)

        load(0)
        e1.cpu.cpu_threads({})
        yield team, load
        e1.cpu._pacer = None


def stat_text(busy: int) -> str:
    """A /proc/stat whose cores 0 and 1 have worked ``busy`` ticks each since boot (idle 5, iowait 7)."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"] + [f"cpu{n} {busy} 0 0 5 7 0 0 0 0 0" for n in (0, 1)]
    return "\n".join(lines + ["intr 10 0 1", "ctxt 99", "btime 1", "processes 5", "procs_running 2"]) + "\n"


BUSY = st.integers(0, 10**12)  # ticks: any jump within a (microsecond) window is a saturated or a quiet machine
DAMAGED = [
    None,  # unreadable
    "",
    "cpu0 1 2 3\ncpu1 1 2 3\n",  # fewer than four counters
    "cpu0 1 2 x 4 5\ncpu1 1 2 3 4 5\n",
    "cpu0 1 2 3 4 -5\ncpu1 1 2 3 4 5\n",
    "cpu0 " + "9" * 5000 + " 0 0 0 0\ncpu1 1 2 3 4 5\n",  # past Python's digits limit
    "cpu0 1 2 3 ²\ncpu1 1 2 3 4\n",
    "\x00\xff garbage",
    "cpu0 1 2 3 4 5\n",  # a core of this process's missing
    "x" * (5 << 20) + "\ncpu0 1 2 3 4\ncpu1 1 2 3 4\n",  # its lines past what is read
]


@pytest.mark.parametrize("text", DAMAGED, ids=lambda text: repr(text)[:24])
def test_the_entry_point_leaves_pacing_off_where_the_stat_is_unusable(text, monkeypatch, tmp_path):
    import e1.cpu

    if text is not None:
        (tmp_path / "stat").write_text(text)
    monkeypatch.setattr(e1.cpu, "PROC_STAT", str(tmp_path / "stat"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert e1.cpu.cpu_threads({}) is False  # and no traceback: every e1 command starts here
    assert e1.cpu._pacer is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(BUSY, st.sampled_from(DAMAGED), st.text(max_size=40)), min_size=1, max_size=12))
def test_pace_never_raises_and_an_unusable_stat_gives_torch_its_own_count_back(readings):
    """Whatever /proc/stat holds (or if it cannot be read), neither the entry point nor pace() raises, the team
    stays within [1, torch's count], and after a reading the gate refuses, torch has its own count for good."""
    from e1.cpu import pace

    with pacing() as (team, load):
        broken = False
        for reading in readings:
            load(reading)
            pace()
            assert 1 <= team.get() <= 2
            broken = broken or (not isinstance(reading, int) and reading in DAMAGED)
            if broken:
                assert team.get() == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(BUSY, st.integers(1, 8).map(lambda n: ("user", n))), min_size=1, max_size=16))
def test_a_count_someone_else_set_is_never_changed_by_pace(steps):
    """User code, an --include module or a library that sets torch's count once pacing has begun decides from then
    on. (A count set before is torch's own to pacing: its ceiling, whole on a quiet machine; one set to the very
    count pacing had set cannot be told from it, so the user's counts here differ from it.)"""
    from e1.cpu import pace

    with pacing() as (team, load):
        pace()
        chosen = paced = None
        for step in steps:
            if isinstance(step, tuple):
                paced = team.get() if paced is None else paced  # the count pacing set last
                team.set(chosen := step[1] if step[1] != paced else step[1] + 1)
            else:
                load(step)
                pace()
            if chosen is not None:
                assert team.get() == chosen


def test_a_set_num_threads_a_library_replaced_is_never_called(monkeypatch):
    """vLLM's CPU worker replaces torch.set_num_threads (it warns and does nothing once its threads are bound):
    pacing in that process stops instead of warning at every change."""
    import torch

    from e1.cpu import pace

    with pacing() as (team, load):
        pace()  # pacing has started
        refused = []
        monkeypatch.setattr(torch, "set_num_threads", refused.append)
        for busy in (10**9, 10**9, 2 * 10**9, 3 * 10**12):
            load(busy)
            pace()
        assert refused == []


def test_only_the_thread_that_paces_first_is_paced():
    """torch's count is per thread: another thread calling pace() keeps the count it has."""
    from e1.cpu import pace

    with pacing() as (team, load):
        worker = threading.Thread(target=pace)
        worker.start()
        worker.join()  # the worker paces first
        assert team.get() == 2  # this (main) thread's count
        for busy in (10**9, 10**9, 3 * 10**9, 3 * 10**9):
            load(busy)
            pace()
        assert team.get() == 2
        assert all(thread != threading.get_ident() for thread, _ in team.sets)
