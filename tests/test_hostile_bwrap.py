"""The hostile programs again, through the bubblewrap backend (the one for users without root).

bwrap refuses root (the program would keep the host's uid 0, /proc/sys writable), so these run
as an unprivileged user: as root, :func:`test_the_bwrap_checks_pass_as_an_unprivileged_user`
runs this file again under a throwaway uid (where that uid can reach this interpreter and the
repository), and the rest is skipped. Skipped too where bubblewrap is missing or cannot create
namespaces. Left out: fork and thread bombs and many-process memory (RLIMIT_NPROC and
RLIMIT_AS hold per uid and per process only, shared with the caller's other processes), the
inode flood (bwrap cannot cap tmpfs inodes); see e1/sandbox/local.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile import (  # noqa: F401
    BOMBS,
    FORGERIES,
    HONEST_TIME_LIMIT_S,
    PEER_CHANNELS,
    PEER_SECRET,
    PRIVILEGE,
    SECRET,
    SQUARE,
    completion,
    host_services,
    leak,
    stdio,
)

from e1.rewards.scoring import Scorer
from e1.sandbox import UID_BASE, Limits, Sandbox, SandboxError, backends, isolation

LEFT_OUT = {"fork bomb", "thread bomb", "memory across processes", "inode flood"}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _bwrap(monkeypatch, request):
    if request.function is test_the_bwrap_checks_pass_as_an_unprivileged_user:
        return
    monkeypatch.setenv("E1_SANDBOX", "bwrap")
    try:
        assert isolation().mode == "bwrap"
    except SandboxError as err:
        pytest.skip(f"bwrap unavailable: {err}")


def score(programs: list[str], gold: list[dict], time_limit_s: float = 2) -> list[float]:
    with Scorer(workers=2, time_limit_s=time_limit_s) as scorer:
        return [s.reward for s in scorer.score(["code"] * len(programs), programs, [json.dumps(gold)] * len(programs))]


def test_forgeries_fail_and_honest_code_passes_under_bwrap():
    assert score([completion(code) for code in FORGERIES.values()], SQUARE, HONEST_TIME_LIMIT_S) == [0.0] * len(
        FORGERIES
    )
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
    privilege = [e for name, e in PRIVILEGE.items() if name not in LEFT_OUT]
    bombs = [code for name, code in BOMBS.items() if name not in LEFT_OUT]
    assert score([completion(leak(e)) for e in privilege], stdio("ESCAPED")) == [0.0] * len(privilege)
    assert score([completion(code) for code in bombs], stdio("ESCAPED"), time_limit_s=1) == [0.0] * len(bombs)


def test_concurrent_runs_cannot_pass_data_to_each_other_under_bwrap():
    with Sandbox(workers=2 * len(PEER_CHANNELS), limits=Limits(wall_s=10)) as box:
        runs = box.run_many(
            [(program.replace("{key}", "31337"), b"") for pair in PEER_CHANNELS.values() for program in pair]
        )
    thieves = dict(zip(PEER_CHANNELS, runs[1::2]))
    assert {name: run.stdout for name, run in thieves.items() if str(PEER_SECRET).encode() in run.stdout} == {}


def test_bwrap_reports_what_it_does_not_isolate():
    assert isolation().missing() == ["user", "tree_limits", "cpu_share"]
    assert backends.BACKEND_NAMES == ("auto", "unshare", "bwrap", "none")


@pytest.mark.skipif(os.geteuid() != 0, reason="run directly: not root")
def test_the_bwrap_checks_pass_as_an_unprivileged_user():
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="e1-bwrap-"))  # pytest's tmp_path sits under root's 0700 folder
    try:
        _rerun_as_an_unprivileged_user(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rerun_as_an_unprivileged_user(tmp_path: Path) -> None:
    uid = UID_BASE + os.getpid() % 1000
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HOME": str(tmp_path), "E1_SANDBOX": "bwrap"}
    tmp_path.chmod(0o777)
    reachable = subprocess.run(
        [*as_user, sys.executable, "-c", "import e1.sandbox, hypothesis, pytest"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    if reachable.returncode != 0:
        pytest.skip(f"uid {uid} cannot run this interpreter and repository: {reachable.stderr.strip()[-200:]}")
    ran = subprocess.run(
        [
            *as_user,
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "--basetemp",
            str(tmp_path / "basetemp"),
            str(ROOT / "tests" / "test_hostile_bwrap.py"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if "bwrap unavailable" in ran.stdout:
        pytest.skip(f"bwrap cannot run for uid {uid} here: {ran.stdout[-300:]}")
    assert ran.returncode == 0 and " passed" in ran.stdout, ran.stdout[-3000:]
