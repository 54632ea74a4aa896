"""vLLM backend speed, side by side in one run on one LLM, the same tiny model, batch and tokens.

    python benchmarks/engine_vllm.py [--batch 16 --tokens 256 --hidden 128 --layers 4 --repeats 3]
    python benchmarks/engine_vllm.py --model /tmp/m15 --batch 512 --tokens 1024   # a GPU, a real-size model

Greedy decoding on a random model that practically never writes ``</think>`` or EOS, so every
row writes its whole budget: elastic t + 1 (forced ``</think>``) + s tokens, the others as many.

(a) e1 elastic (one pass, logits processor) vs plain vLLM ``max_tokens = t + 1 + s`` (goal ≤ 1.03×),
    ids only and with vLLM's own detokenization ("+ text": e1's completions carry texts too,
    decoded after the pass, so that row is the like-for-like baseline).
(b) the paper's two calls: ``max_tokens = t`` stopping at ``</think>``, append it, continue with
    ``max_tokens = s`` (prefix caching on, so the second prefill is a cache hit).
(c) vLLM's own ``thinking_token_budget = t`` (reasoning config ``<think>``/``</think>``) with
    ``max_tokens = t + 1 + s``: it caps thinking only, so it is not the same decoding — speed only;
    a vLLM without it gets a line saying so. All runs share one engine, on the model runner vLLM
    picks (``--runner v1|v2`` asks for one: e1's processor runs on either where vLLM is 0.32+).
(d) e1's soft budget (default bias schedule: it may end thinking before t) and elastic with a stop
    pattern a random model never matches (a boxed answer): cost per output token vs plain.
(e) early-exit with trials at the commonest thinking token, never confident (output = elastic's).
Runs take turns; prints seconds (best of --repeats), tokens per second and the ratios to (a)'s plain run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import common_text, interleaved_best  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256, help="thinking + solution tokens per row")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", help="an existing model directory (default: a tiny random one, built here)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the warm-up pass of every run (vLLM captures its graphs at load; saves device time)",
    )
    parser.add_argument("--skip", default="", help="runs to leave out, comma-separated (e.g. 'e1 early-exit')")
    parser.add_argument("--json", help="also write the figures to this file (benchmarks/gpu_check.py reads it)")
    parser.add_argument(
        "--runner",
        choices=("auto", "v1", "v2"),
        default="auto",
        help="vLLM's model runner: auto (what vLLM picks; e1 sets nothing), or v1/v2 asked for through "
        "VLLM_USE_V2_MODEL_RUNNER (v2 needs vLLM 0.32+ and a GPU)",
    )
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.runner != "auto":  # the user's own choice, passed on (e1 never sets it by itself)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from e1.budget import Budget
    from e1.data.prompts import build_prompt
    from e1.engine.base import Mode, Sampling
    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.compat import has_thinking_token_budget
    from e1.engine.vllm.vllm_engine import VLLMEngine
    from e1.models.tiny import build_tiny_model
    from e1.report.ui import quiet_libraries

    quiet_libraries()
    own_budget = has_thinking_token_budget()
    reasoning = {"reasoning_config": {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>"}}
    tmp = tempfile.TemporaryDirectory()  # lives as long as the run: vLLM's workers read the tokenizer from it
    path = args.model or build_tiny_model(
        f"{tmp.name}/m",
        hidden_size=args.hidden,
        layers=args.layers,
        heads=args.hidden // 32,
        intermediate_size=4 * args.hidden,
    )
    engine = VLLMEngine.load(
        str(path),
        EngineSpec(
            dtype="float32" if args.model is None else "auto", gpu_memory_utilization=args.gpu_memory_utilization
        ),
        **(reasoning if own_budget else {}),
    )
    llm, markers = engine.llm, engine.markers
    prompts = [
        engine.encode([build_prompt(engine.tokenizer, f"Problem {i}: what is {i} * {i + 7}?")])[0]
        for i in range(args.batch)
    ]
    half = args.tokens // 2
    budget = Budget(half, args.tokens - half)
    greedy = Sampling(temperature=0.0, max_tokens=args.tokens + 1)
    end, eos = list(markers.end_ids), sorted(markers.eos_ids)

    def plain(detokenize=False, **extra):
        params = SamplingParams(
            temperature=0.0, max_tokens=args.tokens + len(end), stop_token_ids=eos, detokenize=detokenize, **extra
        )
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    def elastic():
        return sum(len(c.token_ids) for c in engine.generate(prompts, budget, Mode("elastic"), greedy))

    def two_calls():
        first = SamplingParams(temperature=0.0, max_tokens=budget.think, stop_token_ids=end + eos, detokenize=False)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], first, use_tqdm=False)
        thoughts = [list(o.outputs[0].token_ids) for o in outputs]
        thoughts = [t if t[-len(end) :] == end else t + end for t in thoughts]
        second = SamplingParams(temperature=0.0, max_tokens=budget.solve, stop_token_ids=eos, detokenize=False)
        answers = llm.generate(
            [TokensPrompt(prompt_token_ids=p + t) for p, t in zip(prompts, thoughts)], second, use_tqdm=False
        )
        return sum(len(t) + len(a.outputs[0].token_ids) for t, a in zip(thoughts, answers))

    def mode_run(text):
        mode = Mode.parse(text)
        return lambda: sum(len(c.token_ids) for c in engine.generate(prompts, budget, mode, greedy))

    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    runs = {
        "plain vLLM": plain,
        "plain vLLM + text": lambda: plain(detokenize=True),
        "e1 elastic": elastic,
        "two calls": two_calls,
        "e1 soft": mode_run("soft"),
        "e1 elastic:stop": mode_run(r"elastic:stop='\\boxed\{'"),
    }
    if own_budget:
        runs["thinking_token_budget"] = lambda: plain(thinking_token_budget=budget.think)
    if "e1 early-exit" not in skip:  # last: the slowest (one request round per trial)
        runs["e1 early-exit"] = early_exit_run(engine, prompts, budget, greedy)
    runs = {name: fn for name, fn in runs.items() if name not in skip or name == "plain vLLM"}
    runs = {name: _shown(name, fn) for name, fn in runs.items()}  # a line per run as it ends (a cut-off run keeps them)
    for fn in [] if args.no_warmup else runs.values():  # warm up every path once
        fn()
    results = interleaved_best(args.repeats, runs)
    base_secs, base_tokens = results["plain vLLM"]
    import vllm

    shape = args.model or f"hidden {args.hidden}, layers {args.layers}"
    print(
        f"vLLM {vllm.__version__}; model: {shape}; batch {args.batch}; t={budget.think} s={budget.solve}; "
        f"greedy; best of {args.repeats}"
    )
    for name, (secs, tokens) in results.items():
        per_token = (secs / tokens) / (base_secs / base_tokens)
        print(f"  {name:22s} {secs:7.3f}s {tokens:6d} tokens {tokens / secs:7.0f} tok/s  {per_token:.3f}x per token")
    if not own_budget:
        print(f"  {'thinking_token_budget':22s} unsupported: this vLLM's SamplingParams has no thinking_token_budget")
    print("goal: e1 elastic <= 1.03x plain vLLM per token")
    if args.json:
        per_token = {name: (secs / tokens) / (base_secs / base_tokens) for name, (secs, tokens) in results.items()}
        with open(args.json, "w") as sink:
            json.dump(
                {
                    "vllm": vllm.__version__,
                    "per_token": per_token,
                    "tokens_per_s": {name: tokens / secs for name, (secs, tokens) in results.items()},
                },
                sink,
            )
    print(
        "early-exit: threshold=1 (never confident), so its output is elastic's and the extra time is its trials,\n"
        "one request round per trial (the prefix cache serves each continuation): compare it with e1 elastic"
    )


def _shown(name, fn):
    def run():
        start = time.perf_counter()
        tokens = fn()
        print(f"  ran {name}: {time.perf_counter() - start:.3f}s, {tokens} tokens", flush=True)
        return tokens

    return run


def early_exit_run(engine, prompts, budget, greedy):
    """A run of early-exit with trials at the model's commonest thinking token (output tokens counted)."""
    from collections import Counter

    from e1.engine.base import Mode

    counts = Counter(
        t for c in engine.generate(prompts, budget, Mode("elastic"), greedy) for t in c.token_ids[: budget.think]
    )
    mode = Mode.parse(f"early-exit:threshold=1:trial=8:at={common_text(engine.tokenizer, counts)!r}")
    rows = engine.generate(prompts, budget, mode, greedy)
    print(
        f"{mode}: {sum(len(c.trials) for c in rows)} trials, {sum(c.trial_tokens for c in rows)} trial tokens, "
        f"at most {max(len(c.trials) for c in rows) + 1} request rounds"
    )
    return lambda: sum(len(c.token_ids) for c in engine.generate(prompts, budget, mode, greedy))


if __name__ == "__main__":
    main()
