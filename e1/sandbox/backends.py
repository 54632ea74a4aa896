"""Sandbox backends: how runs are confined. One instance per backend per process.

``unshare`` (root): a fork server in its own namespaces starts every run (see
:mod:`e1.sandbox.unshare` and :mod:`e1.sandbox.server`). ``bwrap`` (anyone, where user
namespaces are allowed) and ``none`` (the explicit opt-out) are in :mod:`e1.sandbox.local`.
``auto`` is ``unshare`` for root and ``bwrap`` otherwise; each raises :class:`SandboxError`
naming what is missing rather than running model code unconfined.
"""

from __future__ import annotations

import atexit
import os
import threading

from e1.errors import did_you_mean
from e1.sandbox.local import BwrapBackend, NoneBackend
from e1.sandbox.program import fill_stdio
from e1.sandbox.types import SandboxError
from e1.sandbox.unshare import UnshareBackend

BACKEND_NAMES = ("auto", "unshare", "bwrap", "none")

_INSTANCES: dict[str, object] = {}
_LOCK = threading.Lock()


def backend_name(name: str | None = None) -> str:
    """The backend ``name`` names (None: ``$E1_SANDBOX``, default "auto"), checked: configs call
    this when they are built, so a typo is refused whatever the data, before anything loads."""
    given = name or os.environ.get("E1_SANDBOX") or "auto"
    if given not in BACKEND_NAMES:
        # the CLI reads $E1_SANDBOX into --sandbox: name both when they agree
        source = (
            "E1_SANDBOX"
            if not name
            else "--sandbox (E1_SANDBOX)"
            if name == os.environ.get("E1_SANDBOX")
            else "--sandbox"
        )
        raise SandboxError(
            f"{source} {given!r}: unknown sandbox backend",
            hint=did_you_mean(given, BACKEND_NAMES, listing="use one of"),
        )
    return given


def get_backend(name: str | None = None):
    """The running backend called ``name`` (None: ``$E1_SANDBOX``, default "auto"), started once."""
    name = backend_name(name)
    if name == "auto":
        name = "unshare" if os.geteuid() == 0 else "bwrap"
    with _LOCK:
        if name not in _INSTANCES:
            fill_stdio()
            backend = _classes()[name]()
            atexit.register(backend.close)
            _INSTANCES[name] = backend
        return _INSTANCES[name]


def _classes() -> dict[str, type]:
    return {"unshare": UnshareBackend, "bwrap": BwrapBackend, "none": NoneBackend}


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing, data loaders) starts its own backends when it needs them,
    and lets go of its copies of ours: a fork server stops (and cleans up) when the control
    sockets' last holder is gone, which must be this process, not a child outliving it."""
    global _LOCK
    for backend in _INSTANCES.values():
        for control in getattr(backend, "_controls", ()):
            control.close()
    _INSTANCES.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
