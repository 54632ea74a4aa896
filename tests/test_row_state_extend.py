"""``RowState.extend`` (the vectorised replay behind the vLLM backend's records) against the
per-token state machine: on any id sequence (every marker id, EOS and sentence end anywhere,
multi-token markers, prompts that leave thinking open, closed or never opened), in every mode, fed whole or in
pieces, both leave exactly the same state."""

from __future__ import annotations

import functools
import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode
from e1.engine.markers import PROMPT_OPEN, PROMPT_THINKING, Markers
from e1.engine.row_state import RowState, thinking_limits_from
from e1.engine.rules import at_cut, over_cap

EOS, START, WAIT, ANSWER, PERIOD, PLAIN = 2, 3, 5, 6, 13, 11
EXIT = (20, 21)
MARKERS = {  # a one-token end marker and a three-token one (7 8 9); a two-token start marker (3 4)
    "short": Markers("<t>", "</t>", (START,), (7,), frozenset({EOS}), 0, (WAIT,), (ANSWER,)),
    "long": Markers("<t>", "</t>", (START, 4), (7, 8, 9), frozenset({EOS, 1}), 0, (WAIT,), (ANSWER,)),
}
MODES = st.sampled_from(
    [
        Mode("elastic"),
        Mode("budget-forcing"),
        Mode("budget-forcing", wait=1),
        Mode("budget-forcing", wait=3),
        Mode("elastic", grace=3),
        Mode("elastic", exit="'x'"),
        Mode("budget-forcing", wait=2, grace=2),
        Mode("truncate"),
        Mode("none"),
    ]
)
# ids mostly plain, with every special id likely to land at every position
IDS = st.lists(st.sampled_from([PLAIN, PLAIN, PLAIN, PLAIN, 12, EOS, 1, START, 4, 7, 8, 9, WAIT, PERIOD]), max_size=80)
FIELDS = (
    "tokens",
    "forced",
    "kinds",
    "phase",
    "think_tokens",
    "solve_tokens",
    "closed",
    "was_forced",
    "waits_left",
    "finish_reason",
    "opened",
)


def fresh(markers, mode, think, solve, opens, room, notes=()) -> RowState:
    return RowState(
        Budget(think, solve),
        mode,
        MARKERS[markers],
        opens,
        room,
        EXIT if mode.exit_text else (),
        frozenset({PERIOD}) if mode.grace else frozenset(),
        notes=notes,
    )


def stepwise(state: RowState, ids) -> int:
    taken = 0
    for token in ids:
        if state.done:
            break
        state.accept(token)
        taken += 1
    return taken


def snapshot(state: RowState) -> dict:
    return {name: getattr(state, name) for name in FIELDS} | {"queue": list(state._queue)}


@settings(max_examples=int(os.environ.get("E1_HYPOTHESIS_EXAMPLES", 600)), deadline=None)
@given(
    markers=st.sampled_from(sorted(MARKERS)),
    mode=MODES,
    think=st.integers(0, 12),
    solve=st.integers(1, 12),
    opens=st.sampled_from(PROMPT_THINKING),
    room=st.integers(1, 90),
    ids=IDS,
    cuts=st.lists(st.integers(0, 80), max_size=3),
)
def test_extend_leaves_the_state_the_token_loop_leaves(markers, mode, think, solve, opens, room, ids, cuts):
    expected, ours = fresh(markers, mode, think, solve, opens, room), fresh(markers, mode, think, solve, opens, room)
    taken = stepwise(expected, ids)
    pieces, start = [], 0
    for cut in sorted(cuts) + [len(ids)]:  # fed in pieces, as the vLLM backend's rounds do
        pieces.append(ids[start : max(start, cut)])
        start = max(start, cut)
    assert sum(ours.extend(piece) for piece in pieces) == taken
    assert snapshot(ours) == snapshot(expected)
    assert ours.split() == expected.split()


# a mode's notes (Mode.notes as ids): forced into the thinking at rising thinking counts, ids that include markers
NOTES = st.lists(
    st.tuples(st.integers(1, 12), st.lists(st.sampled_from([30, 31, 7, PERIOD]), min_size=1, max_size=3)), max_size=4
).map(lambda drawn: tuple(sorted((at, tuple(ids)) for at, ids in drawn)))


@settings(max_examples=int(os.environ.get("E1_HYPOTHESIS_EXAMPLES", 300)), deadline=None)
@given(
    markers=st.sampled_from(sorted(MARKERS)),
    mode=MODES,
    think=st.integers(0, 12),
    solve=st.integers(1, 12),
    opens=st.sampled_from(PROMPT_THINKING),
    room=st.integers(1, 90),
    ids=IDS,
    notes=NOTES,
    cut=st.integers(0, 80),
)
def test_extend_forces_notes_where_the_token_loop_does(markers, mode, think, solve, opens, room, ids, notes, cut):
    """With notes (the texts an option forces into the thinking) extend's runs stop where a note is due."""
    expected = fresh(markers, mode, think, solve, opens, room, notes)
    ours = fresh(markers, mode, think, solve, opens, room, notes)
    taken = stepwise(expected, ids)
    assert ours.extend(ids[:cut]) + ours.extend(ids[cut:]) == taken
    assert snapshot(ours) == snapshot(expected) and ours.split() == expected.split()


def test_extend_counts_a_whole_budget_arithmetically():
    # t = 4, s = 3: four thinking ids, the forced end marker (vLLM returns it as sampled), three solution ids
    state = fresh("short", Mode("elastic"), 4, 3, PROMPT_OPEN, 100)
    assert state.extend([PLAIN] * 4 + [7] + [12] * 3 + [EOS, PLAIN]) == 8
    assert (state.think_tokens, state.solve_tokens, state.was_forced, state.finish_reason) == (4, 3, True, "length")
    assert state.forced == [False] * 4 + [True] + [False] * 3


@settings(max_examples=50, deadline=None)
@given(sequences=st.lists(st.lists(st.integers(0, 379), max_size=40), max_size=6), clean_up=st.booleans())
def test_decode_all_gives_the_texts_decode_gives(sequences, clean_up):
    from e1.engine.row_engine import decode_all

    tokenizer = TOKENIZER()
    tokenizer.clean_up_tokenization_spaces = clean_up  # True: the wrapper's own path, clean-up included
    assert decode_all(tokenizer, sequences) == [tokenizer.decode(ids, skip_special_tokens=True) for ids in sequences]


@functools.cache
def TOKENIZER():
    from e1.models.tiny import build_tokenizer

    return build_tokenizer()  # 380 ids, the think markers and EOS among them


@settings(max_examples=int(os.environ.get("E1_HYPOTHESIS_EXAMPLES", 300)), deadline=None)
@given(
    markers=st.sampled_from(sorted(MARKERS)),
    mode=st.one_of(MODES, st.sampled_from([Mode.parse("soft:start=0"), Mode.parse("soft:ceiling=1.5:start=0.5")])),
    think=st.integers(0, 12),
    solve=st.integers(1, 12),
    opens=st.sampled_from(PROMPT_THINKING),
    room=st.integers(1, 90),
    ids=IDS,
)
def test_the_limits_found_once_leave_the_state_the_rules_checked_at_every_id_leave(
    markers, mode, think, solve, opens, room, ids
):
    """A thinking id below ``thinking_limits_from`` checks neither the cut nor truncate's cap: the row ends up as
    one that runs both rules after every thinking id."""
    expected, ours = fresh(markers, mode, think, solve, opens, room), fresh(markers, mode, think, solve, opens, room)
    expected._think_from = 0  # the rules after every thinking id
    assert stepwise(ours, ids) == stepwise(expected, ids)
    assert snapshot(ours) == snapshot(expected) and ours.split() == expected.split()


@given(limit=st.none() | st.integers(0, 5000), cap=st.none() | st.integers(0, 5000))
def test_thinking_limits_from_is_the_first_count_a_rule_holds_at(limit, cap):
    holds = [
        k for k in range(5002) if (limit is not None and at_cut(k, limit)) or (cap is not None and over_cap(k, 0, cap))
    ]
    assert thinking_limits_from(limit, cap) == (holds[0] if holds else math.inf)
