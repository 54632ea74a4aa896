"""Engine speed, measured side by side in one run on the same tiny model and batch.

    python benchmarks/engine.py [--batch 16 --tokens 256 --hidden 128 --layers 4 --repeats 3]
    python benchmarks/engine.py --compare-batches 64,256 --device cuda --dtype bfloat16 --hidden 1536 --layers 28
    python benchmarks/engine.py --backend vllm [...]    # the vLLM backend: see benchmarks/engine_vllm.py

(a) elastic vs none at equal generated tokens (goal: elastic ≤ 1.03× none's time per token).
    EOS is disabled for both so every row writes its whole budget: elastic t + marker + s,
    none t + 2 + s tokens (the marker
    is two pad tokens, which the random model practically never writes itself).
(b) e1's transformers backend (greedy, mode none) vs ``model.generate()`` (greedy) at each batch
    of ``--compare-batches`` (goal ≤ 1.0× at each). Fair by construction: the same model, left-padded
    prompts and attention mask, exactly ``--tokens`` new tokens per row for both (EOS is off for
    both: e1's EOS set is emptied and generate gets ``eos_token_id=None``, so neither pays for a
    stopping rule the other skips), one warm-up call each, interleaved repeats, a CUDA synchronize
    before each clock stop; the two outputs are checked to be the same tokens. Also timed: e1 with
    exact key lengths (``exact_keys``: one new attention shape per step, as before key buckets),
    which shows what the buckets' masked-out columns cost where new shapes are free (a CPU).
(c) the per-token cost of soft's bias and of stop-pattern matching vs elastic, same tokens:
    ``soft:start=0:ceiling=1`` (a bias added at every thinking step, cut at t like elastic) and
    ``elastic:stop='...'`` (a pattern that never matches, checked after every thinking token).
(d) early-exit vs elastic, same rows: trials at every occurrence of the model's commonest thinking
    token, threshold 1 (never confident: the output equals elastic's), so the extra time is the
    trials alone. Reported per output token (what early exit costs) and per decoded token (output
    + rolled-back trial tokens) and per batch step (rows decode in lockstep, so a batch lasts as
    long as its row with most trials: the rollback machinery's own overhead, goal ≈ 1.0×).
Prints seconds (best of --repeats) and the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

import torch

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.engine.hf.kv_cache import exact_keys, key_bucket
from e1.engine.spec import EngineSpec
from e1.models.tiny import build_tiny_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import common_text, interleaved_best  # noqa: E402


def main() -> None:
    if "--backend" in sys.argv:  # `--backend vllm` runs the vLLM measurements (benchmarks/engine_vllm.py)
        at = sys.argv.index("--backend")
        backend = sys.argv[at + 1] if at + 1 < len(sys.argv) else ""
        del sys.argv[at : at + 2]
        if backend == "vllm":
            import engine_vllm

            return engine_vllm.main()
        if backend != "hf":
            raise SystemExit(f"--backend must be hf or vllm, got {backend!r}")
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from e1.report.ui import quiet_libraries

    quiet_libraries()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_tiny_model(
            f"{tmp}/m",
            hidden_size=args.hidden,
            layers=args.layers,
            heads=args.hidden // 32,
            intermediate_size=4 * args.hidden,
            max_positions=4096 + args.tokens,
        )
        engine = HFEngine.load(
            str(path), EngineSpec(device=args.device, dtype=args.dtype), batch_size=max(1, args.batch)
        )
    # No EOS and an end marker of two pad tokens (which a random model practically never writes):
    # every row thinks t tokens, gets 2 forced, writes s — exactly as many tokens as none's rows.
    pad = engine.markers.pad_id
    engine.markers = dataclasses.replace(engine.markers, eos_ids=frozenset({-1}), end_ids=(pad, pad))
    shape = args.model or f"hidden {args.hidden}, layers {args.layers}"
    print(
        f"model: {shape}, {sum(p.numel() for p in engine.model.parameters()) / 1e6:.2f}M "
        f"params; {engine.device} {next(engine.model.parameters()).dtype}; torch threads {torch.get_num_threads()}"
    )
    figures = {}
    if args.batch:
        figures |= elastic_vs_none(engine, args)
    for batch in args.compare_batches:
        figures[f"b={batch}"] = against_generate(engine, batch, args)
    if args.json:
        with open(args.json, "w") as sink:
            json.dump(figures, sink)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16, help="batch of (a); 0 skips (a)")
    parser.add_argument("--compare-batches", default="64,256", help="batches of (b), comma-separated; '' skips (b)")
    parser.add_argument("--tokens", type=int, default=256, help="generated tokens per row")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on cuda, fp32 on cpu), float32, bfloat16")
    parser.add_argument("--model", help="an existing model folder (default: a tiny random one, built here)")
    parser.add_argument("--no-modes", action="store_true", help="skip (c) and (d), the other modes' rows")
    parser.add_argument("--json", help="also write the figures to this file (benchmarks/gpu_check.py reads it)")
    args = parser.parse_args()
    args.compare_batches = [int(b) for b in args.compare_batches.split(",") if b.strip()]
    return args


def prompts_for(engine: HFEngine, batch: int) -> list[str]:
    """Prompts of a few different lengths, so the batch is left-padded as in an eval."""
    return [
        build_prompt(engine.tokenizer, f"Problem {i}: what is {i} * {i + 7}?" + " Think." * (i % 5))
        for i in range(batch)
    ]


def elastic_vs_none(engine: HFEngine, args) -> dict:
    engine.batch_size = args.batch
    prompts = prompts_for(engine, args.batch)
    sampling = Sampling(temperature=1.0, top_p=1.0, seed=0, max_tokens=args.tokens + 2)
    half = args.tokens // 2
    budget = Budget(half, args.tokens - half)

    def run(mode):
        completions = engine.generate(prompts, budget, Mode.parse(mode), sampling)
        return sum(len(c.token_ids) for c in completions)

    run("elastic"), run("none")  # warm up both paths once
    tokens = {"elastic": run("elastic"), "none": run("none")}
    best = interleaved_best(args.repeats, {mode: (lambda m=mode: run(m)) for mode in ("elastic", "none")})
    secs = {mode: seconds for mode, (seconds, _) in best.items()}
    print(
        f"(a) batch {args.batch}, elastic t={budget.think} s={budget.solve}: {secs['elastic']:.3f}s for "
        f"{tokens['elastic']} tokens ({tokens['elastic'] / secs['elastic']:.0f} tok/s)"
    )
    print(
        f"    none max={args.tokens + 2}:           {secs['none']:.3f}s for {tokens['none']} tokens "
        f"({tokens['none'] / secs['none']:.0f} tok/s)"
    )
    per_token = (secs["elastic"] / tokens["elastic"]) / (secs["none"] / tokens["none"])
    print(f"    ratio elastic/none per token: {per_token:.3f}x (goal <= 1.03x)")
    if not args.no_modes:
        early_exit_row(engine, prompts, budget, sampling, args.repeats)
        policies_vs_elastic(run, args.repeats)
    return {"elastic_per_token": per_token, "elastic_tokens_per_s": tokens["elastic"] / secs["elastic"]}


def against_generate(engine: HFEngine, batch: int, args) -> dict:
    """(b): e1 greedy vs ``model.generate()`` greedy, ``batch`` rows of exactly ``args.tokens`` new tokens."""
    engine.batch_size = batch
    prompts = prompts_for(engine, batch)
    greedy = Sampling(temperature=0.0, max_tokens=args.tokens)
    ids = engine.encode(prompts)
    width, pad = max(map(len, ids)), engine.markers.pad_id
    input_ids = torch.tensor([[pad] * (width - len(i)) + i for i in ids], device=engine.device)  # [B, W]
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids], device=engine.device)  # [B, W]
    synchronize = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)

    def ours():
        completions = engine.generate(prompts, Budget(1, 1), Mode("none"), greedy)
        synchronize()
        return [c.token_ids for c in completions]

    def exact():  # e1 attending over exactly the keys written: a new attention shape every step
        engine.key_bucket = exact_keys
        try:
            return ours()
        finally:
            engine.key_bucket = key_bucket

    def theirs():
        with torch.inference_mode():
            out = engine.model.generate(
                input_ids,
                attention_mask=mask,
                max_new_tokens=args.tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=pad,
            )
        synchronize()
        return out[:, width:].tolist()

    started = time.perf_counter()
    ours()  # warm-up: the first call at a shape pays one-off costs (timed: the cold shape's row)
    cold = time.perf_counter() - started
    exact(), theirs()
    best = interleaved_best(args.repeats, {"ours": ours, "exact": exact, "theirs": theirs})
    (t_ours, ours_ids), (t_exact, _), (t_hf, hf_ids) = best["ours"], best["exact"], best["theirs"]
    print(
        f"    e1 greedy at a cold shape (the first call at batch {batch}): {cold:.3f}s; cold / warm {cold / t_ours:.3f}x "
        f"(goal <= 1.1x)"
    )
    assert all(len(row) == args.tokens for row in ours_ids + hf_ids), "both must write exactly --tokens per row"
    same = sum(a == b for a, b in zip(ours_ids, hf_ids))
    print(
        f"(b) batch {batch}: e1 greedy {t_ours:.3f}s, model.generate() {t_hf:.3f}s ({batch} x {args.tokens} tokens); "
        f"ratio e1/generate {t_ours / t_hf:.3f}x (goal <= 1.0x); identical rows {same}/{batch}"
    )
    print(
        f"    e1 with exact key lengths (one attention shape per step): {t_exact:.3f}s; "
        f"ratio bucketed/exact {t_ours / t_exact:.3f}x"
    )
    return {
        "e1_vs_generate": t_ours / t_hf,
        "bucketed_vs_exact": t_ours / t_exact,
        "cold_vs_warm": cold / t_ours,
        "tokens_per_s": batch * args.tokens / t_ours,
    }


def early_exit_row(engine, prompts, budget, sampling, repeats: int) -> None:
    """(d): early-exit's cost per output and per decoded token, relative to elastic's."""
    from collections import Counter

    elastic = engine.generate(prompts, budget, Mode("elastic"), sampling)
    counts = Counter(t for c in elastic for t in c.token_ids[: budget.think])
    at = common_text(engine.tokenizer, counts)
    modes = {"elastic": Mode("elastic"), "early-exit": Mode.parse(f"early-exit:threshold=1:trial=8:at={at!r}")}
    done = {name: engine.generate(prompts, budget, mode, sampling) for name, mode in modes.items()}
    output = {name: sum(len(c.token_ids) for c in rows) for name, rows in done.items()}
    decoded = {name: sum(c.decoded_tokens for c in rows) for name, rows in done.items()}
    trials = sum(len(c.trials) for c in done["early-exit"])
    best = interleaved_best(
        repeats, {name: (lambda m=mode: engine.generate(prompts, budget, m, sampling)) for name, mode in modes.items()}
    )
    secs = {name: seconds for name, (seconds, _) in best.items()}
    print(
        f"(d) {modes['early-exit']}: {secs['early-exit']:.3f}s, {output['early-exit']} output + "
        f"{decoded['early-exit'] - output['early-exit']} trial tokens ({trials} trials); elastic {secs['elastic']:.3f}s, "
        f"{output['elastic']} tokens"
    )
    per_output = (secs["early-exit"] / output["early-exit"]) / (secs["elastic"] / output["elastic"])
    per_decoded = (secs["early-exit"] / decoded["early-exit"]) / (secs["elastic"] / decoded["elastic"])
    # rows decode in lockstep: a batch takes as many steps as its row that decodes most
    steps = {name: max(c.decoded_tokens for c in rows) for name, rows in done.items()}
    per_step = (secs["early-exit"] / steps["early-exit"]) / (secs["elastic"] / steps["elastic"])
    print(
        f"    ratio early-exit/elastic per output token: {per_output:.3f}x; per decoded token: {per_decoded:.3f}x; "
        f"per batch step ({steps['early-exit']} vs {steps['elastic']}): {per_step:.3f}x (goal ~1.0x)"
    )


MODE_ROWS = {"soft": "soft:start=0:ceiling=1", "stop": "elastic:stop='never written: ZQX'"}


def policies_vs_elastic(run, repeats: int) -> None:
    """(c): each new mode's time per output token over elastic's, measured interleaved in one run."""
    runs = {"elastic": "elastic", **MODE_ROWS}
    tokens = {name: run(mode) for name, mode in runs.items()}  # also the warm-up
    best = interleaved_best(repeats, {name: (lambda m=mode: run(m)) for name, mode in runs.items()})
    per_token = {name: best[name][0] / tokens[name] for name in runs}
    for name, mode in MODE_ROWS.items():
        print(
            f"(c) {mode}: {best[name][0]:.3f}s for {tokens[name]} tokens; "
            f"per token vs elastic: {per_token[name] / per_token['elastic']:.3f}x"
        )


if __name__ == "__main__":
    main()
