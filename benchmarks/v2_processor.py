"""e1's vLLM logits processors per decoding step, side by side in one run: the V1-interface processor
(a RowState per request, a Python loop over the batch's rows every step) and the runner V2 processor
(every request's state as device tensors, one batch of tensor operations per step, no host sync).

    python benchmarks/v2_processor.py [--batches 8,64,256,1024 --steps 200 --vocab 64 --repeats 3]
    python benchmarks/v2_processor.py --mode "elastic:stop='0[0-3]'"   # a text mode: V2's host path

Both see the same requests (``--mode``, default soft, whose bias changes every step so the V1
processor cannot skip a row) over the same ids: thinking until the budget forces the end marker,
then the solution. Each step the V1 processor gets its rows' output lists grown by one id, the V2
processor a ``LogitsContext`` (rows shuffled, as runner V2 reorders them). The logits are ``--vocab``
wide: small, so that what is timed is the processors' own per-step work, not a pass over a real
vocabulary (which either processor's masking makes, on the GPU). A ``stop=`` mode's rows run on V2's
host path (their ids read back each step), with the tiny byte tokenizer; such a mode also times V2's host path
as it was before held rows and quiet ids ("V2 before": every host row fed one by one, every id scanned). CPU
only: no vLLM engine runs.
Prints microseconds per step and per row, and V1's cost as a multiple of V2's.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="8,64,256,1024", help="rows per step, comma-separated")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--mode", default="soft:start=0", help="every request's mode")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"apply() per step, mode {args.mode}, {args.steps} steps, vocab {args.vocab}, best of {args.repeats} "
          f"(torch threads: 1)")
    stop = "stop=" in args.mode  # then also V2's host rows as before: fed one by one, every id scanned
    print(f"{'rows':>6} {'V1 us/step':>11} {'V2 us/step':>11} {'V1 us/row':>10} {'V2 us/row':>10} {'V1/V2':>7}"
          + (f" {'V2 before':>10} {'V2 / before':>12}" if stop else ""))
    for rows in map(int, args.batches.split(",")):
        runs = {"v1": v1_run(rows, args), "v2": v2_run(rows, args)}
        if stop:
            runs["plain"] = v2_run(rows, args, prefilter=False)
        best = interleaved_best(args.repeats, runs)
        v1, v2, *plain = (best[name][0] / args.steps * 1e6 for name in runs)
        print(f"{rows:6d} {v1:11.1f} {v2:11.1f} {v1 / rows:10.2f} {v2 / rows:10.2f} {v1 / v2:7.2f}"
              + (f" {plain[0]:10.1f} {v2 / plain[0]:11.3f}x" if stop else ""))


def requests(rows: int, args):
    """The same budget args for every row, and the ids each row appends (a fixed stream)."""
    from e1.budget import Budget
    from e1.engine import KEY, Markers, Mode, budget_args

    markers = Markers("", "", (1,), (2,), frozenset({0}), 0, (3,), (4, 5))
    mode = Mode.parse(args.mode)
    budget = Budget(args.steps // 2, args.steps)
    room = mode.worst_case(budget, markers) + 1
    params = SimpleNamespace(extra_args={KEY: budget_args(budget, mode, markers, "open", room)})
    rng = random.Random(0)
    stream = [rng.randrange(6, args.vocab) for _ in range(args.steps)]
    return params, stream


def with_tokenizer(processor_class):
    """The processor with the tiny byte tokenizer as the served one (a stop pattern matches its text)."""
    from e1.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()

    class Processor(processor_class):
        def tokenizer(self):
            return tokenizer
    return Processor


def v1_run(rows: int, args):
    import torch

    from e1.engine.vllm_processor import BudgetProcessor, _Row

    params, stream = requests(rows, args)

    def run() -> None:
        processor = with_tokenizer(BudgetProcessor)(None, torch.device("cpu"), False)
        outputs = [[] for _ in range(rows)]
        for index, output in enumerate(outputs):
            state = processor.request_state(params, None)
            processor.rows[index] = _Row(state, output, 0)
        logits = torch.zeros(rows, args.vocab)
        for token in stream:
            for output in outputs:
                output.append(token)
            processor.apply(logits)
    return run


def v2_run(rows: int, args, prefilter: bool = True):
    import torch
    from vllm.v1.worker.gpu.sample.logits_processor import (
        LogitsContext,
        LogitsProcRequestState,
    )

    from e1.engine.stop import StopPattern
    from e1.engine.vllm_v2_processor import V2BudgetProcessor

    params, stream = requests(rows, args)
    prompt = 4

    def tensor(values):
        return SimpleNamespace(gpu=values, np=values.numpy(), cpu=values)

    def run() -> None:
        lengths = torch.full((rows,), prompt, dtype=torch.int32)
        req = LogitsProcRequestState(device=torch.device("cpu"), max_num_reqs=rows, vocab_size=args.vocab,
                                     all_token_ids=tensor(torch.zeros(rows, prompt + args.steps, dtype=torch.int32)),
                                     prompt_len=tensor(lengths), prefill_len=tensor(lengths.clone()),
                                     total_len=tensor(lengths.clone()))
        processor = with_tokenizer(V2BudgetProcessor)(None, req)
        StopPattern.prefilter = processor.holding = prefilter  # before: no quiet ids, no held rows
        for slot in range(rows):
            processor.add_request(slot, params)
        StopPattern.prefilter = True
        processor.apply_staged_writes()
        logits = torch.zeros(rows, args.vocab)
        order = [torch.randperm(rows, generator=torch.Generator().manual_seed(k)).int() for k in range(4)]
        for step, token in enumerate(stream):
            slots = order[step % 4]
            ctx = LogitsContext(expanded_idx_mapping=slots, idx_mapping=slots, idx_mapping_np=slots.numpy(),
                                expanded_local_pos=torch.zeros(rows, dtype=torch.int32),
                                input_ids=torch.full((rows,), token), pos=torch.full((rows,), prompt + step - 1),
                                seq_lens_upper_bound_np=None)
            processor.apply(logits, ctx)
    return run


if __name__ == "__main__":
    main()
