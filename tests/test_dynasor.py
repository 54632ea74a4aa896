"""``dynasor`` against Dynasor-CoT's own rule (github.com/hao-ai-lab/Dynasor at 0d2f1b93a60e), restated
below from its code (``dynasor/core/cot.py``, ``dynasor/core/entropy.py``, ``dynasor/core/evaluator.py``)
without e1's implementation, on generated thinking and probe streams through a real byte-level BPE
tokenizer (tests/test_deer.py's); then the transformers backend on a tiny model (probes rolled back leave
elastic's output; a model whose probes agree exits where the rule says) and the option gate."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.early_exit_state import EarlyExitState, trial_texts
from e1.engine.markers import PROMPT_OPEN
from e1.errors import ConfigError
from tests.test_deer import markers_of, tokenizer  # noqa: F401  (a fixture)

# -- the authors' rule, restated from their code ------------------------------------------------------
AUTHORS_PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"  # cot.py
UNCERTAIN_WORDS = ["wait", "hold", "but", "okay", "no", "hmm"]  # entropy.py / cot.py


def obtain_answer(s):  # cot.py: the text before the first unpaired "}", else ""
    stack = []
    for i, c in enumerate(s):
        if c == "{":
            stack.append(c)
        elif c == "}":
            if not stack:
                return s[:i]
            stack.pop()
    return ""


def parse_digits(num):  # evaluator.py, without its "%" branch (no answer here ends in %)
    try:
        return float(str(num).replace(",", ""))
    except ValueError:
        return None


def math_equal(prediction, reference):
    """evaluator.py's math_equal up to its numeric test, include_percentage=False (e1's stated difference;
    the generated answers below never reach its symbolic tests: no two differ only by sympy's view)."""
    if prediction.strip().lower() == reference.strip().lower():
        return True
    a, b = parse_digits(prediction), parse_digits(reference)
    return a is not None and b is not None and math.isclose(b, a, rel_tol=1e-4)


def eqaul_group(answers):  # evaluator.py: one equivalence class
    classes = []
    for answer in answers:
        if not any(math_equal(answer, rep) for rep in classes):
            classes.append(answer)
    return len(classes) == 1


def authors_exit(probe_responses, threshold):
    """cot.py's loop: after each probe, ``adaptive_end`` when the last ``threshold`` answers are one group,
    all non-empty, and none of their probes holds an uncertain word. The index of the exiting probe, or None."""
    probe_answers = []
    for k in range(len(probe_responses)):
        probe_answers.append(obtain_answer(probe_responses[k]))
        certain = [not any(w in r.lower() for w in UNCERTAIN_WORDS) for r in probe_responses[: k + 1][-threshold:]]
        window = probe_answers[-threshold:]
        if eqaul_group(window) and sum(1 for a in window if a != "") == threshold and sum(certain) == threshold:
            return k
    return None


# -- generated streams ---------------------------------------------------------------------------------
ANSWERS = [" ", "12", " 12", "12.0", "12.0001", "12,000", "12000", "x+1", "X+1", "No", "", "{3}", "\\frac{1}{2}"]
CLOSES = ["}", "} \\]", "}}", "}\n\n", ""]
AFTER = ["", " so", " then", " x", " =", " \\]", " \\]\n\nWait", " but", " now", ". Hmm", "\n\nOkay", " hold on"]
probe_texts = st.lists(st.sampled_from(ANSWERS), min_size=1, max_size=3, unique=True).flatmap(
    lambda pool: st.lists(  # a few answers, repeated: the probes agree often enough
        st.tuples(st.sampled_from(pool), st.sampled_from(CLOSES), st.sampled_from(AFTER)).map("".join),
        min_size=1,
        max_size=6,
    )
)


def drive(state, thinking, probes, eos):
    """A backend's loop: each thinking id accepted; a probe fed its prompt, then the next probe text's ids
    and EOS as its greedy answer (probabilities unread); forced ids taken."""
    answers = itertools.cycle(probes)
    for token in thinking:
        if state.done or state.phase != "think":
            break
        state.accept(token)
        if state.in_trial:
            while state.forced_token() is not None:
                state.accept(state.forced_token())
            for answer in (*next(answers), eos):
                state.accept(answer, 0.5)
                if not state.in_trial:
                    break
        while not state.done and not state.in_trial and (forced := state.forced_token()) is not None:
            state.accept(forced)


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(1, 90),
    every=st.integers(1, 12),
    agree=st.integers(1, 4),
    probe=st.integers(1, 24),
    tries=st.sampled_from([None, 0, 1, 3]),
    t=st.integers(1, 80),
    texts=probe_texts,
)
@example(length=30, every=5, agree=2, probe=20, tries=None, t=40, texts=["x+1} \\]", " X+1} so"])  # case, space
@example(length=30, every=5, agree=2, probe=20, tries=None, t=40, texts=["12,000}", "12000.1} \\]"])  # numbers
def test_probes_and_exit_are_the_authors_rule_on_generated_streams(
    tokenizer, length, every, agree, probe, tries, t, texts
):  # noqa: F811
    markers = markers_of(tokenizer)
    words = tokenizer.encode("So the sum is 12. Let me add 3 and 9. Then x = 4, check", add_special_tokens=False)
    thinking = (words * 10)[:length]
    spec = f"dynasor:every={every}:agree={agree}:probe={probe}" + ("" if tries is None else f":tries={tries}")
    mode = Mode.parse(spec)
    state = EarlyExitState(Budget(t, 8), mode, markers, PROMPT_OPEN, 10_000, texts=trial_texts(tokenizer, mode))
    probes = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    drive(state, thinking, probes, min(markers.eos_ids))

    # the authors: a probe after each chunk of `every` tokens (while thinking goes on: before t and the end
    # of the stream), at most `tries`; each probe's text is its first `probe` tokens; the rule decides
    positions = [k * every for k in range(1, length // every + 1) if k * every < t][
        : tries if tries is not None else None
    ]
    said = [tokenizer.decode(probes[k % len(probes)][:probe], skip_special_tokens=True) for k in range(len(positions))]
    exit_at = authors_exit(said, agree)
    tried = positions if exit_at is None else positions[: exit_at + 1]
    assert [trial.position for trial in state.trials] == tried
    assert [trial.exited for trial in state.trials] == [k == exit_at for k in range(len(tried))]
    assert [tokenizer.decode(list(trial.ids), skip_special_tokens=True) for trial in state.trials] == said[: len(tried)]
    # the output: the thinking up to the exit (or t, or the stream's end), then the end marker; no probe id
    end = positions[exit_at] if exit_at is not None else min(t, length)
    assert state.tokens[:end] == thinking[:end] and state.think_tokens == end
    if exit_at is not None or end == t:
        assert state.tokens[end:] == list(markers.end_ids)
        assert state.think_end == ("trial" if exit_at is not None else "budget")
    prompt = len(tokenizer.encode(AUTHORS_PROBE, add_special_tokens=False))
    answered = [min(len(probes[k % len(probes)]) + 1, probe) for k in range(len(tried))]  # EOS ends one early
    assert state.trial_decoded == sum(prompt + n for n in answered)


def test_the_probe_text_is_the_authors():
    from e1.engine.modes.dynasor import PROBE

    assert PROBE == AUTHORS_PROBE and Mode.parse("dynasor").trial_prompt_text == AUTHORS_PROBE


@pytest.mark.parametrize(
    "texts, agree, exits",
    [
        (("7} \\]", "7} \\]"), 2, True),
        (("7}", "7} no"), 2, False),
        (
            ("7} but", "7}"),
            2,
            False,
        ),  # every probe of the window must be sure, not only the last  # "no" hedges, as a substring anywhere in the probe ("know", "none" too)
        (("7}", "7.00001}"), 2, True),  # numbers within 1e-4
        (("7}", "70}"), 2, False),
        (("12,000}", "12000} \\]"), 2, True),  # commas dropped before reading a number
        (("x+1}", " X+1 }"), 2, True),  # case and outer space ignored
        (("7", "7"), 2, False),  # no closing brace: no answer
        (("7}",), 2, False),  # fewer probes than agree
        (("x+1}",), 1, True),
    ],
)
def test_the_rule_on_hand_made_probes(texts, agree, exits):
    mode = Mode.parse(f"dynasor:agree={agree}")
    assert mode.trial_verdict([], texts)[1] is exits is (authors_exit(list(texts), agree) == len(texts) - 1)


# -- the transformers backend ---------------------------------------------------------------------------
def test_probes_that_never_agree_leave_elastic_output_token_for_token(tiny_engine):
    from tests.test_early_exit import prompts

    budget, texts, greedy = Budget(12, 6), prompts(tiny_engine, 3), Sampling(temperature=0)
    elastic = tiny_engine.generate(texts, budget, Mode("elastic"), greedy, n=1)
    rows = tiny_engine.generate(texts, budget, Mode.parse("dynasor:every=4:agree=64:probe=3"), greedy, n=1)
    for plain, row in zip(elastic, rows):
        assert row.token_ids == plain.token_ids and row.forced_mask == plain.forced_mask
        assert [trial["position"] for trial in row.trials] == [4, 8][: (row.think_tokens - 1) // 4]
        assert not any(trial["exited"] for trial in row.trials)
        assert row.decoded_tokens == len(row.token_ids) + row.trial_tokens > len(row.token_ids)


def test_a_model_whose_probes_agree_exits_at_the_agreeing_probe(tiny_engine):
    """A scripted model: thinks "a", and inside a probe answers "7} \\]" then EOS; agree=3, every=5: the third
    probe (15 thinking tokens) ends thinking; its probes are rolled back and the solution follows."""
    from e1.engine.hf.hf_engine import HFEngine
    from tests.fakes import ScriptedModel

    tokenizer, markers = tiny_engine.tokenizer, tiny_engine.markers
    think, solve = (tokenizer.encode(c, add_special_tokens=False)[0] for c in "ab")
    probe = tuple(tokenizer.encode(AUTHORS_PROBE, add_special_tokens=False))
    answer = [*tokenizer.encode("7} \\]", add_special_tokens=False), min(markers.eos_ids)]

    class Prober(ScriptedModel):
        def _next(self, tokens):
            for k in range(len(answer)):  # k answer ids after the probe prompt
                if tuple(tokens[len(tokens) - k - len(probe) : len(tokens) - k]) == probe:
                    return answer[k]
            return super()._next(tokens)

    prompt = (think, think, think) + markers.start_ids
    engine = HFEngine(Prober(len(tokenizer), {prompt: (None, 4)}, markers, think, solve), tokenizer, markers)
    [row] = engine.generate(
        [list(prompt)], Budget(40, 4), Mode.parse("dynasor:every=5:agree=3"), Sampling(temperature=0)
    )
    said = [trial["text"] for trial in row.trials]
    assert authors_exit(said, 3) == 2 and [trial["position"] for trial in row.trials] == [5, 10, 15]
    assert row.token_ids == [think] * 15 + list(markers.end_ids) + [solve] * 3 + [min(markers.eos_ids)]
    assert row.think_end == "trial" and row.trial_tokens == 3 * (len(probe) + len(answer))


# -- the option gate ------------------------------------------------------------------------------------
DYNASOR_OPTIONS = {"every": (1, (1 << 31) - 1), "agree": (1, 64), "probe": (1, 1024), "tries": (0, 1 << 20)}


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(sorted(DYNASOR_OPTIONS)),
    value=st.one_of(
        st.integers(-(10**30), 10**30).map(str),
        st.text(min_size=0, max_size=12).filter(lambda text: ":" not in text),  # a colon starts another option
        st.sampled_from(["0", "-1", "+3", " 3", "3.0", "1e3", "٣", "３", "²", "9" * 5000, "0x10", "3_0", "inf"]),
    ),
)
def test_hostile_option_values_are_refused_in_one_line_or_taken_exactly(key, value):
    low, high = DYNASOR_OPTIONS[key]
    text = f"dynasor:{key}={value}"
    digits = value.rstrip()  # the mode text is stripped as a whole: trailing space goes, leading space stays
    valid = digits.isascii() and digits.isdigit() and len(digits) < 30 and low <= int(digits) <= high
    try:
        mode = Mode.parse(text)
    except ConfigError as err:
        assert not valid, text
        line = str(err)
        assert "\n" not in line and len(line) < 400 and line.isprintable()
        return
    assert valid, f"{text!r} was taken"
    assert getattr(mode, key) == int(digits) and Mode.parse(str(mode)) == mode


def test_served_dynasor_is_capped_and_listed_in_help_and_completion():
    from e1.engine.modes import names, usage

    assert Mode.parse("dynasor").served().trial_cap == 64
    with pytest.raises(ConfigError, match="at most 64"):
        Mode.parse("dynasor:tries=65").served()
    assert "dynasor" in names() and "dynasor[:exit=" in usage() and "every=" in usage()


@pytest.mark.parametrize("agree", [1, 64])
def test_shared_prefixes_equal_independent_decoding(tiny_engine, agree):
    """A sweep's rows follow an unconstrained root up to their first probe, where the model is needed."""
    from tests.test_early_exit import prompts

    texts, greedy = prompts(tiny_engine, 3), Sampling(temperature=0.0, max_tokens=40)
    roots = tiny_engine.generate(texts, Budget(1, 1), Mode("none"), greedy, n=2)
    mode = Mode.parse(f"dynasor:every=3:agree={agree}:probe=2")
    shared = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2, prefixes=[c.token_ids for c in roots])
    alone = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2)
    assert any(c.trials for c in alone)
    for s, a in zip(shared, alone):
        assert (s.token_ids, s.forced_mask, s.trial_tokens, s.trials) == (
            a.token_ids,
            a.forced_mask,
            a.trial_tokens,
            a.trials,
        )


@settings(max_examples=80, deadline=None)
@given(
    key=st.sampled_from(sorted(DYNASOR_OPTIONS)),
    value=st.one_of(st.integers(-5, 200).map(str), st.sampled_from(["", "x", "٣", "1" * 40, "6.5", "-0"])),
)
def test_a_served_budget_mode_crosses_the_same_gate_and_the_servers_cap(key, value):
    """e1 serve's ``budget_mode`` field: the option gate, then at most 64 probes per sample."""
    from e1.errors import E1Error
    from e1.serve.budgets import ServeDefaults, request_budget

    body = {"budget_mode": f"dynasor:{key}={value}", "thinking_budget": 8, "solution_budget": 2}
    low, high = DYNASOR_OPTIONS[key]
    valid = value.isascii() and value.isdigit() and low <= int(value) <= high and (key != "tries" or int(value) <= 64)
    try:
        mode = request_budget(body, ServeDefaults()).mode
    except E1Error as err:
        assert not valid and "\n" not in str(err), body
        return
    assert valid and mode.trial_cap <= 64 and getattr(mode, key) == int(value)


@settings(max_examples=60, deadline=None)
@given(
    every=st.integers(2, 9),
    written=st.integers(1, 3),
    text=st.sampled_from(["</reasoning>", "[END]", "</ans>", " the end", "</thought>"]),
)
def test_an_exit_after_part_of_a_multi_token_end_marker_completes_it(tokenizer, every, written, text):  # noqa: F811
    """A several-token end marker that the model has partly written when a probe is due and the probe is sure
    (agree=1): the exit completes that marker, as the cut at t does (RowState._force_end), rather than writing a
    whole marker after the part (a stray "</reas" left in the thinking)."""
    from dataclasses import replace

    end = tuple(tokenizer.encode(text, add_special_tokens=False))
    assume(len(end) >= 2 and len(set(end)) == len(end))  # (a marker whose prefixes do not overlap itself)
    markers = replace(markers_of(tokenizer), end_text=text, end_ids=end)
    written = min(written, len(end) - 1, every - 1)
    words = tokenizer.encode("So the sum is 12. Let me add 3 and 9", add_special_tokens=False)
    thinking = (words * 4)[: every - written] + list(end[:written]) + words
    mode = Mode.parse(f"dynasor:every={every}:agree=1:probe=8")
    state = EarlyExitState(Budget(64, 8), mode, markers, PROMPT_OPEN, 10_000, texts=trial_texts(tokenizer, mode))
    drive(state, thinking, [tokenizer.encode("7}", add_special_tokens=False)], min(markers.eos_ids))
    assert state.exited and state.think_end == "trial" and not state.was_forced
    assert state.tokens == thinking[: every - written] + list(end)


@settings(max_examples=60, deadline=None)
@given(
    every=st.sampled_from([None, 1, 32, 64]), agree=st.sampled_from([None, 1, 2]), probe=st.sampled_from([None, 20, 5])
)
def test_an_option_written_at_its_default_is_the_same_mode_and_label(every, agree, probe):
    """ "dynasor:every=32" decodes as "dynasor": one mode and one label (resume, sweep rows, e1 serve), as
    "elastic:grace=0" is "elastic"."""
    given_ = {"every": every, "agree": agree, "probe": probe}
    spec = "dynasor" + "".join(f":{key}={value}" for key, value in given_.items() if value is not None)
    plain = "dynasor" + "".join(
        f":{key}={value}"
        for key, value in given_.items()
        if value is not None and value != {"every": 32, "agree": 2, "probe": 20}[key]
    )
    assert Mode.parse(spec) == Mode.parse(plain) and str(Mode.parse(spec)) == str(Mode.parse(plain)) == plain
