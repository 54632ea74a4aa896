"""RowState, the per-row phase machine, driven token by token (no model at all)."""

from e1.budget import Budget
from e1.engine.base import Mode
from e1.engine.markers import PROMPT_OPEN, Markers
from e1.engine.row_state import RowState

# a marker of three tokens (7, 8, 9); EOS 2; "Wait" is (5,), "Final Answer:" is (6,)
MARKERS = Markers(
    start_text="<t>",
    end_text="</t>",
    start_ids=(3,),
    end_ids=(7, 8, 9),
    eos_ids=frozenset({2}),
    pad_id=0,
    wait_ids=(5,),
    answer_ids=(6,),
)
THINK = 11


def drive(state, sampled):
    for token in sampled:
        if state.done:
            break
        state.accept(token)
    return state


def test_partly_written_marker_is_completed_not_repeated():
    # t = 3: the model writes 11, 11, 7 (the marker's first token) when the budget runs out
    state = drive(RowState(Budget(3, 4), Mode(), MARKERS, PROMPT_OPEN, 100), [THINK, THINK, 7, 99, 99, 12, 2])
    assert state.tokens[:5] == [THINK, THINK, 7, 8, 9]
    assert state.forced[:5] == [False, False, False, True, True]
    assert state.think_tokens == 3 and state.was_forced
    think, solution = state.split()
    assert think == [THINK, THINK] and solution == [12]  # the marker belongs to neither side
    assert state.finish_reason == "stop" and state.solve_tokens == 2  # 12 and EOS


def test_natural_marker_counts_towards_thinking():
    state = drive(RowState(Budget(5, 4), Mode(), MARKERS, PROMPT_OPEN, 100), [THINK, 7, 8, 9, 12, 12, 12, 12, 12])
    assert not state.was_forced and state.think_tokens == 4
    assert state.solve_tokens == 4 and state.finish_reason == "length"


def test_eos_while_thinking_ends_the_row_unforced():
    state = drive(RowState(Budget(5, 4), Mode(), MARKERS, PROMPT_OPEN, 100), [THINK, 2, 12])
    assert state.done and state.finish_reason == "stop" and not state.was_forced and not state.closed


def test_budget_forcing_wait_replaces_a_single_token_end():
    markers = Markers(
        start_text="<t>",
        end_text="</t>",
        start_ids=(3,),
        end_ids=(4,),
        eos_ids=frozenset({2}),
        pad_id=0,
        wait_ids=(5,),
        answer_ids=(6,),
    )
    state = drive(
        RowState(Budget(6, 2), Mode("budget-forcing", wait=1), markers, PROMPT_OPEN, 100), [THINK, 4, THINK, 4, 12, 2]
    )
    # the first natural end (4) became Wait (5, forced); the second ended thinking
    assert state.tokens == [THINK, 5, THINK, 4, 12, 2]
    assert state.forced == [False, True, False, False, False, False]
    assert state.think_tokens == 4 and not state.was_forced


def test_context_room_caps_every_mode():
    state = drive(RowState(Budget(50, 50), Mode("none"), MARKERS, PROMPT_OPEN, 3), [THINK] * 10)
    assert len(state.tokens) == 3 and state.finish_reason == "length"


# -- exit text and grace window (issue [D]) --------------------------------------------------
PERIOD = 13  # a token that ends a sentence
EXIT = (20, 21)  # an exit text of two tokens


def test_exit_text_is_forced_before_the_marker_and_counted_in_neither_budget():
    state = drive(
        RowState(Budget(2, 3), Mode(exit="'x'"), MARKERS, PROMPT_OPEN, 100, exit_ids=EXIT),
        [THINK, THINK, 99, 99, 99, 99, 99, 12, 12, 2],
    )
    # t = 2 thinking tokens, then exit text 20 21 and the marker 7 8 9 forced, then the solution
    assert state.tokens == [THINK, THINK, 20, 21, 7, 8, 9, 12, 12, 2]
    assert state.forced == [False, False, True, True, True, True, True, False, False, False]
    assert (state.think_tokens, state.solve_tokens) == (2, 3)
    think, solution = state.split()
    assert think == [THINK, THINK] and solution == [12, 12]


def test_exit_text_is_skipped_when_the_model_was_already_writing_the_marker():
    state = drive(
        RowState(Budget(3, 2), Mode(exit="'x'"), MARKERS, PROMPT_OPEN, 100, exit_ids=EXIT), [THINK, THINK, 7, 99, 99, 2]
    )
    assert state.tokens[:5] == [THINK, THINK, 7, 8, 9]  # completed, no exit text inside the marker


def test_grace_window_lets_the_sentence_finish():
    # t = 2, grace 3: at t the last token (THINK) ends no sentence; the model writes 2 more, the
    # second a period: forced right after it, thinking counted 4
    state = drive(
        RowState(Budget(2, 2), Mode(grace=3), MARKERS, PROMPT_OPEN, 100, sentence_ends=frozenset({PERIOD})),
        [THINK, THINK, THINK, PERIOD, 99, 99, 99, 12, 2],
    )
    assert state.tokens[:7] == [THINK, THINK, THINK, PERIOD, 7, 8, 9]
    assert state.think_tokens == 4 and state.was_forced


def test_grace_window_runs_out():
    # no sentence end within grace 2: forced after t + 2 = 4 thinking tokens
    state = drive(
        RowState(Budget(2, 2), Mode(grace=2), MARKERS, PROMPT_OPEN, 100, sentence_ends=frozenset({PERIOD})),
        [THINK] * 4 + [99, 99, 99, 12, 2],
    )
    assert state.tokens[:7] == [THINK] * 4 + [7, 8, 9] and state.think_tokens == 4


def test_grace_window_forces_at_once_when_t_ends_a_sentence():
    state = drive(
        RowState(Budget(2, 2), Mode(grace=5), MARKERS, PROMPT_OPEN, 100, sentence_ends=frozenset({PERIOD})),
        [THINK, PERIOD, 99, 99, 99, 12, 2],
    )
    assert state.tokens[:5] == [THINK, PERIOD, 7, 8, 9] and state.think_tokens == 2


def test_mode_options_parse_and_refuse():
    import pytest

    from e1.errors import ConfigError

    assert Mode.parse("elastic:exit=qwen").exit_text.startswith("\n\nConsidering the limited time")
    assert Mode.parse("elastic:exit=marker") == Mode("elastic")
    for bad in ("truncate:grace=3", "none:exit=qwen", "elastic:exit=qwn", "elastic:grace=x", "elastic:foo=1"):
        with pytest.raises(ConfigError):
            Mode.parse(bad)


def test_notes_are_forced_at_their_thinking_count_and_count_as_thinking():
    # t = 7, a note (30, 31) due at 2 thinking tokens, another at 5: the model's 11s, the notes forced in between
    state = RowState(Budget(7, 2), Mode(), MARKERS, PROMPT_OPEN, 100, notes=((2, (30, 31)), (5, (32,)), (6, (33,))))
    assert state.tokens_before_forcing() == 2  # a late-seeing backend must look again at the first note
    drive(state, [THINK] * 10 + [12, 12])  # a forced id takes the place of the id sampled then
    # 11 11 | 30 31 (think = 4) | 11 (5) | 32 (6) | 11 (7 = t: the cut; the note at 6 would not fit) | 7 8 9 | 12 12
    assert state.tokens == [THINK, THINK, 30, 31, THINK, 32, THINK, 7, 8, 9, 12, 12]
    assert state.forced == [False, False, True, True, False, True, False, True, True, True, False, False]
    assert state.think_tokens == 7 and state.split()[0] == [THINK, THINK, 30, 31, THINK, 32, THINK]
    assert state.think_end == "budget" and state.forced_text_ids() == []  # a note is thinking, not forced text


def test_notes_at_or_past_the_cut_are_never_written():
    state = RowState(Budget(3, 2), Mode(), MARKERS, PROMPT_OPEN, 100, notes=((3, (30,)), (9, (31,))))
    assert state.notes == ()
    assert drive(state, [THINK] * 6).tokens[:6] == [THINK] * 3 + [7, 8, 9]
