"""Timing for side-by-side benchmarks: the runs take turns, so a shared machine's drift hits all alike."""

from __future__ import annotations

import time


def interleaved_best(repeats: int, runs: dict) -> dict:
    """``{name: (best seconds, what the run returned)}``, each run called ``repeats`` times in turn."""
    best = {name: (float("inf"), None) for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            result = fn()
            seconds = time.perf_counter() - start
            if seconds < best[name][0]:
                best[name] = (seconds, result)
    return best


def common_text(tokenizer, counts) -> str:
    """The text of the commonest token in ``counts`` (a Counter of ids) that encodes back to itself
    alone (a byte-fallback piece does not): a transition early-exit will meet."""
    for token, _ in counts.most_common():
        text = tokenizer.decode([token])
        if tokenizer.encode(text, add_special_tokens=False) == [token]:
            return text
    raise SystemExit("no token of the output encodes back to itself")
