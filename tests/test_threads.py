"""e1's CPU thread settings (e1/cli/threads.py): set once by the entry point before torch loads,
never over what the caller set. Their speed is benchmarks/contention.py's business, not a test's."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from e1.cli.threads import SETTINGS, WAITING, cpu_threads

NAMES = st.sampled_from([*WAITING, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_PROC_BIND", "PATH", "E1_DEBUG"])
ENVIRONS = st.dictionaries(
    NAMES, st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
)


@settings(max_examples=200, deadline=None)
@given(ENVIRONS, st.booleans())
def test_sets_passive_waiting_only_where_the_caller_said_nothing_and_torch_is_not_loaded(environ, torch_loaded):
    before = dict(environ)
    modules = {"torch"} if torch_loaded else set()
    said = any(name in before for name in WAITING)  # set, even to "" or nonsense: the caller's word
    assert cpu_threads(environ, modules) == ({} if said or torch_loaded else SETTINGS)
    assert environ == (before if said or torch_loaded else before | SETTINGS)
    assert cpu_threads(environ, modules) == {}  # a second call finds its own setting and changes nothing


PROBE = """
import os, sys
import e1.cli.app as cli
assert "torch" not in sys.modules
def command(prog_name):  # stands in for the app: what a command that loads torch finds
    import torch
    print("POLICY", os.environ.get("OMP_WAIT_POLICY"), "THREADS", torch.get_num_threads(), flush=True)
cli.app = command
cli.main()
"""


def run_entry_point(extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "KMP_"))}
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env | {"OMP_DISPLAY_ENV": "TRUE"} | extra,
    )


def test_the_entry_point_sets_it_before_torch_loads_and_the_openmp_runtime_reads_it():
    done = run_entry_point({})
    assert "POLICY PASSIVE" in done.stdout
    if "OPENMP DISPLAY ENVIRONMENT" in done.stderr:  # libgomp prints what it read when torch loads it
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in done.stderr


def test_the_entry_point_keeps_the_callers_policy_and_thread_count():
    done = run_entry_point({"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "1"})
    assert "POLICY ACTIVE THREADS 1" in done.stdout
    done = run_entry_point({"OMP_NUM_THREADS": "1"})  # a count alone: e1 still sets how threads wait
    assert "POLICY PASSIVE THREADS 1" in done.stdout
