"""Sandbox backends: how runs are confined. One instance per backend per process.

``unshare`` (root): a fork server in its own namespaces starts every run (see
:mod:`e1.sandbox.server`). ``bwrap`` (anyone, where user namespaces are allowed) and ``none``
(the explicit opt-out) are in :mod:`e1.sandbox.local`. ``auto`` is ``unshare`` for root and
``bwrap`` otherwise; each raises :class:`SandboxError` naming what is missing rather than
running model code unconfined.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from e1.sandbox import cgroups
from e1.sandbox.pump import pump
from e1.sandbox.types import Isolation, Limits, RunResult, SandboxError

log = logging.getLogger("e1.sandbox")

UID_BASE = 2_000_000_000  # throwaway uids UID_BASE .. UID_BASE + UID_SPAN - 1: never real accounts
UID_SPAN = 1_000_000
PYTHON_FLAGS = ("-S", "-B")  # no site-packages (fast start, stdlib only), no .pyc files
SITE_FLAGS = ("-s", "-B")  # site-packages on, still no user site
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BACKEND_NAMES = ("auto", "unshare", "bwrap", "none")
OPT_IN = "E1_SANDBOX=none (or --sandbox none) runs model code unconfined"
Program = str | Sequence[str]


def find_tool(name: str) -> str | None:
    """``name`` on PATH or in the standard system directories (PATH may be trimmed)."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))


def environment(home: str, extra_fds: int, first_fd: int = 3) -> dict[str, str]:
    """The whole environment of a run: nothing inherited. ``E1_FDS`` names extra fds."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONSAFEPATH": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    if extra_fds:
        env["E1_FDS"] = " ".join(str(first_fd + i) for i in range(extra_fds))
    return env


def python_argv(site_packages: bool) -> list[str]:
    return [sys.executable, *(SITE_FLAGS if site_packages else PYTHON_FLAGS), "main.py"]


def check_program(program: Program) -> None:
    if not isinstance(program, str) and not (program and all(isinstance(arg, str) for arg in program)):
        raise SandboxError(f"cannot run {program!r:.80}", hint="give Python source or an argv list of strings")


_PROBE = "import os\nprint(os.getpid(), os.getuid())"  # PID 1 of its namespace, a throwaway uid


class UnshareBackend:
    """Root only: every run in fresh namespaces under a throwaway uid, started by a fork server."""

    name = "unshare"

    def __init__(self, fresh: bool | None = None):
        """``fresh``: exec a new interpreter for Python source too (None: ``$E1_SANDBOX_FRESH``)."""
        if os.geteuid() != 0:
            raise SandboxError("the unshare sandbox needs root", hint="run as root, or " + OPT_IN)
        tree, self._cgroups = cgroups.make_parents(f"e1-sandbox-{os.getpid()}-{random.randrange(1 << 30):x}")
        self.isolation = Isolation("unshare", network=True, processes=True, user=True, filesystem=True,
                                   tree_limits=tree)
        self._uids = itertools.count(random.randrange(UID_SPAN))
        self.fresh = os.environ.get("E1_SANDBOX_FRESH", "") not in ("", "0") if fresh is None else fresh
        self._lock = threading.Lock()
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
        self._controls = [ours for ours, _ in pairs]  # [plain runs, runs with site-packages]
        config = {"control_fds": [theirs.fileno() for _, theirs in pairs], "interpreter_paths": interpreter_paths(),
                  "cgroups": [[path, files] for path, files in self._cgroups]}
        self._server = subprocess.Popen(
            [sys.executable, *PYTHON_FLAGS, str(Path(__file__).with_name("server.py")), json.dumps(config)],
            pass_fds=[theirs.fileno() for _, theirs in pairs], stdin=subprocess.DEVNULL, start_new_session=True,
            env=environment("/tmp", 0),  # its flags and environment are a run's: runs start as forks of it
        )
        for _, theirs in pairs:
            theirs.close()
        answers = [_answer(control) for control in self._controls]
        if answers != [b"ready", b"ready"]:
            self.close()
            failure = next(answer for answer in answers if answer != b"ready")
            raise SandboxError(f"the unshare sandbox cannot start: {failure.decode(errors='replace')[:300]}",
                               hint="it needs root with CAP_SYS_ADMIN (not a default container); or " + OPT_IN)
        for site_packages in (False, True):
            probe = self.run(_PROBE, b"", Limits(wall_s=20), site_packages, ())
            pid, _, uid = probe.stdout.decode(errors="replace").strip().partition(" ")
            if not (probe.ok and pid == "1" and uid.isdigit() and int(uid) >= UID_BASE):
                self.close()
                raise SandboxError(f"the unshare sandbox cannot run programs: {probe.stderr.decode(errors='replace')[-300:]}",
                                   hint="E1_DEBUG=1 for details; or " + OPT_IN)

    def run(self, program: Program, stdin: bytes, limits: Limits, site_packages: bool, fds: Sequence[int]) -> RunResult:
        if self._server.poll() is not None:
            raise SandboxError("the sandbox's fork server has exited", hint="was it killed? restart the process")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        source = os.memfd_create("main.py") if isinstance(program, str) else -1
        if isinstance(program, str):
            os.write(source, program.encode("utf-8", errors="surrogateescape"))
            os.lseek(source, 0, os.SEEK_SET)
        request = {
            "uid": UID_BASE + next(self._uids) % UID_SPAN,
            "argv": python_argv(site_packages) if isinstance(program, str) else list(program),
            "env": environment("/tmp", len(fds)),
            "source": isinstance(program, str),
            "fresh": self.fresh,
            "rlimits": limits.rlimits(),
            "limits": {"memory_bytes": limits.memory_bytes, "processes": limits.processes, "zero": 0,
                       "scratch_bytes": limits.scratch_bytes, "scratch_inodes": limits.scratch_inodes},
        }
        theirs_fds = [theirs.fileno(), pipes[0][0], pipes[1][1], pipes[2][1], source if source >= 0 else pipes[0][0], *fds]
        start = time.monotonic()
        try:
            with self._lock:  # Python source with site-packages goes to the flavour that loaded them
                control = self._controls[isinstance(program, str) and site_packages]
                socket.send_fds(control, [json.dumps(request).encode()], theirs_fds)
        finally:
            theirs.close()
            for fd in {pipes[0][0], pipes[1][1], pipes[2][1], source, *fds} - {-1}:
                os.close(fd)
        return self._follow(ours, pipes, stdin, limits, start)

    def _follow(self, ours: socket.socket, pipes, stdin: bytes, limits: Limits, start: float) -> RunResult:
        with ours:
            ours.settimeout(20)
            _, pidfds, _, _ = socket.recv_fds(ours, 64, 1)
            if not pidfds:
                for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                    os.close(fd)
                raise SandboxError("the sandbox could not start a run", hint="see the fork server's stderr")
            pidfd = pidfds[0]
            try:
                stdout, stderr, reason = pump(pipes[0][1], pipes[1][0], pipes[2][0], stdin,
                                              start + limits.wall_s, limits.output_bytes, None)
                if reason is None:
                    reason = _wait_readable(ours, start + limits.wall_s)
                if reason is not None:
                    try:
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    except ProcessLookupError:
                        pass  # it exited (e.g. on the closed pipe) before the kill: nothing left to stop
            finally:
                os.close(pidfd)
            ours.settimeout(20)
            status = json.loads(ours.recv(4096) or b'{"returncode": 127, "error": "no status"}')
        if "error" in status:
            stderr += f"\ne1 sandbox: {status['error']}\n".encode()
        returncode = status["returncode"]
        if reason is None and returncode == -signal.SIGKILL and status.get("oom"):
            reason = "memory limit"
        return RunResult(returncode, stdout, stderr, timed_out=reason == "timeout", killed_reason=reason,
                         wall_s=time.monotonic() - start, isolation=self.isolation)

    def close(self) -> None:
        for control in self._controls:
            control.close()  # the server sees EOF and exits; its runs die with it
        try:
            self._server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        cgroups.remove_parents(self._cgroups)


def _answer(control: socket.socket) -> bytes:
    """The fork server's first word on ``control``: b"ready", or why it could not start."""
    control.settimeout(20)
    try:
        return control.recv(4096)
    except OSError as err:
        return repr(err).encode()
    finally:
        control.settimeout(None)


def _wait_readable(sock: socket.socket, deadline: float) -> str | None:
    """Wait for the exit status after the pipes closed; "timeout" if it does not come in time."""
    import select

    ready, _, _ = select.select([sock], [], [], max(deadline - time.monotonic(), 0))
    return None if ready else "timeout"


_INSTANCES: dict[str, object] = {}
_LOCK = threading.Lock()


def get_backend(name: str | None = None):
    """The running backend called ``name`` (None: ``$E1_SANDBOX``, default "auto"), started once."""
    name = name or os.environ.get("E1_SANDBOX") or "auto"
    if name not in BACKEND_NAMES:
        raise SandboxError(f"unknown sandbox backend {name!r}", hint=f"one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        name = "unshare" if os.geteuid() == 0 else "bwrap"
    with _LOCK:
        if name not in _INSTANCES:
            backend = _classes()[name]()
            atexit.register(backend.close)
            _INSTANCES[name] = backend
        return _INSTANCES[name]


def _classes() -> dict[str, type]:
    from e1.sandbox.local import BwrapBackend, NoneBackend

    return {"unshare": UnshareBackend, "bwrap": BwrapBackend, "none": NoneBackend}


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing, data loaders) starts its own backends when it needs them."""
    global _LOCK
    _INSTANCES.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def interpreter_paths() -> list[str]:
    """Directories a sandboxed ``sys.executable`` needs: its install, venv and site-packages."""
    import site
    import sysconfig

    candidates = {
        os.path.dirname(os.path.realpath(sys.executable)),
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        sysconfig.get_path("stdlib"),
        *site.getsitepackages(),
    }
    return sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
