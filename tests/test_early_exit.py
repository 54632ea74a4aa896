"""Mode ``early-exit`` (DEER): the trial phase of the row state, driven by hand-derived token
sequences and by generated ones (hypothesis), then the transformers backend's KV-cache rollback
on a scripted model and on the tiny model (no trial ever confident = elastic, token for token)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.early_exit import EarlyExitState, Trial
from e1.engine.row_state import RowState
from e1.errors import ConfigError
from tests.test_row_state import MARKERS, THINK

PARA = 14  # a transition: a thinking step ends with it
PROMPT = (7, 8, 9, 6)  # the trial prompt: the end marker (7, 8, 9) and "Final Answer:" (6)


def early(budget=Budget(6, 3), spec="early-exit:threshold=0.85:trial=3"):
    return EarlyExitState(budget, Mode.parse(spec), MARKERS, True, 100, transitions=((PARA,),))


def drive(state, script):
    """Feed ``script``: an int is a sampled token; (token, p) a trial answer's greedy token and probability.
    Returns the ids the backend fed, one per accept."""
    fed = []
    for item in script:
        if state.done:
            break
        token, probability = item if isinstance(item, tuple) else (item, None)
        if state.trial_answering:
            fed.append(state.accept(token, probability))
        else:
            fed.append(state.accept(token))
    return fed


def test_a_confident_trial_ends_thinking_and_is_rolled_back():
    state = early()
    fed = drive(state, [THINK, PARA, 99, 99, 99, 99, (30, 0.9), (31, 0.8), (2, 1.0), 99, 99, 99, 12, 2])
    # after PARA: the prompt 7 8 9 6 is fed (the sampled 99s are overridden), then the trial answer
    # 30, 31, EOS (mean p = (0.9 + 0.8 + 1.0) / 3 = 0.9 >= 0.85): PARA is fed again, then 7 8 9 forced
    assert fed == [THINK, PARA, 7, 8, 9, 6, 30, 31, PARA, 7, 8, 9, 12, 2]
    assert state.tokens == [THINK, PARA, 7, 8, 9, 12, 2]  # no trial token in the output
    assert state.forced == [False, False, True, True, True, False, False]
    assert (state.think_tokens, state.solve_tokens, state.trial_decoded) == (2, 2, 7)  # 4 prompt + 3 answer
    assert state.trials == [Trial(position=2, think_tokens=2, ids=(30, 31), confidence=pytest.approx(0.9), exited=True)]
    assert state.exited and state.closed and not state.was_forced and state.finish_reason == "stop"


def test_rollback_counts_the_cache_columns_to_mask():
    state = early()
    drive(state, [THINK, PARA, 0, 0, 0, 0, (30, 0.1), (31, 0.1)])
    assert state.rollback == 0  # the trial is still running (trial=3)
    assert state.accept(32, 0.1) == PARA  # the third answer token ends it: PARA is fed again
    assert state.rollback == 4 + 2 + 1  # prompt 4 + answers 30, 31 fed + the first copy of PARA
    assert state.trials[-1].confidence == pytest.approx(0.1) and not state.trials[-1].exited
    state.accept(THINK)
    assert state.rollback == 0 and state.phase == "think"


def test_budget_t_still_cuts_thinking_when_no_trial_is_confident():
    state = early(Budget(4, 2))
    drive(state, [PARA, 0, 0, 0, 0, (30, 0.5), (2, 0.5), THINK, THINK, THINK, 0, 0, 0, 12, 12, 12])
    # PARA (trial, not confident), then 3 more thinking tokens reach t = 4: the marker is forced
    assert state.tokens == [PARA, THINK, THINK, THINK, 7, 8, 9, 12, 12]
    assert state.was_forced and not state.exited and state.think_tokens == 4 and state.finish_reason == "length"


def test_no_trial_at_t_or_after_thinking():
    state = early(Budget(2, 4))
    drive(state, [THINK, PARA, 0, 0, 0, PARA, PARA, 2])
    # PARA is the t-th token: the cut is due, no trial; PARA in the solution starts none either
    assert state.trials == [] and state.tokens == [THINK, PARA, 7, 8, 9, PARA, PARA, 2]


def test_follow_stops_where_the_first_trial_begins():
    state = early()
    assert state.follow([THINK, THINK, PARA, THINK, PARA]) == 3
    assert state.forced_token() == 7 and state.tokens == [THINK, THINK, PARA]


# -- generated sequences: the real tokens are elastic's, the trials only add ---------------------
real_tokens = st.lists(st.sampled_from([THINK, PARA, 7, 8, 9, 12, 2]), min_size=1, max_size=30)
trial_answers = st.lists(st.lists(st.tuples(st.sampled_from([30, 31, 2]), st.floats(0.0, 1.0)), min_size=3, max_size=3),
                         min_size=30, max_size=30)


@settings(max_examples=150, deadline=None)
@given(real=real_tokens, answers=trial_answers, t=st.integers(0, 8), s=st.integers(1, 5))
def test_generated_real_tokens_match_elastic_until_a_confident_exit(real, answers, t, s):
    state, elastic = early(Budget(t, s)), RowState(Budget(t, s), Mode(), MARKERS, True, 100)
    trials, decoded = iter(answers), 0
    for token in real:
        if state.done or state.exited:
            break
        assert state.accept(token) == elastic.accept(token)  # the same id fed, forced or sampled
        if state.in_trial:
            answer = iter(next(trials))
            while state.in_trial:  # the prompt (4 forced ids), then up to trial=3 answer ids or EOS
                state.accept(*next(answer)) if state.trial_answering else state.accept(0)
                decoded += 1
        assert (state.tokens, state.forced, state.kinds) == (elastic.tokens, elastic.forced, elastic.kinds)
    assert state.trial_decoded == decoded == sum(len(PROMPT) + min(3, len(t.ids) + 1) for t in state.trials)
    assert all(t.exited == (t.confidence >= 0.85) for t in state.trials)
    assert sum(t.exited for t in state.trials) <= 1 and state.exited == any(t.exited for t in state.trials)
    if state.exited:  # the marker follows at once, unforced-by-budget
        assert [state.accept(0) for _ in range(3)] == [7, 8, 9] and state.closed and not state.was_forced


@settings(max_examples=150, deadline=None)
@given(real=real_tokens, t=st.integers(0, 8), s=st.integers(1, 5))
def test_extend_equals_accepting_one_by_one(real, t, s):
    """The vLLM processor feeds ids with ``extend`` (plain runs as slices): same records as ``accept``."""
    ids = [token for token in real for token in (token, 0, 0, 0, 0, 31, 31, 31)]  # room for prompts and answers
    one, many = early(Budget(t, s)), early(Budget(t, s))
    for token in ids:
        if one.done:
            break
        one.accept(token)
    many.extend(ids)
    assert (many.tokens, many.forced, many.kinds, many.trials) == (one.tokens, one.forced, one.kinds, one.trials)
    assert (many.think_tokens, many.solve_tokens, many.trial_decoded) == (one.think_tokens, one.solve_tokens, one.trial_decoded)


# -- the mode string ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, threshold, trial, texts", [
    ("early-exit", 0.95, 16, ("\n\n", "Wait", " Wait")),
    ("early-exit:threshold=0.9:trial=8:at=para", 0.9, 8, ("\n\n",)),
    ("early-exit:at='Hmm'", 0.95, 16, ("Hmm",)),
])
def test_mode_options_parse_and_print_back(text, threshold, trial, texts):
    mode = Mode.parse(text)
    assert (mode.confidence_threshold, mode.trial_tokens, mode.transition_texts) == (threshold, trial, texts)
    assert Mode.parse(str(mode)) == mode


@pytest.mark.parametrize("text, says", [
    ("early-exit:treshold=0.9", "did you mean 'threshold'"),
    ("early-exit:threshold=0", "threshold must be in (0, 1]"),
    ("early-exit:threshold=1.5", "threshold must be in (0, 1]"),
    ("early-exit:trial=0", "trial must be >= 1"),
    ("early-exit:at=pra", "did you mean 'para'"),
    ("elastic:threshold=0.9", "threshold= does not fit mode 'elastic'"),
    ("budget-forcing:at=para", "at= does not fit"),
])
def test_bad_mode_options_are_one_clear_line(text, says):
    with pytest.raises(ConfigError) as caught:
        Mode.parse(text)
    assert says in f"{caught.value} ({caught.value.hint})"
