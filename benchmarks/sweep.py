"""Shared-prefix sweeps vs independent ones: tokens decoded and wall time, side by side in one run.

    python benchmarks/sweep.py [--backend both|hf|vllm --problems 8 --n 4 --think 64,128,192,256 --solve 64]

The paper's grid shape on one batch: elastic at 4 think budgets t (solve s), truncate at the
same totals t + s, and none (capped at the largest total, so it is a cell of the same scale).
Both paths are e1's own generation step of a sweep (``e1.eval.generation._generate_batch`` with
``share_prefixes`` on or off), on the same engine, problems, seed and sampling (temperature 1);
runs take turns and the best of ``--repeats`` is kept. A random tiny model practically never
ends thinking by itself, so every elastic row is forced at t: the least a shared sweep can save
(a real model that ends early also shares its solutions). "Tokens decoded" counts every id
that went through a decode step (forced ones included), not the ids a row took from a root.
Goal: shared ≤ 0.4× the tokens and ≤ 0.5× the time of independent.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best  # noqa: E402


class Counting:
    """An engine that counts the ids it decoded (a followed prefix's ids are not decoded)."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.markers, self.decoded = engine, engine.tokenizer, engine.markers, 0

    def generate(self, *args, **kw):
        completions = self.engine.generate(*args, **kw)
        self.decoded += sum(len(c.token_ids) - c.prefix_tokens for c in completions)
        return completions


def grid_batch(args):
    """(mode, budget, problem) for the whole grid, as a sweep's batch lists them."""
    import pandas as pd

    from e1.budget import Budget
    from e1.engine.base import Mode

    frame = pd.DataFrame(
        [
            dict(
                id=f"p{i}",
                dataset="bench",
                problem=f"Problem {i}: what is {i} * {i + 7}?",
                answer=str(i * (i + 7)),
                task="math",
                task_version=1,
            )
            for i in range(args.problems)
        ]
    )
    thinks = [int(t) for t in args.think.split(",")]
    cells = [(Mode("elastic"), Budget(t, args.solve)) for t in thinks]
    cells += [(Mode("truncate"), Budget(t, args.solve)) for t in thinks]
    cells += [(Mode("none"), Budget(thinks[-1], args.solve))]
    return [(mode, budget, problem) for mode, budget in cells for problem in frame.itertuples(index=False)], thinks


def measure(engine, args, label: str) -> None:
    from dataclasses import replace

    from e1.engine.base import Sampling
    from e1.eval.run import EvalConfig, _generate_batch

    batch, thinks = grid_batch(args)
    sampling = Sampling(temperature=1.0, top_p=1.0, seed=0, max_tokens=thinks[-1] + args.solve)
    base = EvalConfig(
        model="bench", datasets=("bench",), n=args.n, sampling=sampling, batch_size=args.problems * args.n
    )
    counting = Counting(engine)

    def run(shared: bool):
        def go():
            counting.decoded = 0
            _generate_batch(counting, batch, replace(base, share_prefixes=shared))
            return counting.decoded

        return go

    runs = {"independent": run(False), "shared": run(True)}
    for fn in runs.values():  # warm up both paths once
        fn()
    results = interleaved_best(args.repeats, runs)
    (alone_s, alone_tokens), (shared_s, shared_tokens) = results["independent"], results["shared"]
    print(
        f"{label}: {args.problems} problems × n={args.n}; elastic t={args.think} s={args.solve}, truncate at t+s, "
        f"none ≤ {thinks[-1] + args.solve}; best of {args.repeats}"
    )
    print(f"  independent {alone_tokens:7d} tokens {alone_s:8.2f}s")
    print(f"  shared      {shared_tokens:7d} tokens {shared_s:8.2f}s")
    print(
        f"  shared / independent: {shared_tokens / alone_tokens:.3f}x tokens, {shared_s / alone_s:.3f}x time"
        "   (goal <= 0.4x tokens, <= 0.5x time)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("both", "hf", "vllm"), default="both")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--think", default="64,128,192,256")
    parser.add_argument("--solve", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from e1.models.tiny import build_tiny_model
    from e1.report.ui import quiet_libraries

    quiet_libraries()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(
            build_tiny_model(
                f"{tmp}/m",
                hidden_size=args.hidden,
                layers=args.layers,
                heads=args.hidden // 32,
                intermediate_size=4 * args.hidden,
            )
        )
        if args.backend in ("both", "hf"):
            from e1.engine.hf.hf_engine import HFEngine
            from e1.engine.spec import EngineSpec

            engine = HFEngine.load(path, EngineSpec(dtype="float32", device="cpu"), batch_size=args.problems * args.n)
            measure(engine, args, "transformers")
        if args.backend in ("both", "vllm"):
            from e1.engine.spec import EngineSpec
            from e1.engine.vllm.vllm_engine import VLLMEngine

            engine = VLLMEngine.load(path, EngineSpec(dtype="float32", max_model_len=1024))
            measure(engine, args, "vLLM")
            engine.close()


if __name__ == "__main__":
    main()
