"""Results I/O: does writing a batch cost the same at 10k rows as at 1M? And what share of a run is it?

    python benchmarks/results_io.py [--small 10000 --large 1000000 --batch 64 --text-chars 4000]

(a) Time to write one batch of ``--batch`` samples (think text of ``--text-chars`` characters)
    when the run directory already holds ``--small`` vs ``--large`` rows, side by side:
    e1's append-only store (:class:`e1.store.samples.SampleStore`: one new part per batch)
    vs the previous format (the whole ``samples.parquet`` rewritten after every batch, measured
    up to ``--old-max`` rows: beyond that it takes minutes). Goal: large / small ≤ 1.2 for the store.
    The rows already held are written once as the store holds them after a resume (one compacted
    ``samples.parquet`` with short texts: the store never reads them while appending) plus
    ``--prefill-parts`` parts; each timing is the median of ``--repeats`` appends.
(b) Total write time of a simulated run (``--run-batches`` batches appended, then compacted,
    plus the resume scan of stored keys) as a share of its generation time, taken as
    ``rows × --tokens-per-sample / --tokens-per-s`` (defaults: 2,000 tokens per sample, 20,000
    tokens/s: a 1.5B model under vLLM on one H100 decodes faster only at huge batches). Goal ≤ 2%.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from e1.store.results import SAMPLES, samples_frame, write_parquet
from e1.store.samples import SampleStore


def texts(count: int, chars: int, seed: int) -> list[str]:
    """Distinct random texts (letters and spaces): parquet cannot dictionary-encode them away."""
    symbols = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    codes = symbols[np.random.default_rng(seed).integers(0, len(symbols), size=(count, chars))]
    return [row.tobytes().decode() for row in codes]


def rows(count: int, start: int, text_chars: int) -> list[dict]:
    return [
        dict(
            dataset="bench",
            problem_id=f"p{(start + i) // 16}",
            sample_index=(start + i) % 16,
            mode="elastic",
            think_budget=2048,
            solve_budget=1024,
            prompt_tokens=120,
            think_tokens=2048,
            solve_tokens=300,
            forced=True,
            finish_reason="stop",
            think_text=text,
            solution_text="so \\boxed{4}",
            extracted_answer="4",
            gold="4",
            reward=1.0,
            correct=True,
            tests_passed=math.nan,
            first_failure=None,
            think_end="budget",
        )
        for i, text in enumerate(texts(count, text_chars, start))
    ]


def store_holding(out: Path, held: int, args) -> SampleStore:
    """A run directory holding ``held`` rows: a compacted file plus ``--prefill-parts`` parts."""
    store = SampleStore(out)
    in_parts = min(held, args.prefill_parts * args.batch)
    samples_frame(rows(held - in_parts, 0, 20)).to_parquet(out / SAMPLES, index=False)
    for start in range(held - in_parts, held, args.batch):
        store.append(rows(min(args.batch, held - start), start, 20))
    return store


def median_append_s(store: SampleStore, start: int, args) -> float:
    store.append(rows(args.batch, start, args.text_chars))  # warm-up
    times = []
    for k in range(1, args.repeats + 1):
        batch = rows(args.batch, start + k * args.batch, args.text_chars)
        began = time.perf_counter()
        store.append(batch)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def old_rewrite_s(out: Path, held: int, args) -> float:
    """The previous format: the whole file (rows held + one batch) rewritten after every batch."""
    frame = samples_frame(rows(held + args.batch, 0, args.text_chars))
    began = time.perf_counter()
    write_parquet(frame, out / "old.parquet")
    return time.perf_counter() - began


def simulated_run(root: Path, args) -> tuple[float, int]:
    store = SampleStore(root / "run")
    (root / "run").mkdir()
    began = time.perf_counter()
    store.keys()  # the resume scan at start
    for k in range(args.run_batches):
        store.append(rows(args.batch, k * args.batch, args.text_chars))
    store.compact()
    return time.perf_counter() - began, args.run_batches * args.batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("small", 10_000),
        ("large", 1_000_000),
        ("batch", 64),
        ("text-chars", 4000),
        ("old-max", 100_000),
        ("prefill-parts", 200),
        ("repeats", 9),
        ("run-batches", 300),
        ("tokens-per-sample", 2000),
        ("tokens-per-s", 20_000),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            f"(a) one batch of {args.batch} samples ({args.text_chars}-char thinking) written when the run holds N rows"
        )
        new = {}
        for held in (args.small, args.large):
            (root / f"new{held}").mkdir()
            new[held] = median_append_s(store_holding(root / f"new{held}", held, args), held, args)
            old = f"{old_rewrite_s(root, held, args) * 1e3:10.1f} ms" if held <= args.old_max else "  (skipped)"
            print(f"  N = {held:>9,}   store: {new[held] * 1e3:7.2f} ms   whole-file rewrite: {old}")
        if args.old_max >= args.small:
            print(
                f"  whole-file rewrite at N = {args.old_max:,}: {old_rewrite_s(root, args.old_max, args) * 1e3:.1f} ms"
            )
        print(f"  store ratio large/small: {new[args.large] / new[args.small]:.2f}  (goal <= 1.2)")
        write_s, count = simulated_run(root, args)
        generate_s = count * args.tokens_per_sample / args.tokens_per_s
        print(
            f"(b) simulated run: {count:,} samples, writes + resume scan + compaction {write_s:.2f} s, "
            f"generation {generate_s:,.0f} s at {args.tokens_per_s:,} tokens/s"
        )
        print(f"  write share: {write_s / generate_s:.3%}  (goal <= 2%)")


if __name__ == "__main__":
    main()
