"""How an ``e1`` process's CPU threads wait: asleep, not spinning, so that e1 beside other CPU work
costs about what sharing the cores costs (docs/architecture.md, "CPU threads").

    cpu_threads()   # e1's entry point calls it first, before anything imports torch

torch runs its CPU kernels on an OpenMP team, one thread per core. Between parallel regions the
idle threads of GNU OpenMP (libgomp, what the torch wheels load) spin for 300,000 rounds before they
sleep, and LLVM/Intel OpenMP's for 200 ms: beside another busy process the spinners take the cores
its threads, and e1's own, need (``e1 demo --fast``'s SFT fell from 4 to 0.42 steps/s beside one
torch job on 2 cores). ``OMP_WAIT_POLICY=PASSIVE`` makes both runtimes put idle threads to sleep at
once. An OpenMP runtime reads its environment once, when it loads (with torch), hence here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container, MutableMapping

SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE"}
# a caller who sets any of these has said how threads wait: e1 leaves waiting to them
WAITING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")


def cpu_threads(
    environ: MutableMapping[str, str] = os.environ, modules: Container[str] = sys.modules
) -> dict[str, str]:
    """Put :data:`SETTINGS` into ``environ`` (inherited by the processes e1 starts: vLLM's, torchrun's
    ranks) and return what was set: nothing where the caller's environment already says how threads
    wait (any of :data:`WAITING`, even empty), or where torch is loaded (its OpenMP runtime has read
    the environment: a change now would only be a false record). Thread counts stay torch's
    (``OMP_NUM_THREADS``, else one per core)."""
    if "torch" in modules or any(name in environ for name in WAITING):
        return {}
    environ.update(SETTINGS)
    return dict(SETTINGS)
