"""Scoring overlapped with generation: a code eval whose scoring takes about as long as its generation.

    python benchmarks/overlap.py [--problems 32 --n 4 --batch 8 --tokens 1024 --workers 8]

Generation is the tiny model's real decoding (transformers backend, one thread); each sample's
text is then replaced by a correct program whose test sleeps, so scoring runs real sandboxed
programs but, like a GPU eval's sandbox, barely competes with decoding for the CPU. The sleep is
set from a first measurement (generation, and scoring with no sleep: the sandbox's own cost) so
that scoring alone takes about as long as generating alone. Filling and draining the pipeline
costs about one batch's stage: with b batches the ideal is W ≈ (1 + 1/b) × max(G, S).

Measured one after the other: G, generating every batch alone (the same batches ``e1 eval``
makes); S, scoring them alone (one :class:`~e1.rewards.scoring.Scorer`, ``--workers`` programs at
once); W, the wall time of :func:`e1.eval.run.evaluate` on the same work, which scores batch k while
batch k + 1 generates. Goal: W ≤ 1.15 × max(G, S) (run one after the other it would be G + S).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.eval.generation import _generate_batch, _score_batch
from e1.eval.run import EvalConfig, _pending, evaluate
from e1.models.tiny import build_tiny_model
from e1.rewards.scoring import ScoringSpec
from e1.store.samples import SampleStore


class WritesSleepyCode:
    """The tiny model decodes for real; every sample then answers with a program that sleeps ``sleep_s``."""

    def __init__(self, engine: HFEngine, sleep_s: float):
        self.engine, self.tokenizer, self.markers = engine, engine.tokenizer, engine.markers
        self.answer = f"\n```python\nimport time\ntime.sleep({sleep_s:.3f})\nprint(5)\n```\n"

    def generate(self, *args, **kw):
        return [
            dataclasses.replace(c, closed=True, solution_text=self.answer) for c in self.engine.generate(*args, **kw)
        ]


def problems_file(root: Path, count: int) -> Path:
    tests = json.dumps([{"kind": "stdio", "input": "", "output": "5\n"}])
    frame = pd.DataFrame(
        {
            "id": [f"c{i}" for i in range(count)],
            "dataset": "sleepy",
            "problem": [f"Print 5. ({i})" for i in range(count)],
            "answer": tests,
            "task": "code",
            "task_version": 1,
        }
    )
    frame.to_parquet(root / "sleepy.parquet", index=False)
    return root / "sleepy.parquet"


def stages_alone(engine, config: EvalConfig) -> tuple[float, float]:
    """G and S: every batch generated, then every batch scored, one after the other."""
    from e1.data import load_dataset

    todo = _pending({"d": load_dataset(str(config.datasets[0]))}, SampleStore(config.out).keys(), config)
    per_call = max(1, config.batch_size // config.n)
    began = time.perf_counter()
    generated = [_generate_batch(engine, todo[i : i + per_call], config) for i in range(0, len(todo), per_call)]
    generate_s = time.perf_counter() - began
    with config.scoring.scorer() as scorer:
        began = time.perf_counter()
        for batch in generated:
            _score_batch(batch, scorer)
        score_s = time.perf_counter() - began
    return generate_s, score_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("problems", 32), ("n", 4), ("batch", 8), ("tokens", 1024), ("workers", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = HFEngine.load(str(build_tiny_model(root / "tiny")), batch_size=args.batch)
        config = EvalConfig(
            model="tiny",
            datasets=(str(problems_file(root, args.problems)),),
            n=args.n,
            budgets=(Budget(args.tokens // 2, args.tokens // 2),),
            modes=(Mode("elastic"),),
            sampling=Sampling(temperature=1.0),
            batch_size=args.batch,
            scoring=ScoringSpec(workers=args.workers, test_time_limit_s=30.0),
            out=root / "unused",
        )
        stages_alone(WritesSleepyCode(model, 0.0), config)  # warm-up
        generate_s, overhead_s = stages_alone(WritesSleepyCode(model, 0.0), config)
        samples = args.problems * args.n
        at_once = min(args.workers, args.batch)  # programs of one batch that run side by side
        sleep_s = max(0.0, generate_s - overhead_s) * at_once / samples  # scoring alone ≈ generating alone
        engine = WritesSleepyCode(model, sleep_s)
        generate_s, score_s = stages_alone(engine, config)
        began = time.perf_counter()
        evaluate(dataclasses.replace(config, out=root / "run"), engine=engine)
        wall_s = time.perf_counter() - began
    print(
        f"{samples} code samples in batches of {args.batch}, each test sleeping {sleep_s * 1e3:.0f} ms "
        f"(sandbox cost alone {overhead_s:.2f} s), {args.workers} workers; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(
        f"  generate alone G = {generate_s:.2f} s   score alone S = {score_s:.2f} s   G + S = {generate_s + score_s:.2f} s"
    )
    print(f"  e1 eval (overlapped) W = {wall_s:.2f} s")
    print(
        f"  W / max(G, S) = {wall_s / max(generate_s, score_s):.3f}  (goal <= 1.15)   W / (G + S) = {wall_s / (generate_s + score_s):.3f}"
    )


if __name__ == "__main__":
    main()
