"""What every backend runs: the program, its interpreter's argv and paths, its environment.

>>> environment("/tmp", 0)["HOME"]
'/tmp'
>>> python_argv(site_packages=False)[1:]
['-S', '-B', 'main.py']
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Sequence

from e1.sandbox.types import SandboxError

UID_BASE = 2_000_000_000  # throwaway uids UID_BASE .. UID_BASE + UID_SPAN - 1: never real accounts
UID_SPAN = 1_000_000
PYTHON_FLAGS = ("-S", "-B")  # no site-packages (fast start, stdlib only), no .pyc files
SITE_FLAGS = ("-s", "-B")  # site-packages on, still no user site
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
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


def fill_stdio() -> None:
    """Open /dev/null on whichever of fds 0, 1, 2 is closed (as some service managers and
    ``close_fds`` parents start a process), so that no pipe, socket or memfd the sandbox makes
    later is numbered 0-2: handed to a child, the child's own standard streams would be set up
    over it. Every backend calls this when it starts; :func:`off_stdio` moves fds made before."""
    for fd in range(3):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # a lower one was closed too and is filled first: the loop reaches this one
                os.dup2(null, fd)
                os.close(null)


def off_stdio(fds: Sequence[int]) -> list[int]:
    """``fds`` (taken over), each moved to a number >= 3 if it sat on 0, 1 or 2, where /dev/null
    takes its place (see :func:`fill_stdio`)."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) if fd < 3 else fd for fd in fds]
    for fd in set(fds) & {0, 1, 2}:
        os.close(fd)
    fill_stdio()
    return moved


def python_argv(site_packages: bool) -> list[str]:
    return [sys.executable, *(SITE_FLAGS if site_packages else PYTHON_FLAGS), "main.py"]


def check_program(program: Program) -> None:
    if not isinstance(program, str) and not (program and all(isinstance(arg, str) for arg in program)):
        raise SandboxError(f"cannot run {program!r:.80}", hint="give Python source or an argv list of strings")


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
