"""A request as the numbers of a slot in runner V2's tables (e1.engine.vllm.v2_processor): the columns
of each table, the bits of what a slot can need beyond counting, and :func:`export`, which turns a host
:class:`~e1.engine.row_state.RowState` into them. Host-side only: no torch."""

from __future__ import annotations

import math
from typing import NamedTuple

from e1.engine.row_state import DONE, T_THINK, THINK, RowState
from e1.engine.rules import ANY, NEVER, marker_patterns

NONE = 1 << 62  # a count no row reaches: "no limit" (no budget, no cap, a slot left alone)
# per-slot numbers, one int64 column each: what a step changes, then the request's constants. The phase is
# two flags (thinking: neither); the forced queue is template[qp:qe], jumping from qj to qt on the way
# (rules.end_queue: the start marker, then the rest of a partly written end marker); ``next`` is the id
# forced now (its head, or EOS once done); ``seen`` the next position whose id the slot takes (-1: a slot left alone)
MUTABLE = ("done", "solving", "think", "solve", "seen", "opened", "waits", "qp", "qe", "qj", "qt", "next")
# where thinking is cut and a grace window ends, the solution's and truncate's caps, the room (as a
# ``seen``), "Wait" while think < wait_below, its span in the template and first id, the forced EOS, the
# markers' ids, the template's spans: the start marker ends (the exit text starts) at ls, the end marker at
# at_end, a forced end's queue at stop
CONSTANT = (
    "limit",
    "grace_at",
    "solve_at",
    "cap",
    "room_at",
    "wait_below",
    "wait_at",
    "wait_stop",
    "wait_first",
    "eos",
    "end_last",
    "start_last",
    "end_first",
    "ls",
    "at_end",
    "stop",
)
CURVE = ("begin", "span", "strength", "rate", "scale")  # soft's bias (float64): span = t - begin, scale = expm1(rate)
# what a slot's request can need beyond counting, known on the host when it is written: a step runs only
# the parts its rows need (an OR over its slots' bits on the host: no sync)
QUEUE, WAIT, GRACE, BIAS, EXP, CAP, MARKS, EOS_SET = (1 << k for k in range(8))


class Slot(NamedTuple):
    """A request as a slot's numbers (``export``)."""

    needs: int  # QUEUE, WAIT, ... bits
    mutable: list[int]  # MUTABLE
    constant: list[int]  # CONSTANT
    curve: list[float]  # CURVE
    template: list[int]
    eos_set: list[int]
    tail: list[int]  # the ids so far (RowState's own list; the table keeps the last width - 1)
    end: tuple[int, ...]
    start: tuple[int, ...]

    @property
    def width(self) -> int:
        """The longest marker's ids (the last ids a step must know: that many, the new one included)."""
        return max(len(self.end), len(self.start), 1)


def export(state: RowState | None, seen: int) -> Slot:
    """A host RowState as a slot's numbers. The template holds every id the slot can be forced, as the
    spans its queue is cut from (RowState._force_end's texts, in order): start | exit | "\\n" | end |
    "\\n" "Final Answer:" | the queue it has now if a forced end's | "Wait" | the queue it has now if a "Wait"'s."""
    if state is None:
        return _idle_slot()
    markers, mode, budget = state.markers, state.mode, state.budget
    parts = state.end_parts()  # RowState's texts (e1.engine.rules.end_parts): decided there once
    start, exit_ids, lines, end, after = parts
    wait = list(markers.wait_ids)
    queue = state.queued()
    waiting = bool(queue) and queue[0][1] == T_THINK  # a "Wait" is being written (else a forced end, or nothing)
    forced_end = [] if waiting else [token for token, _ in queue]
    template = [*start, *exit_ids, *lines, *end, *after, *forced_end, *wait, *(t for t, _ in queue if waiting)]
    ls, at_end, stop = parts.spans  # the spans e1.engine.rules.end_queue cuts, host and device alike
    wait_at = stop + len(forced_end)
    qp = (wait_at + len(wait) if waiting else stop) if queue else 0
    limit = state.think_limit if state.budgeted else NONE
    eos = min(markers.eos_ids)
    mutable = _mutable(state, seen, qp, len(queue), eos if state.phase == DONE else template[qp] if queue else 0)
    constant = {
        "limit": limit,
        "grace_at": state.grace_at if state.budgeted else NONE,
        "solve_at": max(budget.solve, 1) if state.budgeted else NONE,
        "cap": NONE if state.total_cap is None else state.total_cap,
        "room_at": seen + state.max_new_tokens - len(state.tokens),
        "wait_below": state.wait_below if wait else -NONE,
        "wait_at": wait_at,
        "wait_stop": wait_at + len(wait),
        "wait_first": wait[0] if wait else 0,
        "eos": eos,
        "end_last": end[-1],
        "start_last": start[-1] if start else NEVER,
        "end_first": end[0],
        "ls": ls,
        "at_end": at_end,
        "stop": stop,
    }
    begin, strength, rate = mode.bias_curve(budget.think)
    needs = _needs(state, bool(queue), strength, rate, max(len(start), len(end)))
    curve = [begin, budget.think - begin, strength, rate, math.expm1(rate) if rate else 1.0]
    # a count past NONE is no limit (a served request without max_tokens has sys.maxsize room): int64 holds it
    return Slot(
        needs,
        [mutable[n] for n in MUTABLE],
        [max(-NONE, min(constant[n], NONE)) for n in CONSTANT],
        curve,
        template,
        sorted(markers.eos_ids),
        state.tokens,
        tuple(end),
        tuple(start),
    )


def _idle_slot() -> Slot:
    """A slot left alone: it never takes an id (seen -1), is never forced, never biased."""
    constant = dict.fromkeys(CONSTANT, 0) | {
        "limit": NONE,
        "grace_at": NONE,
        "solve_at": NONE,
        "cap": NONE,
        "room_at": NONE,
        "wait_below": -NONE,
    }
    mutable = dict.fromkeys(MUTABLE, 0) | {"seen": -1}
    return Slot(
        0, [mutable[n] for n in MUTABLE], [constant[n] for n in CONSTANT], [0.0, 1.0, 0.0, 0.0, 1.0], [], [], [], (), ()
    )


def _mutable(state: RowState, seen: int, qp: int, queued: int, next_id: int) -> dict[str, int]:
    """The numbers a step changes (MUTABLE): the phase, the counts, the forced queue ``template[qp:qp + queued]``."""
    return {
        "done": int(state.phase == DONE),
        "solving": int(state.phase != THINK),
        "think": state.think_tokens,
        "solve": state.solve_tokens,
        "seen": seen,
        "opened": int(state.opened),
        "waits": state.waits_left,
        "qp": qp,
        "qe": qp + queued,
        "qj": 0,
        "qt": 0,
        "next": next_id,
    }


def _needs(state: RowState, queued: bool, strength: float, rate: float, marker_width: int) -> int:
    """The parts of a step the slot needs (QUEUE, WAIT, ... bits); ``marker_width``: the longer marker's ids."""
    mode = state.mode
    return (
        (QUEUE if state.budgeted or queued or mode.wait else 0)
        | (WAIT if mode.wait else 0)
        | (GRACE if state.budgeted and mode.grace else 0)
        | (BIAS if strength else 0)
        | (EXP if strength and rate else 0)
        | (CAP if state.total_cap is not None else 0)
        | (MARKS if marker_width > 1 else 0)
        | (EOS_SET if len(state.markers.eos_ids) > 1 else 0)
    )


def match_rows(end: tuple[int, ...], start: tuple[int, ...], width: int) -> list[list[int]]:
    """The pattern table (:func:`e1.engine.rules.marker_patterns`) a slot's last ``width`` ids are matched against,
    as rows of ``width`` ids, right-aligned: ANY left of a shorter pattern; an empty one (it matches nothing, as an
    empty start marker or a prefix as long as the marker) ends in NEVER."""
    return [
        pad(list(ids), width, ANY, right=True) if ids else [ANY] * (width - 1) + [NEVER]
        for ids in marker_patterns(end, start, width)
    ]


def pad(ids: list[int], width: int, fill: int, right: bool) -> list[int]:
    """``ids`` in ``width`` columns, ``fill`` elsewhere: right-aligned (the last ids, a suffix to match) or left-aligned."""
    filler = [fill] * (width - len(ids))
    return filler + ids if right else ids + filler
