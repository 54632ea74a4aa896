"""early-exit ``recipe=deer`` against DEER's own definitions (github.com/iie-ycx/DEER, vllm-deer.py), on a
real byte-level BPE tokenizer trained here with Qwen2's pre-tokenizer, which merges ".\\n\\n" and ":\\n\\n"
into single tokens as R1/Qwen tokenizers do. Each expected value is computed next to its assert from the
definition: transitions from the decoded text, the trial's end from its decoded text, the confidence
from the probabilities (first token dropped; mean, geometric mean or minimum), the exit by ``>``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.early_exit_state import EarlyExitState, TextWatch, trial_texts
from e1.engine.markers import PROMPT_OPEN, Markers
from e1.engine.modes.early_exit import DEER_PROMPT, DEER_STOP_TEXTS

# Qwen2's pre-tokenizer split (its tokenizer.json): punctuation runs keep the newlines after them
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SENTENCES = [
    "So the sum is 12",
    "Let me add 3 and 9",
    "The answer is \\boxed{12}",
    "Then x = 4",
    "Hmm, that gives 7",
    "Check: 2 + 5 = 7",
    "We need the area",
    "Alternatively, factor it",
]
ENDINGS = [".\n\n", ":\n\n", ". ", ", ", "\n\n", ".\n", " "]
STARTS = ["", "Wait", "Wait, ", "wait ", "Waiting ", "But wait", "Okay"]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    corpus = [f"{start}{sentence}{end}" for start in STARTS for sentence in SENTENCES for end in ENDINGS] * 4
    corpus += [DEER_PROMPT + "{12}\n\n", DEER_PROMPT + "{\\frac{1}{2}}.", "**Final Answer**\n\\boxed{7}\n"] * 20
    core.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=700,
            special_tokens=["<|im_end|>", "<think>", "</think>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    made = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>")
    for merged in (".\n\n", ":\n\n"):  # the class this recipe exists for: a paragraph end inside one token
        assert len(made.encode(merged, add_special_tokens=False)) == 1
    return made


def markers_of(tokenizer) -> Markers:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>", "<|im_end|>")}
    return Markers(
        "<think>",
        "</think>",
        (ids["<think>"],),
        (ids["</think>"],),
        frozenset({ids["<|im_end|>"]}),
        ids["<|im_end|>"],
        tuple(tokenizer.encode("Wait", add_special_tokens=False)),
        tuple(tokenizer.encode("Final Answer:", add_special_tokens=False)),
    )


def deer_state(tokenizer, spec="early-exit:recipe=deer", budget=None) -> EarlyExitState:
    mode = Mode.parse(spec)
    return EarlyExitState(
        budget or Budget(400, 40), mode, markers_of(tokenizer), PROMPT_OPEN, 1000, texts=trial_texts(tokenizer, mode)
    )


def text_completions(tokenizer, ids, text) -> list[int]:
    """Indexes k at which ``text`` occurs once more in decode(ids[:k+1]) than in decode(ids[:k]): where a
    stop string on the decoded text (vLLM's, DEER's) first sees each occurrence."""
    counts = [tokenizer.decode(ids[:k], skip_special_tokens=True).count(text) for k in range(len(ids) + 1)]
    return [k for k in range(len(ids)) if counts[k + 1] > counts[k]]


thinking = st.lists(
    st.tuples(st.sampled_from(STARTS), st.sampled_from(SENTENCES), st.sampled_from(ENDINGS)), min_size=1, max_size=8
).map(lambda parts: "".join(a + b + c for a, b, c in parts))


# -- where a trial is tried: the thinking's text, however the tokenizer merged it ----------------------
@settings(max_examples=60, deadline=None)
@given(text=thinking)
def test_transitions_are_found_in_the_text_at_the_token_that_completes_them(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    for transition in ("Wait", "\n\n"):
        scan = TextWatch(tokenizer, (transition,)).scanner()
        assert [k for k, token in enumerate(ids) if scan.push(token)] == text_completions(tokenizer, ids, transition)


def test_id_matching_misses_a_merged_paragraph_end_that_text_matching_finds(tokenizer):
    """Why recipe=deer reads text: recipe=e1 matches the id of "\\n\\n", which ".\\n\\n" never contains."""
    ids = tokenizer.encode("So the sum is 12.\n\nThen x = 4:\n\nCheck", add_special_tokens=False)
    para = tuple(tokenizer.encode("\n\n", add_special_tokens=False))
    assert not any(tuple(ids[k : k + len(para)]) == para for k in range(len(ids)))  # e1: no trial at all
    scan = TextWatch(tokenizer, ("\n\n",)).scanner()
    assert sum(scan.push(t) for t in ids) == 2  # deer: both paragraph ends


# -- the trial: DEER's prompt, its end at the closing brace, its confidence ----------------------------
def run_trial(state, thinking_ids, answer_ids, probabilities):
    """Feed thinking up to its first trial, then the answer ids with their probabilities; returns the ids
    fed while the trial ran and the trial's answer ids consumed."""
    fed = []
    for token in thinking_ids:
        fed = [state.accept(token)]
        if state.in_trial:
            break
    assert state.in_trial, "the thinking holds a transition"
    while state.forced_token() is not None:  # the rest of DEER's prompt
        fed.append(state.accept(state.forced_token()))
    used = 0
    for token, p in zip(answer_ids, probabilities):
        fed.append(state.accept(token, p))
        used += 1
        if not state.in_trial:
            break
    return fed, used


def deer_reference(tokenizer, answer_ids, probabilities, how, most=20, eos=()):
    """DEER's definition, from its repository: the trial ends at EOS, at ``most`` tokens, or at the first token
    whose arrival puts one of the closing-brace stop strings in the decoded answer; its confidence scores the
    tokens after the first (the stopping one included) by their mean, geometric mean (1e-10 floor) or minimum."""
    end = min(len(answer_ids), most)
    for k in range(end):
        if answer_ids[k] in eos or any(stop in tokenizer.decode(answer_ids[: k + 1]) for stop in DEER_STOP_TEXTS):
            end = k + 1
            break
    scored = probabilities[1:end]
    if not scored:
        return end, 0.0
    if how == "mean":
        return end, sum(scored) / len(scored)
    if how == "geometric":
        return end, math.exp(sum(math.log(max(p, 1e-10)) for p in scored) / len(scored))
    return end, min(scored)


answers = st.sampled_from(
    ["{12}\n\nSo", "{\\frac{1}{2}}. Then", "{7}. ", "{x + 1} and", "{3}}", "{12}, and more", "{(a+b)}\n", ""]
)


@settings(max_examples=80, deadline=None)
@given(answer=answers, how=st.sampled_from(["mean", "geometric", "min"]), data=st.data())
def test_trial_confidence_is_deers_definition_on_real_token_streams(tokenizer, answer, how, data):
    answer_ids = tokenizer.encode(answer + " 12" * 20, add_special_tokens=False)  # 20 ids at least: the trial ends
    probabilities = data.draw(st.lists(st.floats(0.0, 1.0), min_size=len(answer_ids), max_size=len(answer_ids)))
    state = deer_state(tokenizer, f"early-exit:recipe=deer:confidence={how}:threshold=1")
    thinking_ids = tokenizer.encode("So the sum is 12.\n\nWait, check", add_special_tokens=False)
    fed, used = run_trial(state, thinking_ids, answer_ids, probabilities)
    end, expected = deer_reference(tokenizer, answer_ids, probabilities, how)
    prompt = tokenizer.encode(DEER_PROMPT, add_special_tokens=False)
    assert fed[: len(prompt)] == prompt  # DEER's prompt, no end marker before it
    assert used == end and state.trials[0].ids == tuple(answer_ids[:end])
    assert state.trials[0].confidence == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "recipe, threshold, exits",
    [
        ("deer", 0.5, False),  # scored tokens 0.5, 0.5: mean 0.5 is not > 0.5
        ("deer", 0.4999, True),
        ("e1", 0.5, True),  # e1's variant: >= (its mean counts the first token too: (0.5 + 0.5 + 0.5) / 3)
    ],
)
def test_deer_exits_only_above_the_threshold(tokenizer, recipe, threshold, exits):
    answer_ids = tokenizer.encode("{7}. ", add_special_tokens=False)[:3]
    mode = Mode.parse(f"early-exit:recipe={recipe}:threshold={threshold}:trial=3:at='Wait'")
    state = EarlyExitState(
        Budget(400, 40),
        mode,
        markers_of(tokenizer),
        PROMPT_OPEN,
        1000,
        texts=trial_texts(tokenizer, mode),
        transitions=(tuple(tokenizer.encode("Wait", add_special_tokens=False)),),
    )
    run_trial(state, tokenizer.encode("So 7.\n\nWait", add_special_tokens=False), answer_ids, [0.5] * 3)
    assert state.trials[0].confidence == pytest.approx(0.5) and state.trials[0].exited is exits


# -- where the trial sits, and what an exit leaves ------------------------------------------------------
@pytest.mark.parametrize("threshold, exits", [("1", False), ("0.0001", True)])
def test_the_trial_runs_before_the_token_holding_wait(tokenizer, threshold, exits):
    state = deer_state(tokenizer, f"early-exit:recipe=deer:threshold={threshold}")
    before = tokenizer.encode("So the sum is 12.\n\n", add_special_tokens=False)
    rest = tokenizer.encode("Wait, check", add_special_tokens=False)
    held = rest[0]
    assert "Wait" in tokenizer.decode([held])
    for token in before:
        assert state.accept(token) == token and not state.in_trial
    prompt = tokenizer.encode(DEER_PROMPT, add_special_tokens=False)
    assert state.accept(held) == prompt[0] and state.restart  # the held token is not fed: the prompt is
    assert state.held == held and state.tokens == before
    fed = [state.accept(state.forced_token()) for _ in prompt[1:]]
    answer = tokenizer.encode("{12}\n\n", add_special_tokens=False)
    fed += [state.accept(token, 0.9) for token in answer]
    assert not state.in_trial and state.rollback == len(prompt) + len(answer) - 1  # the last answer id is not fed
    assert state.trials[0].position == len(before)
    if exits:  # the held token dropped, the end marker in its place
        assert fed[-1] == state.markers.end_ids[0] and state.tokens == before + list(state.markers.end_ids)
        assert state.exited and state.think_end == "trial"
    else:  # the held token kept: thinking goes on from it
        assert fed[-1] == held and state.tokens == [*before, held] and state.phase == "think"


def test_deer_tries_at_most_ten_trials_unless_told(tokenizer):
    text = "So the sum is 12. Wait, " * 14
    for spec, cap in (("early-exit:recipe=deer:threshold=1", 10), ("early-exit:recipe=deer:threshold=1:tries=3", 3)):
        state = deer_state(tokenizer, spec, Budget(1000, 4))
        for token in tokenizer.encode(text, add_special_tokens=False):
            state.accept(token)
            while state.in_trial:
                forced = state.forced_token()
                state.accept(forced if forced is not None else min(state.markers.eos_ids), 0.5)
        assert len(state.trials) == cap and text.count("Wait") == 14
        assert state.tokens == tokenizer.encode(text, add_special_tokens=False)  # no trial token, every held one kept


def test_a_deferred_trial_begins_where_the_next_request_starts(tokenizer):
    """vLLM has written the held token: the request ends there, and the next one (rebuilt from the
    settings) begins with the whole prompt, then keeps the held token after the trial."""
    from e1.engine.early_exit_state import replay_round
    from e1.engine.vllm.processor import budget_args, row_state

    driver = deer_state(tokenizer, "early-exit:recipe=deer:threshold=1")
    ids = tokenizer.encode("So the sum is 12.\n\nWait, check", add_special_tokens=False)
    eos = min(driver.markers.eos_ids)
    replay_round(driver, [*ids, eos], lambda k: 0.5)
    held = next(t for t in ids if "Wait" in tokenizer.decode([t]))
    assert driver.in_trial and driver.held == held and driver.trial_decoded == 0
    args = budget_args(Budget(400, 40), driver.mode, driver.markers, PROMPT_OPEN, 1000, driver.tokens, (), driver)
    rebuilt = row_state(args, tokenizer=tokenizer)
    prompt = tokenizer.encode(DEER_PROMPT, add_special_tokens=False)
    assert rebuilt.in_trial and rebuilt.forced_token() == prompt[0] and rebuilt.held == held
    answer = tokenizer.encode("{12}\n\n", add_special_tokens=False)
    replay_round(driver, [*prompt, *answer, eos], lambda k: 0.5)
    assert driver.tokens[-1] == held and len(driver.trials) == 1 and not driver.in_trial


# -- the transformers backend: rolled-back trials leave the output untouched ----------------------------
@pytest.mark.parametrize("sampling", [Sampling(temperature=0), Sampling(temperature=0.5, seed=3)])
def test_deer_trials_that_never_exit_leave_elastic_output_token_for_token(tiny_engine, sampling):
    from tests.test_early_exit import frequent_text, prompts

    budget, texts = Budget(12, 6), prompts(tiny_engine, 3)
    elastic = tiny_engine.generate(texts, budget, Mode("elastic"), sampling, n=2)
    spec = f"early-exit:recipe=deer:threshold=1:trial=2:at={frequent_text(tiny_engine, elastic)!r}"
    rows = tiny_engine.generate(texts, budget, Mode.parse(spec), sampling, n=2)
    assert sum(len(c.trials) for c in rows) >= 2
    for plain, row in zip(elastic, rows):
        assert row.token_ids == plain.token_ids and row.forced_mask == plain.forced_mask
        assert all(not trial["exited"] for trial in row.trials)


def test_deer_exit_drops_the_held_token_on_the_tiny_model(tiny_engine):
    from tests.test_early_exit import frequent_text, prompts

    texts, greedy = prompts(tiny_engine), Sampling(temperature=0)
    elastic = tiny_engine.generate(texts, Budget(24, 8), Mode("elastic"), greedy)
    at = frequent_text(tiny_engine, elastic, 24)
    rows = tiny_engine.generate(
        texts, Budget(24, 8), Mode.parse(f"early-exit:recipe=deer:threshold=0.0001:at={at!r}"), greedy
    )
    end = list(tiny_engine.markers.end_ids)
    for plain, row in zip(elastic, rows):
        position = row.trials[0]["position"]
        assert row.trials[0]["exited"] and len(row.trials) == 1
        assert row.token_ids[:position] == plain.token_ids[:position]  # the same thinking up to the held token
        assert at in tiny_engine.tokenizer.decode([plain.token_ids[position]])  # which held the transition
        assert row.token_ids[position : position + len(end)] == end and row.think_end == "trial"


@pytest.mark.parametrize("threshold", ["1", "0.0001"])
def test_deer_shared_prefixes_equal_independent_decoding(tiny_engine, threshold):
    from tests.test_early_exit import frequent_text, prompts

    texts, greedy = prompts(tiny_engine, 3), Sampling(temperature=0.0, max_tokens=40)
    roots = tiny_engine.generate(texts, Budget(1, 1), Mode("none"), greedy, n=2)
    mode = Mode.parse(f"early-exit:recipe=deer:threshold={threshold}:trial=2:at={frequent_text(tiny_engine, roots)!r}")
    shared = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2, prefixes=[c.token_ids for c in roots])
    alone = tiny_engine.generate(texts, Budget(12, 4), mode, greedy, n=2)
    assert any(c.trials for c in alone)
    for s, a in zip(shared, alone):
        assert (s.token_ids, s.forced_mask, s.trial_tokens) == (a.token_ids, a.forced_mask, a.trial_tokens)
        assert s.prefix_tokens == (a.trials[0]["position"] if a.trials else min(12, len(a.token_ids)))


# -- the mode string --------------------------------------------------------------------------------
def test_recipes_parse_print_back_and_keep_old_strings_meaning():
    deer = Mode.parse("early-exit:recipe=deer")
    assert (deer.trial_tokens, deer.trial_cap, deer.transition_texts, deer.confidence) == (
        20,
        10,
        ("Wait", " Wait"),
        "mean",
    )
    assert Mode.parse("early-exit") == deer and str(deer) == "early-exit"  # the default recipe
    old = Mode.parse(Mode.legacy("early-exit:threshold=0.9"))  # a run's text from before: e1's variant, as it was
    assert (old.recipe, old.trial_tokens, old.trial_cap, old.transition_texts) == (
        "e1",
        16,
        None,
        ("\n\n", "Wait", " Wait"),
    )
    assert str(old) == "early-exit:threshold=0.9:recipe=e1" == Mode.legacy("early-exit:threshold=0.9")
    for text in ("early-exit:confidence=geometric", "early-exit:tries=3:at=alt:recipe=e1:confidence=min"):
        assert str(Mode.parse(text)) == text
    assert Mode.parse("early-exit:recipe=deer").served().trial_cap == 10  # DEER's own cap stays under e1 serve's
