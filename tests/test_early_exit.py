"""Mode ``early-exit`` (DEER): the trial phase of the row state, driven by hand-derived token
sequences and by generated ones (hypothesis), then the transformers backend's KV-cache rollback
on a scripted model and on the tiny model (no trial ever confident = elastic, token for token)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.early_exit_state import EarlyExitState, Trial
from e1.engine.markers import PROMPT_OPEN
from e1.engine.row_state import RowState
from e1.errors import ConfigError
from tests.test_row_state import MARKERS, THINK

PARA = 14  # a transition: a thinking step ends with it
PROMPT = (7, 8, 9, 6)  # the trial prompt: the end marker (7, 8, 9) and "Final Answer:" (6)


def early(budget=None, spec="early-exit:threshold=0.85:trial=3:recipe=e1"):
    return EarlyExitState(budget or Budget(6, 3), Mode.parse(spec), MARKERS, PROMPT_OPEN, 100, transitions=((PARA,),))


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
trial_answers = st.lists(
    st.lists(st.tuples(st.sampled_from([30, 31, 2]), st.floats(0.0, 1.0)), min_size=3, max_size=3),
    min_size=30,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(real=real_tokens, answers=trial_answers, t=st.integers(0, 8), s=st.integers(1, 5))
def test_generated_real_tokens_match_elastic_until_a_confident_exit(real, answers, t, s):
    state, elastic = early(Budget(t, s)), RowState(Budget(t, s), Mode(), MARKERS, PROMPT_OPEN, 100)
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
    assert (many.think_tokens, many.solve_tokens, many.trial_decoded) == (
        one.think_tokens,
        one.solve_tokens,
        one.trial_decoded,
    )


@settings(max_examples=150, deadline=None)
@given(
    real=st.lists(st.sampled_from([THINK, PARA]), min_size=1, max_size=40),
    tries=st.integers(0, 6),
    t=st.integers(0, 40),
    s=st.integers(1, 5),
)
def test_tries_bounds_the_trials_and_the_rest_decodes_as_elastic(real, tries, t, s):
    """Whatever the transitions, at most ``tries`` trial answers run (none confident here), each at
    most prompt + trial tokens; the real tokens stay elastic's throughout."""
    state = early(Budget(t, s), f"early-exit:threshold=0.85:trial=3:tries={tries}:recipe=e1")
    elastic = RowState(Budget(t, s), Mode(), MARKERS, PROMPT_OPEN, 100)
    for token in real:
        if state.done:
            break
        assert state.accept(token) == elastic.accept(token)
        while state.in_trial:
            state.accept(31, 0.1) if state.trial_answering else state.accept(0)
    transitions_in_thinking = sum(
        1 for k, token in enumerate(state.tokens[: state.think_tokens]) if token == PARA and k + 1 < t
    )
    assert len(state.trials) == min(tries, transitions_in_thinking)
    assert state.trial_decoded <= tries * (len(PROMPT) + 3)
    assert (state.tokens, state.forced) == (elastic.tokens, elastic.forced)


def test_the_vllm_processor_rebuilds_a_row_without_tries_left_as_elastic():
    """Each vLLM round rebuilds the row from its history: the driver's count of trials travels as
    ``tries_left``, so a row whose tries are spent starts no trial in the processor either."""
    from e1.engine.vllm.processor import budget_args, row_state

    driver = early(spec="early-exit:threshold=0.85:trial=3:tries=1:recipe=e1")
    drive(driver, [THINK, PARA, 0, 0, 0, 0, (30, 0.1), (31, 0.1), (32, 0.1), THINK])
    assert len(driver.trials) == 1 and not driver.tries_left
    args = budget_args(Budget(6, 3), driver.mode, MARKERS, PROMPT_OPEN, 100, list(driver.tokens) + [PARA], state=driver)
    assert args["tries_left"] is False and args["mode"] == "early-exit:threshold=0.85:trial=3:tries=1:recipe=e1"
    rebuilt = row_state(args)
    assert rebuilt.mode == driver.mode
    assert not rebuilt.in_trial and rebuilt.accept(THINK) == THINK and not rebuilt.in_trial  # PARA: no trial
    fresh = row_state({**args, "tries_left": True})
    fresh.accept(PARA)
    assert fresh.in_trial  # the same row with a try left starts one at the transition


# -- the mode string ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, threshold, trial, texts",
    [
        ("early-exit", 0.95, 20, ("Wait", " Wait")),  # DEER's recipe, the default
        ("early-exit:recipe=e1", 0.95, 16, ("\n\n", "Wait", " Wait")),
        ("early-exit:threshold=0.9:trial=8:at=para", 0.9, 8, ("\n\n",)),
        ("early-exit:at='Hmm':recipe=e1", 0.95, 16, ("Hmm",)),
        ("early-exit:tries=4:trial=2:recipe=e1", 0.95, 2, ("\n\n", "Wait", " Wait")),
    ],
)
def test_mode_options_parse_and_print_back(text, threshold, trial, texts):
    mode = Mode.parse(text)
    assert (mode.confidence_threshold, mode.trial_tokens, mode.transition_texts) == (threshold, trial, texts)
    assert Mode.parse(str(mode)) == mode


@pytest.mark.parametrize(
    "text, says",
    [
        ("early-exit:treshold=0.9", "did you mean 'threshold'"),
        ("early-exit:threshold=0", "threshold must be in (0, 1]"),
        ("early-exit:threshold=1.5", "threshold must be in (0, 1]"),
        ("early-exit:trial=0", "trial must be >= 1"),
        ("early-exit:tries=-1", "write tries=2"),
        ("elastic:tries=3", "tries= does not fit mode 'elastic'"),
        ("early-exit:at=pra", "did you mean 'para'"),
        ("elastic:threshold=0.9", "threshold= does not fit mode 'elastic'"),
        ("budget-forcing:at=para", "at= does not fit"),
        ("early-exit:recipe=der", "did you mean 'deer'"),
        ("early-exit:confidence=avg", "unknown confidence 'avg'"),
        ("elastic:recipe=deer", "recipe= does not fit mode 'elastic'"),
    ],
)
def test_bad_mode_options_are_one_clear_line(text, says):
    with pytest.raises(ConfigError) as caught:
        Mode.parse(text)
    assert says in f"{caught.value} ({caught.value.hint})"


# -- the transformers backend: trials in the running KV cache, rolled back by the mask --------------
def test_scripted_model_exits_at_the_first_confident_trial(tiny_engine):
    from e1.engine.hf.hf_engine import HFEngine
    from tests.fakes import ScriptedModel

    tokenizer, markers = tiny_engine.tokenizer, tiny_engine.markers
    think, solve = (tokenizer.encode(c, add_special_tokens=False)[0] for c in "ab")
    prompt = (think, think, think) + markers.start_ids
    engine = HFEngine(ScriptedModel(len(tokenizer), {prompt: (None, 20)}, markers, think, solve), tokenizer, markers)
    [c] = engine.generate(
        [list(prompt)], Budget(8, 6), Mode.parse("early-exit:trial=4:at='a':recipe=e1"), Sampling(temperature=0)
    )
    # "a" ends a step at once: the trial feeds </think> + "Final Answer:" (1 + 9 ids); the model, past a
    # marker, writes "b": 4 answer ids, each with probability 1 (its logits are one-hot) -> exit.
    # Rolled back, the real row is "a", the forced </think>, then s = 6 solution tokens "b".
    assert c.token_ids == [think, *markers.end_ids] + [solve] * 6
    assert c.forced_mask == [False, True] + [False] * 6
    assert (c.think_tokens, c.solve_tokens, c.forced, c.finish_reason) == (1, 6, False, "length")
    assert c.trial_tokens == len(markers.end_ids + markers.answer_ids) + 4 and c.decoded_tokens == 8 + 14
    assert c.trials == [{"position": 1, "think_tokens": 1, "confidence": 1.0, "exited": True, "text": "bbbb"}]


def frequent_text(engine, completions, tokens=12) -> str:
    """The commonest thinking token of ``completions`` whose text encodes back to it: a transition that fires."""
    from collections import Counter

    tokenizer, special = engine.tokenizer, set(engine.tokenizer.all_special_ids)
    counts = Counter(t for c in completions for t in c.token_ids[:tokens] if t not in special)
    for token, _ in counts.most_common():
        text = tokenizer.decode([token])
        if tokenizer.encode(text, add_special_tokens=False) == [token]:
            return text
    raise AssertionError("no token round-trips")


def prompts(engine, count=4):
    from e1.data.prompts import build_prompt

    return [build_prompt(engine.tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(count)]


@pytest.mark.parametrize("sampling", [Sampling(temperature=0), Sampling(temperature=0.5, seed=3)])
def test_trials_that_never_exit_leave_elastic_output_token_for_token(tiny_engine, sampling):
    """threshold=1 is never reached by a random model's softmax: every trial is rolled back, so the
    output must be elastic's exactly — the masked cache columns and rewound positions hide the trials."""
    budget, texts = Budget(12, 6), prompts(tiny_engine, 3)
    elastic = tiny_engine.generate(texts, budget, Mode("elastic"), sampling, n=2)
    spec = f"early-exit:threshold=1:trial=2:at={frequent_text(tiny_engine, elastic)!r}:recipe=e1"
    early_rows = tiny_engine.generate(texts, budget, Mode.parse(spec), sampling, n=2)
    assert sum(len(c.trials) for c in early_rows) >= 2  # trials did happen
    for plain, row in zip(elastic, early_rows):
        assert row.token_ids == plain.token_ids and row.forced_mask == plain.forced_mask
        assert (row.think_tokens, row.solve_tokens, row.forced) == (
            plain.think_tokens,
            plain.solve_tokens,
            plain.forced,
        )
        assert row.decoded_tokens == len(row.token_ids) + sum(1 + 9 + 2 for _ in row.trials)  # no EOS in these trials
        assert all(not trial["exited"] and 0 < trial["confidence"] < 1 for trial in row.trials)


def test_a_reachable_threshold_ends_thinking_at_a_trial(tiny_engine):
    texts, greedy = prompts(tiny_engine), Sampling(temperature=0)
    at = frequent_text(tiny_engine, tiny_engine.generate(texts, Budget(24, 8), Mode("elastic"), greedy), 24)
    rows = tiny_engine.generate(
        texts, Budget(24, 8), Mode.parse(f"early-exit:threshold=0.0001:trial=2:at={at!r}"), greedy
    )
    for row in rows:
        assert row.trials and row.trials[0]["exited"] and len(row.trials) == 1
        position = row.trials[0]["position"]  # thinking ended right after the transition: the marker follows
        end = list(tiny_engine.markers.end_ids)
        assert row.token_ids[position : position + len(end)] == end and row.think_tokens == position < 24
        assert row.closed and not row.forced


@pytest.mark.parametrize("threshold", ["1", "0.0001"])
def test_shared_prefixes_equal_independent_decoding(tiny_engine, threshold):
    """A sweep's rows follow an unconstrained root (RowState.follow) up to their first transition, where
    the first trial needs the model: under greedy decoding that equals decoding alone, trials included."""
    texts, greedy = prompts(tiny_engine, 3), Sampling(temperature=0.0, max_tokens=40)
    roots = tiny_engine.generate(texts, Budget(1, 1), Mode("none"), greedy, n=2)
    mode = Mode.parse(f"early-exit:threshold={threshold}:trial=2:at={frequent_text(tiny_engine, roots)!r}")
    shared = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2, prefixes=[c.token_ids for c in roots])
    alone = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2)
    assert any(c.trials for c in alone)
    for s, a in zip(shared, alone):
        assert (s.token_ids, s.forced_mask, s.trial_tokens) == (a.token_ids, a.forced_mask, a.trial_tokens)
        assert s.trials == [
            {**t, "confidence": pytest.approx(t["confidence"], abs=1e-5)} for t in a.trials
        ]  # prefill vs decode numerics
        assert s.prefix_tokens == (a.trials[0]["position"] if a.trials else min(12, len(a.token_ids)))


# -- results: decoded tokens and the overthinking share -------------------------------------------------
def _completion(think_tokens, trials):
    from e1.engine.base import Completion

    return Completion(
        0,
        0,
        "",
        "",
        3,
        think_tokens,
        2,
        False,
        "stop",
        [],
        [],
        trial_tokens=13 * len(trials),
        trials=[
            {"position": t, "think_tokens": t, "confidence": 0.5, "exited": False, "text": text} for t, text in trials
        ],
    )


def test_overthinking_counts_thinking_after_the_first_correct_trial_answer():
    from types import SimpleNamespace

    from e1.eval.trials import overthinking_tokens
    from e1.rewards.scoring import Scorer

    problem = SimpleNamespace(task="math", answer="2")
    generated = [
        (
            Mode.parse("early-exit"),
            Budget(16, 4),
            problem,
            _completion(12, [(3, " \\boxed{3}"), (7, " \\boxed{2}"), (9, " 2")]),
        ),
        (Mode.parse("early-exit"), Budget(16, 4), problem, _completion(10, [(4, " \\boxed{5}")])),  # none correct
        (Mode.parse("early-exit"), Budget(16, 4), problem, _completion(10, [])),  # no transition at all
        (Mode("elastic"), Budget(16, 4), problem, _completion(12, [])),  # no trial answers in this mode
    ]
    with Scorer() as scorer:
        late = overthinking_tokens(generated, scorer)
    # the first correct trial was tried after 7 thinking tokens of 12: 5 came after it
    assert late[:3] == [5, 0, 0] and late[3] != late[3]  # NaN


def test_eval_records_decoded_tokens_and_the_overthinking_share(tmp_path, problems_file, tiny_engine):
    import pandas as pd

    from e1.engine.hf.hf_engine import HFEngine
    from e1.eval.run import EvalConfig, evaluate
    from tests.fakes import ScriptedModel

    tok, markers = tiny_engine.tokenizer, tiny_engine.markers
    pad = tok.encode("b", add_special_tokens=False)
    # after a marker the model writes 9 filler ids, then " \boxed{2}.": a trial (marker + the 9 ids of
    # "Final Answer:") reads the box at once; the real solution reads it after the filler
    solution = pad * len(markers.answer_ids) + tok.encode(" \\boxed{2}.", add_special_tokens=False)
    think = tok.encode("a", add_special_tokens=False)[0]
    engine = HFEngine(
        ScriptedModel(len(tok), {}, markers, think, pad[0], solution=solution), tok, markers, batch_size=4
    )
    modes = (Mode.parse("early-exit:trial=8:at='a':recipe=e1"), Mode("elastic"))
    evaluate(
        EvalConfig(
            model="scripted",
            datasets=(str(problems_file),),
            budgets=(Budget(6, 40),),
            modes=modes,
            n=1,
            sampling=Sampling(temperature=0.0),
            out=tmp_path / "run",
            batch_size=4,
        ),
        engine=engine,
    )
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    early, elastic = samples[samples["mode"] == str(modes[0])], samples[samples["mode"] == "elastic"]
    # early-exit: "a" is a transition, the trial (probability 1 per id) exits at once: 1 thinking token
    assert (early["think_tokens"] == 1).all() and early["correct"].tolist() == [False, True, False, True, False]
    # the trial: its prompt, then the 5 ids of the box and EOS (6 < trial=8); the output: a, </think>, solution, EOS
    trial_cost = len(markers.end_ids + markers.answer_ids) + min(8, len(solution) - len(markers.answer_ids) + 1)
    assert (early["decoded_tokens"] == 1 + len(markers.end_ids) + len(solution) + 1 + trial_cost).all()
    assert (early["overthinking_tokens"] == 0).all() and elastic["overthinking_tokens"].isna().all()
    assert (elastic["decoded_tokens"] == 6 + len(markers.end_ids) + len(solution) + 1).all()
    summary = pd.read_parquet(tmp_path / "run" / "summary.parquet").set_index("mode")
    assert (
        summary.loc[str(modes[0]), "overthinking_share"] == 0
        and summary.loc["elastic", "overthinking_share"] != summary.loc["elastic", "overthinking_share"]
    )
    assert summary.loc["elastic", "mean_decoded_tokens"] == 6 + len(markers.end_ids) + len(solution) + 1


def test_curves_plot_either_output_or_decoded_tokens_on_x():
    import pandas as pd

    from e1.report.plots import draw_curves

    curves = pd.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "mode": "early-exit",
            "think_budget": [8, 16],
            "solve_budget": 4,
            "accuracy": [0.2, 0.4],
            "mean_total_tokens": [10.0, 18.0],
            "mean_decoded_tokens": [30.0, 60.0],
        }
    )
    for axis, xs, label in (("output", [10, 18], "used"), ("decoded", [30, 60], "decoded")):
        fig, _ = draw_curves(curves, x_axis=axis)
        ax = fig.axes[0]
        assert list(ax.lines[0].get_xdata()) == xs and label in ax.get_xlabel()
