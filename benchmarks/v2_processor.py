"""e1's vLLM logits processors per decoding step, side by side in one run: the V1-interface processor
(a RowState per request, a Python loop over the batch's rows every step) and the runner V2 processor
(every request's state as device tensors, one batch of tensor operations per step, no host sync).

    python benchmarks/v2_processor.py [--modes elastic,soft:start=0,budget-forcing,truncate]
                                      [--batches 8,64,256,1024 --steps 200 --vocab 64 --repeats 3]
    python benchmarks/v2_processor.py --modes "elastic:stop='0[0-3]'"   # a text mode: V2's host path

Both see the same requests (each of ``--modes`` in turn; ``soft:start=0`` biases every step, so the V1
processor cannot skip a row) over the same ids: thinking until the budget forces the end marker,
then the solution. Each step the V1 processor gets its rows' output lists grown by one id, the V2
processor a ``LogitsContext`` (rows shuffled, as runner V2 reorders them). The logits are ``--vocab``
wide: small, so that what is timed is the processors' own per-step work, not a pass over a real
vocabulary (which either processor's masking makes, on the GPU). A ``stop=`` mode's rows run on V2's
host path (their ids read back each step), with the tiny byte tokenizer; such a mode also times V2's host path
as it was before quiet ids ("V2 before": every id of a stop row scanned; held rows kept). CPU
only: no vLLM engine runs.

Prints, per mode and batch: aten ops per step (each one a kernel launch or a view on a GPU, counted
through torch's dispatcher in a separate, untimed pass; the mean over the run's steps), microseconds
per step (best of ``--repeats``, the runs taking turns; setup not timed), and V1's time as a multiple
of V2's. V2's ops per step must not grow with the batch (tests/test_vllm_v2_processor.py pins that).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--modes",
        default="elastic,soft:start=0,budget-forcing,truncate",
        help="each request's mode, one table row group per mode (comma-separated mode texts)",
    )
    parser.add_argument("--batches", default="8,64,256,1024", help="rows per step, comma-separated")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    from e1.engine import Mode

    torch.set_num_threads(1)
    print(f"apply() per step, {args.steps} steps, vocab {args.vocab}, best of {args.repeats} (torch threads: 1)")
    print(
        f"{'mode':<16} {'rows':>5} {'V1 ops':>7} {'V2 ops':>7} {'V1 us/step':>11} {'V2 us/step':>11} {'V1/V2':>6}"
        f" {'V2 before':>10} {'V2/before':>10}"
    )
    for mode in Mode.split_list(args.modes):
        stop = "stop=" in mode  # then also V2's host rows without quiet ids: every id scanned
        for rows in map(int, args.batches.split(",")):
            runs = {"v1": v1_run(rows, mode, args), "v2": v2_run(rows, mode, args)}
            if stop:
                runs["before"] = v2_run(rows, mode, args, prefilter=False)
            ops = {name: count_ops(run) / args.steps for name, run in runs.items()}
            best = {name: float("inf") for name in runs}
            for _ in range(args.repeats):  # the runs take turns, so a shared machine's drift hits both alike
                for name, run in runs.items():
                    best[name] = min(best[name], run(None))
            v1, v2 = (best[name] / args.steps * 1e6 for name in ("v1", "v2"))
            before = best["before"] / args.steps * 1e6 if stop else None
            print(
                f"{mode:<16} {rows:5d} {ops['v1']:7.1f} {ops['v2']:7.1f} {v1:11.1f} {v2:11.1f} {v1 / v2:6.2f}"
                + (f" {before:10.1f} {v2 / before:9.3f}x" if stop else f" {'-':>10} {'-':>10}")
            )


def count_ops(run) -> int:
    """The aten ops one whole run's ``apply`` calls dispatch (setup not counted)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    run(Count)
    del torch
    return Count.ops


def requests(rows: int, mode_text: str, args):
    """The same budget args for every row, and the ids each row appends (a fixed stream)."""
    from e1.budget import Budget
    from e1.engine import KEY, Markers, Mode, budget_args

    markers = Markers("", "", (1,), (2,), frozenset({0}), 0, (3,), (4, 5))
    mode = Mode.parse(mode_text)
    budget = Budget(args.steps // 2, args.steps)
    room = (mode.worst_case(budget, markers) or budget.total) + 1
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


def timed(steps, counter) -> float:
    """Seconds for ``steps`` (callables), or, given a dispatch ``counter`` class, the steps run under it."""
    if counter is not None:
        with counter():
            for step in steps:
                step()
        return 0.0
    start = time.perf_counter()
    for step in steps:
        step()
    return time.perf_counter() - start


def v1_run(rows: int, mode: str, args):
    import torch

    from e1.engine.vllm.processor import BudgetProcessor, _Row

    params, stream = requests(rows, mode, args)

    def run(counter) -> float:
        processor = with_tokenizer(BudgetProcessor)(None, torch.device("cpu"), False)
        outputs = [[] for _ in range(rows)]
        for index, output in enumerate(outputs):
            state = processor.request_state(params, None)
            processor.rows[index] = _Row(state, output, 0)
        logits = torch.zeros(rows, args.vocab)

        def step(token):
            for output in outputs:
                output.append(token)
            processor.apply(logits)

        return timed([lambda token=token: step(token) for token in stream], counter)

    return run


def v2_run(rows: int, mode: str, args, prefilter: bool = True):
    import torch
    from vllm.v1.worker.gpu.sample.logits_processor import (
        LogitsContext,
        LogitsProcRequestState,
    )

    from e1.engine.stop import StopPattern
    from e1.engine.vllm.v2_processor import V2BudgetProcessor

    params, stream = requests(rows, mode, args)
    prompt = 4

    def tensor(values):
        return SimpleNamespace(gpu=values, np=values.numpy(), cpu=values)

    def run(counter) -> float:
        lengths = torch.full((rows,), prompt, dtype=torch.int32)
        req = LogitsProcRequestState(
            device=torch.device("cpu"),
            max_num_reqs=rows,
            vocab_size=args.vocab,
            all_token_ids=tensor(torch.zeros(rows, prompt + args.steps, dtype=torch.int32)),
            prompt_len=tensor(lengths),
            prefill_len=tensor(lengths.clone()),
            total_len=tensor(lengths.clone()),
        )
        processor = with_tokenizer(V2BudgetProcessor)(None, req)
        StopPattern.prefilter = prefilter  # before: no quiet ids
        for slot in range(rows):
            processor.add_request(slot, params)
        StopPattern.prefilter = True
        processor.apply_staged_writes()
        logits = torch.zeros(rows, args.vocab)
        order = [torch.randperm(rows, generator=torch.Generator().manual_seed(k)).int() for k in range(4)]
        contexts = [
            LogitsContext(
                expanded_idx_mapping=order[step % 4],
                idx_mapping=order[step % 4],
                idx_mapping_np=order[step % 4].numpy(),
                expanded_local_pos=torch.zeros(rows, dtype=torch.int32),
                input_ids=torch.full((rows,), token, dtype=torch.int32),
                pos=torch.full((rows,), prompt + step - 1),
                seq_lens_upper_bound_np=None,
            )
            for step, token in enumerate(stream)
        ]
        return timed([lambda ctx=ctx: processor.apply(logits, ctx) for ctx in contexts], counter)

    return run


if __name__ == "__main__":
    main()
