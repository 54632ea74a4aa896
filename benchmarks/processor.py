"""vLLM's logits processor: CPU time per decoding step vs batch size, per mode, the stepping path (soft's bias
and stop= rows as arrays) against looking at every row one by one (``BudgetProcessor.stepping = False``, the
processor before it), side by side in one run.

    python benchmarks/processor.py [--batches 8,64,256,1024 --steps 300 --repeats 3]

No vLLM engine: the rows are added as vLLM's ``update_state`` adds them and each step appends one thinking
id to every row, then times ``apply`` on a small logits tensor (its work between two forward passes: on an
H200 a 1.5B model's step at batch 256 takes about 9 ms). Every row is inside the window each mode acts in
(t = s = 1k; soft with ``start=0``, so its bias is due at every step; ``stop='\\\\boxed\\{'``, which the text
never completes). Prints microseconds per step and per row-step; flat per row-step means the per-step work
no longer grows with Python per row.
"""

from __future__ import annotations

import argparse
import time

MODES = {"none": "none", "elastic": "elastic", "soft": "soft:start=0", "stop": "elastic:stop='\\\\boxed\\{'"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="8,64,256,1024")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from e1.engine.markers import resolve_markers
    from e1.models.tiny import build_tokenizer

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    markers = resolve_markers(tokenizer)
    text = "Let me add 17 and 25: that is 42. Wait, check \\frac{1}{2} é → 42 again. " * 200
    ids = tokenizer.encode(text, add_special_tokens=False)[: args.steps + 8]
    print(f"processor CPU time per step, {args.steps} steps, best of {args.repeats}; us/step (us/row-step)")
    print(f"{'batch':>6} {'mode':8} {'row by row':>20} {'stepping':>20} {'stepping / row by row':>22}")
    for batch in map(int, args.batches.split(",")):
        for name, mode in MODES.items():
            runs = {path: run(tokenizer, markers, mode, batch, ids, args.steps, path == "stepping")
                    for path in ("row by row", "stepping")}
            best = {path: float("inf") for path in runs}
            for _ in range(args.repeats):  # the paths take turns; each run returns the seconds inside apply
                for path, fn in runs.items():
                    best[path] = min(best[path], fn())
            per = {path: best[path] / args.steps * 1e6 for path in runs}
            print(f"{batch:6d} {name:8} {per['row by row']:9.1f} ({per['row by row'] / batch:6.2f}) "
                  f"{per['stepping']:9.1f} ({per['stepping'] / batch:6.2f}) {per['stepping'] / per['row by row']:21.3f}x",
                  flush=True)


def run(tokenizer, markers, mode_text: str, batch: int, ids: list[int], steps: int, stepping: bool):
    """One timed run: a fresh processor with ``batch`` rows in ``mode``, warmed up to its window, then ``steps`` steps."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.budget import Budget
    from e1.engine.base import Mode
    from e1.engine.vllm_processor import KEY, BudgetProcessor, budget_args

    class Processor(BudgetProcessor):
        def tokenizer(self):
            return tokenizer

    args = budget_args(Budget(1024, 1024), Mode.parse(mode_text), markers, prompt_thinking="open", room=4096)
    logits = torch.zeros(batch, 8)

    def go():
        processor = Processor(None, torch.device("cpu"), False)
        processor.stepping = stepping
        outputs = [[] for _ in range(batch)]
        added = [(i, SamplingParams(extra_args={KEY: args}), [1], output) for i, output in enumerate(outputs)]
        processor.update_state(BatchUpdate(batch, [], added, []))
        for token in ids[:8]:  # into the window: the rows look as they do mid-thinking
            for output in outputs:
                output.append(token)
            processor.apply(logits)
        seconds = 0.0
        for token in ids[8 : 8 + steps]:
            for output in outputs:  # vLLM's work, not the processor's: not timed
                output.append(token)
            start = time.perf_counter()
            processor.apply(logits)
            seconds += time.perf_counter() - start
        return seconds

    return go


if __name__ == "__main__":
    main()
