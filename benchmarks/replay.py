"""What the vLLM backend spends after ``llm.generate`` returns, old path vs new, side by side in one run.

    python benchmarks/replay.py [--rows 512 --think 512 --solve 512 --repeats 3]

Every output id is replayed through the row's RowState (its counts, forced mask and text split),
then the thinking and the solution are decoded. Old: ``accept`` id by id and two ``decode`` calls
per row; new: ``RowState.extend`` (plain stretches as slices, events through ``accept``) and one
``batch_decode`` for the whole call (``RowEngine.completions``). The ids are what vLLM returns in
each case, made by the state machine itself from random samples (no model):

- forced:  a random-weight model (the H100 benchmark): thinks to t, forced ``</think>``, s solution ids, EOS;
- natural: thinking ends by itself before t, the solution with EOS before s;
- grace:   ``elastic:grace=64``: the forced end waits for a sentence end (the token loop's part).

Prints seconds per 1M ids (best of --repeats) and the ratio; the records are checked equal.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best  # noqa: E402


def rows_of_ids(engine, scenario: str, args, rng: random.Random) -> list[list[int]]:
    """Each row's output ids as vLLM gives them back (the forced ids included, the final EOS too)."""
    markers, plain = engine.markers, [i for i in range(args.vocab) if i not in engine.sentence_ends()]
    specials = set(markers.eos_ids) | set(markers.end_ids) | set(markers.start_ids)
    plain = [i for i in plain if i not in specials]
    ends, eos, period = markers.end_ids, min(markers.eos_ids), min(engine.sentence_ends())
    rows = []
    for _ in range(args.rows):
        state = fresh_state(engine, scenario, args)
        stop_think = rng.randrange(1, args.think) if scenario == "natural" else None
        stop_solve = rng.randrange(1, args.solve) if scenario == "natural" else None
        ids = []
        while not state.done:
            forced = state.forced_token()
            if forced is None and stop_think is not None and state.phase == "think" and len(ids) == stop_think:
                forced = ends[0]  # the model writes </think> (a one-token marker) by itself
            if forced is None and stop_solve is not None and state.solve_tokens == stop_solve:
                forced = eos
            if forced is None and scenario == "grace" and rng.random() < 1 / 32:
                forced = period
            ids.append(state.accept(forced if forced is not None else rng.choice(plain)))
        rows.append(ids + [eos])  # the EOS the processor forces once the row is done
    return rows


def fresh_state(engine, scenario: str, args):
    """A row's state as the vLLM backend starts it (an empty prompt: thinking not opened)."""
    from e1.budget import Budget
    from e1.engine.base import Mode, Sampling

    mode = Mode.parse("elastic:grace=64" if scenario == "grace" else "elastic")
    return engine.row_state([], Budget(args.think, args.solve), mode, Sampling(temperature=0.0))


def old_path(engine, rows, scenario, args):
    """The replay before: ``accept`` id by id, then each row's texts decoded alone."""
    from e1.engine.row_state import T_ANSWER, T_SOLVE, T_THINK

    out = []
    for ids in rows:
        state = fresh_state(engine, scenario, args)
        for token in ids:
            if state.done:
                break
            state.accept(token)
        think = [t for t, k in zip(state.tokens, state.kinds) if k == T_THINK]  # the split as it was
        solution = [t for t, k in zip(state.tokens, state.kinds) if k in (T_ANSWER, T_SOLVE)]
        decode = engine.tokenizer.decode
        out.append(
            (
                decode(think, skip_special_tokens=True),
                decode(solution, skip_special_tokens=True),
                state.think_tokens,
                state.solve_tokens,
                state.was_forced,
                list(state.tokens),
                list(state.forced),
            )
        )
    return out


def new_path(engine, rows, scenario, args):
    """The replay now: ``RowState.extend`` per row, one batch decode (``RowEngine.completions``)."""
    states = [fresh_state(engine, scenario, args) for _ in rows]
    for state, ids in zip(states, rows):
        state.extend(ids)
    records = engine.completions(states, [(i, 0) for i in range(len(rows))], [[]] * len(rows), [0] * len(rows))
    return [
        (c.think_text, c.solution_text, c.think_tokens, c.solve_tokens, c.forced, c.token_ids, c.forced_mask)
        for c in records
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--think", type=int, default=512)
    parser.add_argument("--solve", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from e1.engine.markers import resolve_markers
    from e1.engine.row_engine import RowEngine
    from e1.models.tiny import build_tokenizer

    engine = RowEngine()
    engine.tokenizer = build_tokenizer()  # e1's tiny BPE (380 ids): a real vocabulary's longer tokens decode slower
    engine.markers, engine.max_context = resolve_markers(engine.tokenizer), None
    args.vocab = len(engine.tokenizer)
    rng = random.Random(0)
    print(
        f"{args.rows} rows, elastic t={args.think} s={args.solve}, vocabulary {args.vocab}; "
        f"seconds per 1M output ids, best of {args.repeats}"
    )
    print(f"  {'ids':10s} {'old (accept + decode)':>22s} {'new (extend + batch)':>21s} {'speed-up':>9s}")
    for scenario in ("forced", "natural", "grace"):
        rows = rows_of_ids(engine, scenario, args, rng)
        count = sum(map(len, rows))
        best = interleaved_best(
            args.repeats,
            {
                "old": functools.partial(old_path, engine, rows, scenario, args),
                "new": functools.partial(new_path, engine, rows, scenario, args),
            },
        )
        assert best["old"][1] == best["new"][1], f"{scenario}: the two paths' records differ"
        old, new = (best[name][0] * 1e6 / count for name in ("old", "new"))
        print(f"  {scenario:10s} {old:20.3f}s {new:20.3f}s {old / new:8.1f}x   ({count} ids)")


if __name__ == "__main__":
    main()
