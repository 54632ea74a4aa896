"""The finder that chooses how torch's threads wait (e1/cpu.py ``_BeforeTorch``), as a red team found it: a lookup
of torch that does not load it, a second entry point in one process, a choice that fails, a process that goes on
after ``main()``. The choice itself is tests/test_threads.py's."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys

import pytest

import e1.cpu as cpu

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the finder is set where /proc/stat reads")


def finders() -> list:
    return [finder for finder in sys.meta_path if isinstance(finder, cpu._BeforeTorch)]


@pytest.fixture
def unloaded(monkeypatch):
    """A process where torch is not loaded yet (looked up, never imported), restored after the test."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(cpu, "LOOK", 0.0)
    monkeypatch.setattr(cpu, "_pacer", None)


class Asked:
    """A finder that only notes the names it is asked for."""

    def __init__(self):
        self.names = []

    def find_spec(self, name, path=None, target=None):
        self.names.append(name)


def test_the_finder_after_it_is_still_asked_for_torch(unloaded):
    """Python before 3.14 walks sys.meta_path itself: a finder that removed itself mid-lookup made the walk skip
    the next one (a finder meant to supply torch was never asked)."""
    asked = Asked()
    sys.meta_path.insert(0, asked)
    cpu.cpu_threads({})
    assert finders() and sys.meta_path.index(asked) == sys.meta_path.index(finders()[0]) + 1
    assert importlib.util.find_spec("torch") is not None
    assert "torch" in asked.names


def test_the_entry_point_called_again_keeps_one_finder_and_the_choice_is_made_once(unloaded):
    environ = {}
    for _ in range(3):
        cpu.cpu_threads(environ)
    assert len(finders()) == 1
    chose = []
    cpu.choose_waiting, real = (lambda env: chose.append(env)), cpu.choose_waiting
    try:
        for _ in range(2):
            assert importlib.util.find_spec("torch") is not None
    finally:
        cpu.choose_waiting = real
    assert chose == [environ]


class ReadOnly(dict):
    def __setitem__(self, key, value):
        raise TypeError("read-only")


@pytest.mark.parametrize("fault", [RuntimeError, KeyError, MemoryError, "read-only"])
def test_a_choice_that_fails_never_breaks_the_import_and_stops_pacing(unloaded, fault):
    environ = ReadOnly() if fault == "read-only" else {}
    assert cpu.cpu_threads(environ)
    pacer = cpu._pacer
    if fault == "read-only":
        pacer.read = lambda: (pacer.last[0] + 1e6, pacer.last[1])  # every core busy elsewhere: PASSIVE, refused
    else:
        pacer.read = lambda: (_ for _ in ()).throw(fault("the reading failed"))
    assert importlib.util.find_spec("torch") is not None
    assert cpu._pacer is None and "OMP_WAIT_POLICY" not in environ


def test_a_process_that_goes_on_after_main_is_neither_paced_nor_chosen_for(unloaded, monkeypatch):
    import e1.cli.app as cli

    monkeypatch.setattr(cli, "app", lambda prog_name: None)
    for env in ("OMP_NUM_THREADS", *cpu.WAITING):
        monkeypatch.delenv(env, raising=False)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for _ in range(2):
            cli.main()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert not finders() and cpu._pacer is None


@pytest.mark.parametrize("said", [*cpu.WAITING, "OMP_NUM_THREADS"])
def test_what_the_caller_sets_after_the_entry_point_still_wins(unloaded, said):
    """An --include module or a library that sets how threads wait (or their count) before it imports torch: e1's
    choice, made later, kept theirs over (PASSIVE over their ACTIVE)."""
    environ = {}
    assert cpu.cpu_threads(environ)
    pacer = cpu._pacer
    pacer.read = lambda: (pacer.last[0] + 1e6, pacer.last[1])  # every core busy elsewhere: PASSIVE, were it e1's
    environ[said] = "ACTIVE" if said == "OMP_WAIT_POLICY" else "1"
    assert importlib.util.find_spec("torch") is not None
    assert environ == {said: environ[said]} and environ[said] in ("ACTIVE", "1")
    assert (cpu._pacer is None) == (said == "OMP_NUM_THREADS")  # their count: not paced; their waiting: paced


@pytest.mark.parametrize("since", ["paced", "someone else's count", "another thread's"])
def test_the_entry_point_gives_torch_its_own_team_back_as_the_command_ends(since):
    """A command paced torch down beside other work: a process that goes on after it (a test, a library user) has
    torch's own team back, unless someone set a count of their own since, or pacing ran in another thread."""
    import threading

    import torch

    own = torch.get_num_threads()
    if own < 2:
        pytest.skip("one core: nothing to pace")
    pacer = cpu.Pacer(frozenset({0, 1}), read=lambda: (0.0, 0.0))
    pacer.thread, pacer.most, pacer.threads = threading.get_ident(), own, 1
    pacer.thread = -1 if since == "another thread's" else pacer.thread
    cpu._pacer = pacer
    try:
        torch.set_num_threads(own + 1 if since == "someone else's count" else 1)
        theirs = torch.get_num_threads()
        cpu.cpu_done()
        assert cpu._pacer is None
        assert torch.get_num_threads() == (own if since == "paced" else theirs)
    finally:
        torch.set_num_threads(own)
