"""Sandbox overhead and throughput, measured side by side in one run.

    python benchmarks/sandbox.py [--n 50 --workers 2 --repeats 3 --site]

(a) Per-run overhead: the same trivial program (``pass`` in ``main.py``) through
    ``run_sandboxed`` vs a bare ``subprocess.run`` of the same interpreter with the same flags
    on the same file, alternating one of each, ``--n`` of each; prints medians and the ratio
    (goal <= 1.15x). The flags are the sandbox's: ``python -S -B main.py`` (no site-packages,
    no .pyc), or ``-s -B`` with ``--site`` (site-packages on, as ``Sandbox(site_packages=True)``).
    The root (unshare) backend runs Python source in a fork of an interpreter started once;
    its row with ``E1_SANDBOX_FRESH=1`` (exec a new interpreter per run) is measured in the
    same alternation, so the cost of the isolation alone is visible too.
(b) Throughput: ``--n`` runs through ``Sandbox(workers=1)`` and ``Sandbox(workers=W)``, and
    the same for bare subprocesses from W threads, best of ``--repeats``; prints runs per
    second and speed-ups. Both are bounded by free CPU cores: every run is a Python start-up.
"""

from __future__ import annotations

import argparse
import atexit
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from e1.sandbox import PYTHON_FLAGS, Limits, Sandbox, isolation, run_sandboxed

PROGRAM = "pass\n"
LIMITS = Limits(wall_s=10)


def bare_runner(directory: str, site: bool):
    argv = [sys.executable, *(("-s", "-B") if site else PYTHON_FLAGS), "main.py"]
    Path(directory, "main.py").write_text(PROGRAM)
    return lambda _=None: subprocess.run(argv, cwd=directory, capture_output=True, stdin=subprocess.DEVNULL, check=True)


def overhead(n: int, site: bool) -> dict[str, float]:
    """Median seconds per run of each way of running the program, alternated run by run."""
    runners = {"bare subprocess": None, "sandboxed": lambda: run_sandboxed(PROGRAM, b"", LIMITS, site_packages=site)}
    if isolation().mode == "unshare":
        fresh = fresh_backend()
        runners["sandboxed, fresh"] = lambda: fresh.run(PROGRAM, b"", LIMITS, site, ())
    times: dict[str, list[float]] = {name: [] for name in runners}
    with tempfile.TemporaryDirectory() as directory:
        runners["bare subprocess"] = bare_runner(directory, site)
        for _ in range(n):
            for name, run in runners.items():
                start = time.perf_counter()
                result = run()
                times[name].append(time.perf_counter() - start)
                assert getattr(result, "ok", True), result
    return {name: statistics.median(values) for name, values in times.items()}


def fresh_backend():
    """An unshare backend that execs a new interpreter for every run (``E1_SANDBOX_FRESH=1``)."""
    from e1.sandbox.unshare import UnshareBackend

    backend = UnshareBackend(fresh=True)
    atexit.register(backend.close)
    return backend


def best_rate(n: int, repeats: int, run_all) -> float:
    """Runs per second of ``run_all()`` (which does ``n`` runs), best of ``repeats``."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run_all()
        best = max(best, n / (time.perf_counter() - start))
    return best


def sandbox_rate(n: int, workers: int, repeats: int, site: bool) -> float:
    with Sandbox(workers=workers, limits=LIMITS, site_packages=site) as box:
        return best_rate(n, repeats, lambda: all(r.ok for r in box.run_many([(PROGRAM, b"")] * n)) or 1 / 0)


def bare_rate(n: int, workers: int, repeats: int, site: bool) -> float:
    with tempfile.TemporaryDirectory() as directory, ThreadPoolExecutor(workers) as pool:
        run_bare = bare_runner(directory, site)
        return best_rate(n, repeats, lambda: list(pool.map(run_bare, range(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50, help="runs per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="throughput: best of this many")
    parser.add_argument("--site", action="store_true", help="site-packages on (-s -B instead of -S -B)")
    args = parser.parse_args()

    mode = isolation()  # probe (and start the namespace holder) before timing anything
    print(f"isolation: mode={mode.mode} missing={mode.missing() or 'nothing'}")
    run_sandboxed(PROGRAM, site_packages=args.site)  # warm caches
    flags = " ".join(("-s", "-B") if args.site else PYTHON_FLAGS)
    medians = overhead(args.n, args.site)
    bare = medians["bare subprocess"]
    print(f"(a) per run, median of {args.n}, each `python {flags} main.py`:")
    for name, seconds in medians.items():
        ratio = "" if name == "bare subprocess" else f"   ratio {seconds / bare:.2f}x"
        print(f"    {name:<18} {seconds * 1e3:7.2f} ms{ratio}" + ("  (goal <= 1.15x)" if name == "sandboxed" else ""))
    w = args.workers
    box_one, box_many = (sandbox_rate(args.n, k, args.repeats, args.site) for k in (1, w))
    bare_one, bare_many = (bare_rate(args.n, k, args.repeats, args.site) for k in (1, w))
    print(f"(b) throughput, {args.n} runs, best of {args.repeats}:")
    print(
        f"    sandboxed workers=1 {box_one:7.1f} runs/s, workers={w} {box_many:7.1f} runs/s: {box_many / box_one:.2f}x"
    )
    print(
        f"    bare      threads=1 {bare_one:7.1f} runs/s, threads={w} {bare_many:7.1f} runs/s: {bare_many / bare_one:.2f}x"
    )
    print(f"    time per run at {w}, sandboxed / bare: {bare_many / box_many:.2f}x")


if __name__ == "__main__":
    main()
