"""``stop=`` pattern cost per thinking token, side by side in one run: RowState.accept without a
pattern (elastic), with the incremental scanner (e1.engine.stop), and with the id-window fallback
that decodes the last ids afresh for every token (what every tokenizer paid before; now only a
tokenizer without a Rust backend does).

    python benchmarks/stop.py [--rows 256 --tokens 2048 --repeats 3]

The vLLM processor does this work for every row at every step while a pattern is set, on the
CPU between two forward passes: on an H200 at batch 256, t = s = 1k, the decode-afresh matcher
made ``elastic:stop`` cost 2.45x plain vLLM per token (`benchmarks/engine_vllm.py`'s row). Prints
microseconds per row-token and each ratio to elastic without a pattern, and per step at --rows.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256, help="rows per step (for the per-step figure)")
    parser.add_argument("--tokens", type=int, default=2048, help="thinking tokens per row")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from e1.budget import Budget
    from e1.engine.base import Mode
    from e1.engine.markers import resolve_markers
    from e1.engine.row_state import RowState
    from e1.engine.stop import StopPattern, _IdWindowScanner
    from e1.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    markers = resolve_markers(tokenizer)
    text = "Let me add 17 and 25: that is 42. Wait, check é → 42 again. " * (args.tokens // 8)
    ids = tokenizer.encode(text, add_special_tokens=False)[: args.tokens]
    pattern = r"\\boxed\{"

    class Fallback(StopPattern):  # the decode-afresh matcher of 64 ids, on the same fast tokenizer
        def scanner(self):
            return _IdWindowScanner(self)

    def run(stop):
        def feed():
            state = RowState(Budget(len(ids) + 1, 4), Mode(), markers, True, len(ids) + 8, stop=stop)
            for token in ids:
                state.accept(token)
            assert state.think_tokens == len(ids) and state.think_end == "open"
            return len(ids)

        return feed

    stops = {
        "elastic, no pattern": None,
        "stop=, incremental scanner": StopPattern(tokenizer, pattern),
        "stop=, decode 64 ids afresh": Fallback(tokenizer, pattern, window=256),
    }
    runs = {name: run(stop) for name, stop in stops.items()}
    show(
        f"RowState alone: {len(ids)} thinking tokens, pattern {pattern!r}, best of {args.repeats}; "
        f"per step at {args.rows} rows",
        interleaved_best(args.repeats, runs),
        args.rows,
    )
    processor = {name: processor_run(stop, ids, markers, args.rows) for name, stop in stops.items()}
    show(
        f"vLLM's logits processor (e1.engine.vllm.processor), {args.rows} rows, one token per row per step",
        interleaved_best(args.repeats, processor),
        1,
    )


def show(title: str, results: dict, rows: int) -> None:
    base = results["elastic, no pattern"][0] / results["elastic, no pattern"][1]
    print(title)
    for name, (secs, count) in results.items():
        per = secs / count
        print(
            f"  {name:28s} {per * 1e6:8.2f} us/{'token' if rows > 1 else 'step '}  "
            f"{per * rows * 1e3:7.2f} ms/step  {per / base:6.2f}x elastic"
        )


def processor_run(stop, ids, markers, rows: int):
    """The processor's ``apply`` at every step, ``rows`` requests each appending one id (no vLLM engine:
    the rows are set as vLLM's update_state would set them; the logits are one small tensor)."""
    try:
        import torch

        import e1.engine.vllm.processor as vllm_processor
    except ImportError:  # no vLLM here: the RowState figures above still stand
        return lambda: 1
    from e1.budget import Budget
    from e1.engine.base import Mode
    from e1.engine.row_state import RowState

    def feed():
        processor = vllm_processor.BudgetProcessor(None, torch.device("cpu"), False)
        outputs = [[] for _ in range(rows)]
        for index, output in enumerate(outputs):
            state = RowState(Budget(len(ids) + 1, 4), Mode(), markers, True, len(ids) + 8, stop=stop)
            processor.rows[index] = vllm_processor._Row(state, output, min(markers.eos_ids))
        logits = torch.zeros(rows, 8)
        for token in ids:
            for output in outputs:
                output.append(token)
            processor.apply(logits)
        return len(ids)

    return feed


if __name__ == "__main__":
    main()
