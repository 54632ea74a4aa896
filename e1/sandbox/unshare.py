"""The root backend: every run in fresh namespaces under a throwaway uid, started by a fork
server (:mod:`e1.sandbox.server`) that runs in its own mount and network namespaces."""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from e1.sandbox import cgroups, seccomp
from e1.sandbox.program import (
    OPT_IN,
    PYTHON_FLAGS,
    UID_BASE,
    UID_SPAN,
    Program,
    environment,
    interpreter_paths,
    off_stdio,
    python_argv,
)
from e1.sandbox.pump import pump
from e1.sandbox.types import Isolation, Limits, RunResult, SandboxError

log = logging.getLogger("e1.sandbox")

_PROBE = "import os\nprint(os.getpid(), os.getuid())"  # PID 1 of its namespace, a throwaway uid


class UnshareBackend:
    """Root only: every run in fresh namespaces under a throwaway uid, started by a fork server."""

    name = "unshare"

    def __init__(self, fresh: bool | None = None):
        """``fresh``: exec a new interpreter for Python source too (None: ``$E1_SANDBOX_FRESH``)."""
        if os.geteuid() != 0:
            raise SandboxError("the unshare sandbox needs root", hint="run as root, or " + OPT_IN)
        self._uids = itertools.count(random.randrange(UID_SPAN))
        self.fresh = os.environ.get("E1_SANDBOX_FRESH", "") not in ("", "0") if fresh is None else fresh
        self._lock = threading.Lock()
        self._start()
        for site_packages in (False, True):
            probe = self.run(_PROBE, b"", Limits(wall_s=20), site_packages, ())
            pid, _, uid = probe.stdout.decode(errors="replace").strip().partition(" ")
            if not (probe.ok and pid == "1" and uid.isdigit() and int(uid) >= UID_BASE):
                self.close()
                raise SandboxError(
                    f"the unshare sandbox cannot run programs: {probe.stderr.decode(errors='replace')[-300:]}",
                    hint="E1_DEBUG=1 for details; or " + OPT_IN,
                )

    def _start(self) -> None:
        """Make the parent cgroups and start the fork server (again, if it died)."""
        tree, self._cgroups = cgroups.make_parents(f"e1-sandbox-{os.getpid()}-{random.randrange(1 << 30):x}")
        self.isolation = Isolation(
            "unshare",
            network=True,
            processes=True,
            user=True,
            filesystem=True,
            tree_limits=tree,
            cpu_share=cgroups.has_cpu_share(self._cgroups),
        )
        self._broken = False
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
        self._controls = [ours for ours, _ in pairs]  # [plain runs, runs with site-packages]
        theirs = off_stdio([theirs.detach() for _, theirs in pairs])
        config = {
            "control_fds": theirs,
            "interpreter_paths": interpreter_paths(),
            "seccomp": seccomp.filter_program().hex(),
            "cgroups": [[path, files] for path, files in self._cgroups],
        }
        try:
            self._server = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, str(Path(__file__).with_name("server.py")), json.dumps(config)],
                pass_fds=theirs,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=environment("/tmp", 0),  # its flags and environment are a run's: runs start as forks of it
            )
        finally:
            for fd in theirs:
                os.close(fd)
        answers = [_answer(control) for control in self._controls]
        if answers != [b"ready", b"ready"]:
            self.close()
            failure = next(answer for answer in answers if answer != b"ready")
            raise SandboxError(
                f"the unshare sandbox cannot start: {failure.decode(errors='replace')[:300]}",
                hint="it needs root with CAP_SYS_ADMIN (not a default container); or " + OPT_IN,
            )

    def run(self, program: Program, stdin: bytes, limits: Limits, site_packages: bool, fds: Sequence[int]) -> RunResult:
        """One run; a failure of the machinery (no fds left, a killed fork server, a run that
        could not start) is this run's failed result (returncode 127, the reason on stderr)."""
        start = time.monotonic()
        try:
            with self._lock:
                if self._broken or self._server.poll() is not None:  # killed: later runs get a new one
                    log.warning("e1 sandbox: the fork server died (%s); starting a new one", self._server.returncode)
                    self.close()
                    self._start()
            return self._run(program, stdin, limits, site_packages, fds, start)
        except (OSError, ValueError, SandboxError) as err:
            return RunResult(
                127,
                b"",
                f"e1 sandbox: the run could not be started: {err}\n".encode(),
                timed_out=False,
                killed_reason=None,
                wall_s=time.monotonic() - start,
                isolation=self.isolation,
            )

    def _run(
        self, program: Program, stdin: bytes, limits: Limits, site_packages: bool, fds: Sequence[int], start: float
    ) -> RunResult:
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
            "limits": {
                "memory_bytes": limits.memory_bytes,
                "processes": limits.processes,
                "zero": 0,
                "scratch_bytes": limits.scratch_bytes,
                "scratch_inodes": limits.scratch_inodes,
                **cgroups.cpu_limits(limits.cpus),
            },
        }
        theirs_fds = [
            theirs.fileno(),
            pipes[0][0],
            pipes[1][1],
            pipes[2][1],
            source if source >= 0 else pipes[0][0],
            *fds,
        ]
        try:
            with self._lock:  # Python source with site-packages goes to the flavour that loaded them
                control = self._controls[isinstance(program, str) and site_packages]
                try:
                    socket.send_fds(control, [json.dumps(request).encode()], theirs_fds)
                except OSError:
                    self._broken = True  # a flavour of it died: the next run starts a whole new one
                    raise
        finally:
            theirs.close()
            for fd in {pipes[0][0], pipes[1][1], pipes[2][1], source, *fds} - {-1}:
                os.close(fd)
        return self._follow(ours, pipes, stdin, limits, start)

    def _follow(self, ours: socket.socket, pipes, stdin: bytes, limits: Limits, start: float) -> RunResult:
        with ours:
            ours.settimeout(20)
            message, pidfds = b"", []
            try:
                message, pidfds, _, _ = socket.recv_fds(ours, 4096, 1)
            finally:
                if not pidfds:
                    for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                        os.close(fd)
            if not pidfds:
                raise SandboxError(json.loads(message or b'{"error": "the fork server did not answer"}').get("error"))
            pidfd = pidfds[0]
            try:
                stdout, stderr, reason = pump(
                    pipes[0][1], pipes[1][0], pipes[2][0], stdin, start + limits.wall_s, limits.output_bytes, None
                )
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
        return RunResult(
            returncode,
            stdout,
            stderr,
            timed_out=reason == "timeout",
            killed_reason=reason,
            wall_s=time.monotonic() - start,
            isolation=self.isolation,
        )

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
