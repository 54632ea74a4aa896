"""What every backend runs: the program, its interpreter's argv and paths, its environment.

    >>> environment("/tmp", 0)["HOME"]
    '/tmp'
    >>> python_argv(site_packages=False)[1:]
    ['-S', '-B', 'main.py']
"""

from __future__ import annotations

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
