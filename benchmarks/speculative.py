"""Tokens per second of the vLLM backend with vLLM's ngram drafter and without one, same rows, greedy.

    python benchmarks/speculative.py [--batch 8 --think 192 --solve 64 --repeats 2 --drafter ngram:k=4:max=4:min=1]

Two engines on one tiny model (float32; the random model repeats itself, so n-gram drafts are often
accepted): the plain one forces budgets through its logits processor, the drafted one through request
boundaries (e1/engine/drafter.py). Per mode (elastic: requests end at the forced end marker and EOS; none:
nothing forced), after one warm-up call each, interleaved repeats; prints tokens/s, best of --repeats, the
ratio drafted/plain, and whether the two wrote the same ids (they must, greedy).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.base import Sampling
from e1.engine.spec import EngineSpec
from e1.engine.vllm.vllm_engine import VLLMEngine
from e1.models.tiny import build_tiny_model

GREEDY = Sampling(temperature=0.0)


def timed(engine, prompts, budget, mode) -> tuple[float, list]:
    start = time.perf_counter()
    rows = engine.generate(prompts, budget, mode, GREEDY)
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--think", type=int, default=192)
    parser.add_argument("--solve", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--drafter", default="ngram:k=4:max=4:min=1")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    path = str(build_tiny_model(os.path.join(tempfile.mkdtemp(), "tiny")))
    spec = EngineSpec(dtype="float32", max_model_len=1024, gpu_memory_utilization=0.1)
    plain = VLLMEngine.load(path, spec)
    drafted = VLLMEngine.load(path, EngineSpec(**{**spec.__dict__, "speculative": args.drafter}))
    prompts = [
        build_prompt(plain.tokenizer, f"Count {i} {i} {i} and say why. " * (1 + i % 3)) for i in range(args.batch)
    ]
    budget = Budget(args.think, args.solve)
    for mode in ("elastic", "none"):
        best = {"plain": float("inf"), "drafted": float("inf")}
        outputs = {}
        for engine in (plain, drafted):
            timed(engine, prompts, budget, mode)  # warm-up
        for _ in range(args.repeats):
            for name, engine in (("plain", plain), ("drafted", drafted)):
                seconds, rows = timed(engine, prompts, budget, mode)
                best[name], outputs[name] = min(best[name], seconds), rows
        tokens = sum(len(c.token_ids) for c in outputs["plain"])
        same = [c.token_ids for c in outputs["plain"]] == [c.token_ids for c in outputs["drafted"]]
        rate = {name: tokens / seconds for name, seconds in best.items()}
        print(
            f"{mode:8s} {tokens} tokens  plain {rate['plain']:.1f} tok/s  drafted ({args.drafter}) "
            f"{rate['drafted']:.1f} tok/s  ratio {rate['drafted'] / rate['plain']:.2f}x  same ids: {same}"
        )
    plain.close()
    drafted.close()


if __name__ == "__main__":
    main()
