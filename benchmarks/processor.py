"""vLLM's logits processor: CPU time per decoding step vs batch size, per mode (soft's bias and stop= rows on
the stepping path, as arrays), and for stop= rows the stepping path with the quiet-id prefilter (each row's scanner
is given only the ids that can start or complete a match, :mod:`e1.engine.stop`) against the stepping path
before it (``StopPattern.prefilter = False``: every row's id through its detokenizer each step), side by
side in one run.

    python benchmarks/processor.py [--batches 8,64,256,1024 --steps 300 --repeats 3 --modes none,elastic,budget-forcing,soft,stop]

No vLLM engine: the rows are added as vLLM's ``update_state`` adds them and each step appends one thinking
id to every row, then times ``apply`` on a small logits tensor (its work between two forward passes: on an
H200 a 1.5B model's step at batch 256 takes about 9 ms). Every row is inside the window each mode acts in
(t = s = 1k; soft with ``start=0``, so its bias is due at every step; ``stop='\\\\boxed\\{'``, which the text
never completes; the ids that can wake a row's scanner, counted in the output, come often). Prints microseconds per step
and per row-step; flat per row-step means the per-step work no longer grows with Python per row.
"""

from __future__ import annotations

import argparse
import time

MODES = {
    "none": "none",
    "elastic": "elastic",
    "budget-forcing": "budget-forcing",
    "soft": "soft:start=0",
    "stop": "elastic:stop='\\\\boxed\\{'",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="8,64,256,1024")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="of " + ", ".join(MODES))
    parser.add_argument(
        "--text",
        default="Let me add 17 and 25: that is 42. Wait, check \\frac{1}{2} é → 42 again. ",
        help="the thinking every row writes, repeated",
    )
    args = parser.parse_args()

    import torch

    from e1.engine.base import Mode
    from e1.engine.markers import resolve_markers
    from e1.models.tiny import build_tokenizer

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    markers = resolve_markers(tokenizer)
    ids = tokenizer.encode(args.text * (args.steps + 8), add_special_tokens=False)[: args.steps + 8]
    paths = {"stepping": False, "+ quiet ids": True}
    if "stop" in args.modes.split(","):
        from e1.engine.stop import StopPattern

        quiet = StopPattern(tokenizer, Mode.parse(MODES["stop"]).stop).quiet
        loud = sum(not quiet[i] for i in ids[8 : 8 + args.steps])
        print(
            f"stop: {loud} of {args.steps} timed ids are not quiet (by default the {{ of \\frac{{1}}{{2}}, and é and → "
            f"split into bytes by the tiny vocabulary): they and the id after a split character wake every row's scanner"
        )
    print(f"processor CPU time per step, {args.steps} steps, best of {args.repeats}; us/step (us/row-step)")
    print(f"{'batch':>6} {'mode':14} " + " ".join(f"{path:>20}" for path in paths) + f" {'quiet / stepping':>17}")
    for batch in map(int, args.batches.split(",")):
        for name in args.modes.split(","):
            mode = MODES[name]
            timed = {
                path: quiet for path, quiet in paths.items() if quiet <= ("stop=" in mode)
            }  # quiet ids: stop= only
            runs = {path: run(tokenizer, markers, mode, batch, ids, args.steps, quiet) for path, quiet in timed.items()}
            best = {path: float("inf") for path in runs}
            for _ in range(args.repeats):  # the paths take turns; each run returns the seconds inside apply
                for path, fn in runs.items():
                    best[path] = min(best[path], fn())
            per = {path: best[path] / args.steps * 1e6 for path in runs}
            cells = [f"{per[path]:9.1f} ({per[path] / batch:8.2f})" if path in per else f"{'-':>20}" for path in paths]
            quiet = f"{per['+ quiet ids'] / per['stepping']:16.3f}x" if "+ quiet ids" in per else f"{'-':>17}"
            print(f"{batch:6d} {name:14} " + " ".join(cells) + f" {quiet}", flush=True)


def run(tokenizer, markers, mode_text: str, batch: int, ids: list[int], steps: int, prefilter: bool):
    """One timed run: a fresh processor with ``batch`` rows in ``mode``, warmed up to its window, then ``steps`` steps
    (``prefilter``: stop= scanners with the quiet-id table)."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.budget import Budget
    from e1.engine.base import Mode
    from e1.engine.stop import StopPattern
    from e1.engine.vllm.processor import KEY, BudgetProcessor, budget_args

    class Processor(BudgetProcessor):
        def tokenizer(self):
            return tokenizer

    args = budget_args(Budget(1024, 1024), Mode.parse(mode_text), markers, prompt_thinking="open", room=4096)
    logits = torch.zeros(batch, 8)

    def go():
        processor = Processor(None, torch.device("cpu"), False)
        StopPattern.prefilter = prefilter  # the rows' scanners are made below
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
        StopPattern.prefilter = True
        return seconds

    return go


if __name__ == "__main__":
    main()
