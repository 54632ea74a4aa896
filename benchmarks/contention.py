"""e1's CPU stages alone and beside other work: torch's default threading (old) vs e1's settings (new),
side by side in one run.

    python benchmarks/contention.py [--seconds 2.5 --rounds 1]

Sized for at most 3 minutes on 2 quiet cores (an estimate: it was built on 2 cores that ~10 other busy
processes shared, where one run took 8-13 minutes and its figures were mostly that load's).

Goal, per stage: new beside / new alone >= 0.4 (two processes on two cores should cost about 2x,
not 10x), and new alone / old alone >= 0.95 (e1's settings cost at most 5% on a quiet machine).

What runs, and how:

- **Stages** (the CPU work of ``e1 demo``, at its sizes): ``sft`` — SFT steps of the demo's tiny
  model (hidden 128, 3 layers, 64 digit-sum traces per step, ``Trainer.step``); ``grpo`` — GRPO
  steps (4 prompts x 8 samples in elastic mode at t = 24, s = 2, then the update), and ``grpo
  update`` — the same steps' ``update`` phase alone (steps per second of ``update_s``); ``decode`` —
  the transformers engine decoding 64 prompts in elastic mode (t = 48, s = 2). Each stage is warmed
  up by one step, then stepped for ``--seconds`` (at least one step; where the warm-up alone took
  longer, it is the measurement); the rate is steps per second.
- **Settings.** Each measurement is a fresh process, since the OpenMP runtime reads its
  environment once, when torch loads. *old*: nothing set (torch's defaults: one OpenMP thread per
  core, libgomp's spin-then-sleep wait). *new*: :func:`e1.cpu.cpu_threads` first (pacing on), exactly
  as the ``e1`` command calls it before anything imports torch. Thread variables of the caller's
  environment (OMP_*, GOMP_*, KMP_*, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) are dropped for every
  child, so *old* is torch's defaults whatever the shell holds.
- **Beside.** A second process multiplies 512 x 512 matrices in a loop with default torch
  threads and the caller's environment less those variables (a CPU-bound torch job that knows
  nothing of e1); it starts before the measured process and is stopped after it.
- **Order.** Per round: old alone, new alone, old beside, new beside. ``--rounds`` > 1 repeats
  them and keeps each cell's best rate. Nothing else should run: on a shared machine the figures
  drift (run it under ``nice`` and read the ratios with that in mind).

Prints steps/s per stage and cell, and the ratios beside/alone (old and new) and new alone/old alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("sft", "grpo", "grpo update", "decode")
THREAD_VARIABLES = ("OMP_", "GOMP_", "KMP_", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_env() -> dict[str, str]:
    """The caller's environment less every thread setting: torch's defaults in the child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(THREAD_VARIABLES)}
    return env | {"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


# ---- the process beside ---------------------------------------------------------------------


def hog() -> None:
    """A CPU-bound torch job with default threads: matmuls until killed."""
    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    print("ready", flush=True)
    while True:
        a = torch.tanh(a @ b)


def start_hog() -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, __file__, "--hog"], env=child_env(), stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready", "the process beside did not start"
    return process


# ---- the measured process -------------------------------------------------------------------


def prepare(folder: Path) -> None:
    """The demo's initial model and its training data, built once for every measurement."""
    from e1.data import ALPHABET, prepare_benchmark
    from e1.demo import DemoConfig
    from e1.models import build_char_tokenizer, build_tiny_model

    demo = DemoConfig()
    build_tiny_model(
        folder / "model",
        tokenizer=build_char_tokenizer(ALPHABET),
        seed=0,
        hidden_size=demo.hidden_size,
        layers=demo.layers,
        heads=demo.heads,
        kv_heads=demo.heads,
        intermediate_size=4 * demo.hidden_size,
        max_positions=256,
    )
    prepare_benchmark("digits-train", folder / "data", options={"seed": "0", "rows": "512"})


def trainer(folder: Path, out: Path, **settings):
    from e1.grpo.config_file import build_config
    from e1.grpo.trainer import Trainer

    never = 10**9  # no checkpoint, no validation
    return Trainer.create(
        build_config(
            model=str(folder / "model"),
            data="digits-train",
            data_dir=folder / "data",
            out=out,
            steps=never,
            save_every=never,
            eval_every=never,
            seed=0,
            weight_decay=0.0,
            **settings,
        )
    )


def stages(folder: Path, out: Path) -> tuple[dict, list[float]]:
    """Each stage's step function, built (weights loaded) before any is timed, and the list where
    GRPO steps leave their update phase's seconds."""
    from e1.budget import Budget
    from e1.engine import Mode, Sampling

    sft = trainer(
        folder,
        out / "sft",
        algo="sft",
        think=0,
        solve=1,
        prompts_per_step=64,
        mini_batch_prompts=64,
        micro_batch=64,
        lr=3e-3,
    )
    grpo = trainer(
        folder,
        out / "grpo",
        think=24,
        solve=2,
        prompts_per_step=4,
        samples_per_prompt=8,
        mini_batch_prompts=2,
        micro_batch=16,
        lr=1e-4,
        kl_coef=0.0,
        batch_size=32,
    )
    engine, prompts = grpo.engine, [grpo.problems["problem"].iloc[i] for i in range(64)]
    from e1.data import build_prompt

    texts = [build_prompt(grpo.tokenizer, problem) for problem in prompts]
    sampling = Sampling(temperature=1.0, seed=0, max_tokens=64)
    decode = lambda: engine.generate(texts, Budget(48, 2), Mode("elastic"), sampling)  # noqa: E731
    updates: list[float] = []
    grpo_step = lambda: updates.append(grpo.step()["update_s"])  # noqa: E731
    return {"sft": sft.step, "grpo": grpo_step, "decode": decode}, updates


def rate(step, seconds: float) -> float:
    started = time.perf_counter()
    step()  # warm-up
    if time.perf_counter() - started > seconds:  # too slow to afford more: the warm-up is the measurement
        return 1 / (time.perf_counter() - started)
    count, started = 0, time.perf_counter()
    while count < 1 or time.perf_counter() - started < seconds:
        step()
        count += 1
    return count / (time.perf_counter() - started)


def worker(settings: str, folder: Path, out: Path, seconds: float) -> None:
    if settings == "new":
        sys.path.insert(0, str(ROOT))
        from e1.cpu import cpu_threads

        cpu_threads()
    import torch

    from e1.report.ui import quiet_libraries

    quiet_libraries()
    steps, updates = stages(folder, out)
    rates = {name: rate(step, seconds) for name, step in steps.items()}
    timed = updates[1:] or updates  # past the warm-up step, if it was not the measurement
    rates["grpo update"] = len(timed) / sum(timed)
    print(
        json.dumps(
            {"rates": rates, "threads": torch.get_num_threads(), "wait_policy": os.environ.get("OMP_WAIT_POLICY")}
        ),
        flush=True,
    )


def measure(settings: str, beside: bool, folder: Path, seconds: float, tag: str) -> dict:
    other = start_hog() if beside else None
    try:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                settings,
                "--folder",
                str(folder),
                "--out",
                str(folder / "runs" / tag),
                "--seconds",
                str(seconds),
            ],
            env=child_env(),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        if other is not None:
            other.kill()
            other.wait()
    if done.returncode != 0:
        raise SystemExit(f"{tag} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the report -----------------------------------------------------------------------------


def report(cells: dict[tuple[str, str], dict]) -> None:
    first = cells["new", "alone"]
    print(
        f"new settings: torch threads {first['threads']}, OMP_WAIT_POLICY {first['wait_policy']}; "
        f"old: torch threads {cells['old', 'alone']['threads']}, OMP_WAIT_POLICY unset"
    )
    head = ("stage", "old alone", "old beside", "new alone", "new beside", "old b/a", "new b/a", "new/old alone")
    print(" ".join(f"{h:>13}" for h in head) + "   (steps/s; goal: new b/a >= 0.40, new/old alone >= 0.95)")
    for stage in STAGES:
        r = {key: cell["rates"][stage] for key, cell in cells.items()}
        row = (
            r["old", "alone"],
            r["old", "beside"],
            r["new", "alone"],
            r["new", "beside"],
            r["old", "beside"] / r["old", "alone"],
            r["new", "beside"] / r["new", "alone"],
            r["new", "alone"] / r["old", "alone"],
        )
        print(f"{stage:>13} " + " ".join(f"{value:>13.3f}" for value in row))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.5, help="timed seconds per stage and cell")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every cell, keep the best rate")
    parser.add_argument("--hog", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("old", "new"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.hog:
        return hog()
    if args.worker:
        return worker(args.worker, args.folder, args.out, args.seconds)
    cells: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepare(folder)
        for round_ in range(args.rounds):
            for beside in (False, True):
                for settings in ("old", "new"):
                    where = "beside" if beside else "alone"
                    cell = measure(settings, beside, folder, args.seconds, f"{settings}-{where}-{round_}")
                    print(
                        f"round {round_ + 1}, {settings} {where}: "
                        + ", ".join(f"{k} {v:.3f}/s" for k, v in cell["rates"].items()),
                        flush=True,
                    )
                    best = cells.setdefault((settings, where), cell)
                    best["rates"] = {k: max(v, cell["rates"][k]) for k, v in best["rates"].items()}
    report(cells)


if __name__ == "__main__":
    main()
