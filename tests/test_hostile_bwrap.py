"""The hostile programs again, through the bubblewrap backend (the one for users without root).

Skipped where bubblewrap is missing or cannot create namespaces. These tests run as root, for
which the kernel applies no RLIMIT_NPROC and bwrap has no cgroup: fork, thread and
many-process memory bombs are left out here (see e1/sandbox/local.py), and so is "become
root" (uid 0 of its own user namespace is the caller's uid, here root, with no capabilities).
"""

from __future__ import annotations

import json

import pytest
from test_hostile import (  # noqa: F401
    BOMBS, FORGERIES, HONEST_TIME_LIMIT_S, PRIVILEGE, SECRET, SQUARE, completion, host_services, leak, stdio,
)

from e1.rewards.scoring import Scorer
from e1.sandbox import SandboxError, backends, isolation

UNSAFE_AS_ROOT = {"fork bomb", "thread bomb", "memory across processes", "inode flood", "become root"}


@pytest.fixture(autouse=True)
def _bwrap(monkeypatch):
    monkeypatch.setenv("E1_SANDBOX", "bwrap")
    try:
        assert isolation().mode == "bwrap"
    except SandboxError as err:
        pytest.skip(f"bwrap unavailable: {err}")


def score(programs: list[str], gold: list[dict], time_limit_s: float = 2) -> list[float]:
    with Scorer(workers=2, time_limit_s=time_limit_s) as scorer:
        return [s.reward for s in scorer.score(["code"] * len(programs), programs, [json.dumps(gold)] * len(programs))]


def test_forgeries_fail_and_honest_code_passes_under_bwrap():
    assert score([completion(code) for code in FORGERIES.values()], SQUARE, HONEST_TIME_LIMIT_S) == [0.0] * len(FORGERIES)
    assert score([completion("def square(x):\n    return x * x")], SQUARE, HONEST_TIME_LIMIT_S) == [1.0]


def test_secrets_and_ipc_are_out_of_reach_under_bwrap(host_services):
    services, contacted = host_services
    attempts = [f"open({path!r}).read()" for path in services["files"]] + [
        "os.environ['E1_HOSTILE_SECRET']",
        f"(lambda s: (s.settimeout(1), s.connect({services['unix']!r}), s.recv(100).decode().strip())[2])(socket.socket(socket.AF_UNIX))",
        f"(lambda s: (s.settimeout(1), s.connect({services['abstract']!r}), s.recv(100).decode().strip())[2])(socket.socket(socket.AF_UNIX))",
        f"(lambda s: (s.settimeout(1), s.connect(('127.0.0.1', {services['tcp_port']})), s.recv(100).decode().strip())[2])(socket.socket())",
    ]
    assert score([completion(leak(a)) for a in attempts], stdio(SECRET)) == [0.0] * len(attempts)
    assert contacted == []


def test_privilege_and_bombs_are_contained_under_bwrap():
    privilege = [e for name, e in PRIVILEGE.items() if name not in UNSAFE_AS_ROOT]
    bombs = [code for name, code in BOMBS.items() if name not in UNSAFE_AS_ROOT]
    assert score([completion(leak(e)) for e in privilege], stdio("ESCAPED")) == [0.0] * len(privilege)
    assert score([completion(code) for code in bombs], stdio("ESCAPED"), time_limit_s=1) == [0.0] * len(bombs)


def test_bwrap_reports_what_it_does_not_isolate():
    assert isolation().missing() == ["user", "tree_limits"]
    assert backends.BACKEND_NAMES == ("auto", "unshare", "bwrap", "none")
