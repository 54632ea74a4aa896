"""torch's CPU team sized to the cores other processes leave free (e1/cpu.py): the rule over generated loads,
the reading of /proc/stat, the pacer over generated timelines, and the entry point against real busy processes.
Its speed is benchmarks/contention.py's business, not a test's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.cpu import WINDOW, Pacer, busy_seconds, threads_for

LOADS = st.floats(min_value=0.0, max_value=512.0) | st.just(float("nan"))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 256), LOADS, LOADS, st.integers(1, 256))
def test_the_team_fills_the_free_cores_at_least_one_at_most_torchs(cores, others, more, most):
    team = threads_for(cores, others, most)
    assert 1 <= team <= most
    if others == others and more == more and more >= others:
        assert threads_for(cores, more, most) <= team  # more load, never a bigger team
    if others < 0.5:
        assert team == min(cores, most)  # a quiet machine: torch's own team (or every core)
    if others == others and others >= cores - 1.5:
        assert team == 1


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
    pacer = Pacer(frozenset(range(cores)), most, read=lambda: tuple(totals), clock=lambda: clock[0])
    team, last, window_others = most, 0.0, 0.0
    for seconds, others, own in timeline:
        clock[0] += seconds
        totals[0] += (others + own) * seconds
        totals[1] += own * seconds
        window_others += others * seconds
        said = pacer()
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


PROBE = """
import os, subprocess, sys, time
import e1.cli.app as cli

def command(prog_name):  # stands in for a command: loads torch, works, paces, as the engine and the trainer do
    import torch
    from e1.cpu import pace
    most = torch.get_num_threads()
    def work():
        pace()
        a, started = torch.randn(128, 128), time.monotonic()
        while time.monotonic() - started < 0.8:
            a @ a
        pace()
        return torch.get_num_threads()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count())]
    time.sleep(0.5)
    beside = work()
    for hog in hogs:
        hog.kill()
        hog.wait()
    print("MOST", most, "BESIDE", beside, "ALONE", work(), flush=True)
cli.app = command
cli.main()
"""


def run_entry_point(extra: dict[str, str]) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "KMP_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True, env=env | extra
    )
    words = done.stdout.split()
    return [int(words[words.index(key) + 1]) for key in ("MOST", "BESIDE", "ALONE")]


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="pacing reads /proc/stat (Linux)")
def test_the_entry_point_paces_torch_beside_busy_processes_and_back_alone():
    most, beside, alone = run_entry_point({})
    if most == 1:
        pytest.skip("one core: nothing to pace")
    assert beside < most  # every core busy elsewhere: a smaller team
    assert alone == most  # the others gone: torch's own team again


def test_the_callers_thread_count_is_left_alone():
    most, beside, alone = run_entry_point({"OMP_NUM_THREADS": "2"})
    assert most == beside == alone == 2
