"""Mode soft (a rising bias on the end marker, a hard backstop at the ceiling) and stop=regex:
RowState by hand, the bias as a pure function, the stop matcher against generated texts and
tokenizations, and the transformers backend on a scripted fake and the tiny model."""

from __future__ import annotations

import math
import re
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.markers import PROMPT_ABSENT, PROMPT_OPEN, Markers
from e1.engine.row_state import RowState
from e1.engine.stop import StopPattern, compile_stop
from e1.errors import ConfigError
from e1.eval.shared import followable_tokens
from tests.fakes import assert_engine_invariants

# a marker of three tokens (7, 8, 9); EOS 2; thinking ids 11, solution ids 12 (as tests/test_row_state.py)
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
THINK, SOLVE = 11, 12
GREEDY = Sampling(temperature=0.0, max_tokens=64)


def drive(state, sampled):
    biases = []
    for token in sampled:
        if state.done:
            break
        biases.append(state.end_bias())
        state.accept(token)
    return biases


# ---- the bias ----------------------------------------------------------------------------------


def test_soft_bias_by_hand():
    linear = Mode.parse("soft:start=0.5:strength=4")  # t = 8: begin 4, +1 per token to 4 at t
    assert [linear.end_bias(k, 8) for k in (0, 4, 5, 6, 8, 11)] == [0, 0, 1.0, 2.0, 4.0, 4.0]
    exp = Mode.parse("soft:start=0.5:strength=4:shape=exp")  # 4 (e^(4p) - 1) / (e^4 - 1), p = (k - 4) / 4
    assert exp.end_bias(6, 8) == pytest.approx(4 * (math.e**2 - 1) / (math.e**4 - 1))
    assert exp.end_bias(8, 8) == pytest.approx(4.0)
    assert Mode("elastic").end_bias(9, 8) == 0.0  # only soft biases


@settings(max_examples=200, deadline=None)
@given(
    t=st.integers(0, 4096),
    k=st.integers(0, 8192),
    start=st.floats(0, 1),
    strength=st.floats(0, 100),
    shape=st.sampled_from(["linear", "exp"]),
)
def test_soft_bias_is_zero_before_start_rises_and_stays_at_strength(t, k, start, strength, shape):
    mode = Mode("soft", start=start, strength=strength, shape=shape)
    bias = mode.end_bias(k, t)
    assert 0.0 <= bias <= strength * (1 + 1e-12)
    if k <= start * t:
        assert bias == 0.0
    if k >= t and k > start * t:
        assert bias == pytest.approx(strength)
    assert mode.end_bias(k + 1, t) >= bias  # never falls


# ---- soft on RowState, by hand ---------------------------------------------------------------------


def test_soft_biases_from_start_and_forces_only_at_the_ceiling():
    # t = 4, start 0.5 -> bias from the 3rd draw on; ceiling 1.5 -> the marker is forced after 6 thinking ids
    state = RowState(Budget(4, 2), Mode.parse("soft:start=0.5:strength=4"), MARKERS, PROMPT_OPEN, 100)
    biases = drive(state, [THINK] * 6 + [99, 99, 99, SOLVE, 2])
    assert biases[:7] == [0, 0, 0, 2.0, 4.0, 4.0, 0]  # after the 6th id the marker is queued: no bias
    assert state.tokens == [THINK] * 6 + [7, 8, 9, SOLVE, 2]
    assert state.forced == [False] * 6 + [True] * 3 + [False] * 2
    assert (state.think_tokens, state.solve_tokens, state.think_end) == (6, 2, "budget") and state.was_forced


def test_soft_natural_end_past_t_before_the_ceiling_is_natural():
    # t = 4, ceiling 6: the model ends by itself at 6 thinking ids (the marker counted), past t
    state = RowState(Budget(4, 2), Mode("soft"), MARKERS, PROMPT_OPEN, 100)
    drive(state, [THINK, THINK, THINK, 7, 8, 9, SOLVE, 2])
    assert state.think_end == "natural" and not state.was_forced and state.think_tokens == 6
    assert state.tokens == [THINK] * 3 + [7, 8, 9, SOLVE, 2] and not any(state.forced)


def test_soft_at_t_zero_forces_at_once_and_worst_case_counts_the_ceiling():
    from e1.engine.row_state import worst_case_tokens

    assert RowState(Budget(0, 2), Mode("soft"), MARKERS, PROMPT_OPEN, 100).forced_token() == 7
    # t + s + (ceiling - 1) t + the start (1) and end (3) markers: 10 + 5 + 5 + 4 = 24 (elastic: 19)
    assert worst_case_tokens(Budget(10, 5), Mode("soft"), MARKERS) == 24
    assert worst_case_tokens(Budget(10, 5), Mode("elastic"), MARKERS) == 19


def test_soft_follows_a_root_only_up_to_the_first_biased_draw():
    state = RowState(Budget(10, 40), Mode.parse("soft:start=0.5"), MARKERS, PROMPT_OPEN, 100)
    assert state.tokens_before_forcing() == 6  # the 7th id is drawn with a bias (6 ids written > 0.5 t)
    assert state.follow([THINK] * 20) == 6 and state.end_bias() > 0
    assert followable_tokens(Mode.parse("soft:start=0.5"), Budget(10, 4), 100) == 6 + 4
    root = [THINK, THINK, 7, 8, 9, SOLVE, SOLVE, 2]  # a natural end before start * t: the solution is shared
    state = RowState(Budget(10, 4), Mode.parse("soft:start=0.5"), MARKERS, PROMPT_OPEN, 100)
    assert state.follow(root) == len(root) and state.done and state.think_end == "natural"
    # strength 0 changes nothing: soft follows like elastic up to its ceiling
    assert RowState(Budget(4, 4), Mode.parse("soft:strength=0"), MARKERS, PROMPT_OPEN, 100).follow([THINK] * 20) == 6


# ---- stop=regex on RowState, by hand ----------------------------------------------------------------


class PairPattern:
    """ "The pattern": thinking ids 21 then 22, anywhere in the thinking (a StopPattern on ids)."""

    class Scanner:
        def __init__(self):
            self.ids = []

        def push(self, token):
            self.ids.append(token)
            return (21, 22) in pairwise(self.ids)

    def scanner(self):
        return self.Scanner()


pair_matcher = PairPattern()


@pytest.mark.parametrize("mode", ["elastic:exit='x'", "soft", "budget-forcing"])
def test_a_stop_match_forces_the_bare_marker_and_says_pattern(mode):
    state = RowState(Budget(8, 3), Mode.parse(mode), MARKERS, PROMPT_OPEN, 100, exit_ids=(20,), stop=pair_matcher)
    drive(state, [THINK, 21, 22, 99, 99, 99, 99, SOLVE, SOLVE, 2])
    answer = [6] if mode == "budget-forcing" else []  # s1's "Final Answer:" still follows its marker
    assert state.tokens[: 6 + len(answer)] == [THINK, 21, 22, 7, 8, 9] + answer  # no exit text: not a budget cut
    assert state.think_end == "pattern" and state.was_forced and state.think_tokens == 3
    assert state.tokens_before_forcing() >= 1


def test_no_match_leaves_elastic_as_it_was():
    state = RowState(Budget(3, 2), Mode(), MARKERS, PROMPT_OPEN, 100, stop=pair_matcher)
    drive(state, [THINK, 22, 21, 99, 99, 99, SOLVE, 2])
    assert state.tokens[:6] == [THINK, 22, 21, 7, 8, 9] and state.think_end == "budget"


# ---- the stop matcher on a real tokenizer: generated texts and tokenizations -----------------------


@pytest.fixture(scope="module")
def tokenizer():
    from e1.models.tiny import build_tokenizer

    return build_tokenizer()


class CountingTokenizer:
    """Wraps a tokenizer, recording how many ids each decode was given; no Rust backend (a "slow"
    tokenizer as far as StopPattern can tell), so the matcher takes its fallback."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def decode(self, ids, **kw):
        self.lengths.append(len(ids))
        return self.tokenizer.decode(ids, **kw)


class SearchRecorder:
    """The RE2 pattern the scanner searches with, recording the length in characters of every text (UTF-8
    bytes) it is asked to search; ``regex``: Python's ``re``, the reference it is compared with."""

    def __init__(self, pattern: str):
        self.regex, self.compiled, self.lengths = re.compile(pattern), compile_stop(pattern), []

    def search(self, text: bytes):
        self.lengths.append(len(text.decode()))
        return self.compiled.search(text)


# ASCII, the pattern's characters, and characters a byte-level tokenizer splits into several ids
TEXT = st.text(st.sampled_from(list("ab xyz{}\\0123.=+") + ["é", "→", "数", "🙂"]), max_size=60)
PATTERNS = [r"\\boxed\{", r"x\s*=\s*\d", r"\{\d+\}", r"é.", r"→\d", r"(?i)\\BOXED", r"^\{4", r"[xy]z"]


def first_match(tokenizer, ids, regex, window):
    """The reference: decode every prefix in full (a trailing partial character left out), and the
    first prefix whose last ``window`` characters hold a match (its length in ids, None: none)."""
    for i in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:i], skip_special_tokens=True).rstrip("\ufffd")
        if regex.search(text[-window:]):
            return i
    return None


def fired_at(state, ids):
    for i, token in enumerate(ids):
        state.accept(token)
        if state.think_end == "pattern":
            return i + 1  # thinking ids written when the marker became due
    return None


@settings(max_examples=80, deadline=None)
@given(
    before=TEXT,
    after=TEXT,
    pattern=st.sampled_from(PATTERNS),
    window=st.sampled_from([8, 16, 512]),
    inserted=st.sampled_from(["\\boxed{", "x = 7", "{42}", "é!", "→3", ""]),
)
def test_the_matcher_fires_where_the_full_text_first_matches(tokenizer, before, after, pattern, window, inserted):
    """Invariant: the scanner fires at the first id whose arrival makes the last ``window``
    characters of the thinking text (as decode writes it) hold a match, however the text is split
    into ids, multi-byte characters included; and it never searches more than ``window`` characters."""
    ids = tokenizer.encode(before + inserted + after, add_special_tokens=False)
    stop = StopPattern(tokenizer, pattern, window=window)
    stop.pattern = recorder = SearchRecorder(pattern)
    fired = fired_at(RowState(Budget(10_000, 4), Mode(), MARKERS, PROMPT_OPEN, 20_000, stop=stop), ids)
    assert fired == first_match(tokenizer, ids, recorder.regex, window)
    assert max(recorder.lengths, default=0) <= window


@settings(max_examples=30, deadline=None)
@given(before=TEXT, after=TEXT, pattern=st.sampled_from(PATTERNS), inserted=st.sampled_from(["\\boxed{", "x = 7", ""]))
def test_the_fallback_for_a_slow_tokenizer_fires_within_its_id_window(tokenizer, before, after, pattern, inserted):
    """A tokenizer without a Rust backend: the last window // 4 ids are decoded afresh (never more),
    and a match within them fires where the full text first matches."""
    ids = tokenizer.encode(before + inserted + after, add_special_tokens=False)
    counting = CountingTokenizer(tokenizer)
    stop = StopPattern(counting, pattern, window=64)
    fired = fired_at(RowState(Budget(10_000, 4), Mode(), MARKERS, PROMPT_OPEN, 20_000, stop=stop), ids)
    regex = re.compile(pattern)
    first = next((i for i in range(1, len(ids) + 1) if regex.search(tokenizer.decode(ids[max(0, i - 16) : i]))), None)
    assert fired == first
    assert max(counting.lengths, default=0) <= 16


def test_the_matcher_cost_does_not_grow_with_thinking(tokenizer):
    """One push: one detokenizer step and one search of at most ``window`` characters, and the
    row's text never grows past two windows, whatever the thinking's length."""
    ids = tokenizer.encode("The sum is 12, then 48. " * 600, add_special_tokens=False)[:3000]
    for pattern, searches in (("[a-z]never-here", 3000), ("never-here", 0)):  # a lead never written: no search
        stop = StopPattern(tokenizer, pattern, window=128)
        stop.pattern = recorder = SearchRecorder(pattern)
        state = RowState(Budget(5000, 4), Mode(), MARKERS, PROMPT_OPEN, 10_000, stop=stop)
        state.extend(ids)
        assert state.think_tokens == 3000 and len(recorder.lengths) == searches
        assert max(recorder.lengths, default=128) == 128 and len(state._scan.text) <= 256


def test_the_start_marker_and_special_ids_are_not_thinking_text(tokenizer):
    """A template that does not open thinking: the model's own <think> is a marker, not text, and a
    special id (the marker, EOS) adds nothing a pattern could match."""
    start, end = tokenizer.convert_tokens_to_ids("<think>"), tokenizer.convert_tokens_to_ids("</think>")
    markers = Markers("<think>", "</think>", (start,), (end,), frozenset({tokenizer.eos_token_id}), 0, (), ())
    stop = StopPattern(tokenizer, r"^x")  # at the window's start: only if nothing came before the x
    state = RowState(Budget(100, 4), Mode(), markers, PROMPT_ABSENT, 200, stop=stop)
    fired = fired_at(state, [start, *tokenizer.encode("x", add_special_tokens=False)])
    assert fired == 2 and state.think_end == "pattern"


# ---- the quiet-id prefilter: exactly the plain scanner, on generated patterns and id streams ------------


@pytest.fixture(scope="module")
def split_tokenizer():
    """A byte-level BPE trained on non-ASCII text too: ids for whole multi-byte characters, merges of
    several, and the single bytes (each a part of a character) that random ids pick."""
    from e1.models.tiny import DEFAULT_CORPUS, build_tokenizer

    extra = ["é→数🙂 \\boxed{x} 数数é {é} 🙂🙂 →→ ab x" * 3, "xé数 é🙂 a→b {0} \\b{1}"] * 50
    return build_tokenizer(corpus=[*DEFAULT_CORPUS, *extra], vocab_size=600)


CHARS = ["a", "b", "x", "{", "}", "\\", " ", "é", "→", "数", "🙂", "0", "1"]
ATOM = st.one_of(
    st.sampled_from(CHARS).map(re.escape),
    st.sampled_from([r"[xy]", r"[é→]", r"\d", r"[^}]", ".", r"\s"]),
    st.lists(st.sampled_from(CHARS).map(re.escape), min_size=1, max_size=3)
    .map("".join)
    .flatmap(lambda a: st.sampled_from(CHARS).map(lambda b: f"(?:{a}|{re.escape(b)})")),
)
PIECE = st.tuples(ATOM, st.sampled_from(["", "", "", "?", "*", "+", "{1,2}"])).map("".join)
LEAD = st.lists(st.sampled_from(CHARS).map(re.escape), min_size=0, max_size=4).map("".join)  # a literal lead, often
GENERATED = st.builds(
    lambda flags, anchor, lead, rest, end: flags + anchor + lead + "".join(rest) + end,
    st.sampled_from(["", "", "(?i)", "(?s)"]),
    st.sampled_from(["", "", r"\b", "^", r"\B"]),
    LEAD,
    st.lists(PIECE, max_size=3),
    st.sampled_from(["", "", "$", r"\b"]),
)


def byte_ids(tokenizer, text: str) -> list[int]:
    """``text`` as one id per UTF-8 byte (a byte-level vocabulary holds them all): every character split."""
    shown = [*range(33, 127), *range(161, 173), *range(174, 256)]  # GPT-2's bytes that stand for themselves
    chars = {b: chr(b) for b in shown} | {b: chr(256 + n) for n, b in enumerate(sorted(set(range(256)) - set(shown)))}
    return [tokenizer.convert_tokens_to_ids(chars[b]) for b in text.encode()]


def id_stream(tokenizer, lead: str = ""):
    """Random ids (single bytes among them), special ids, encoded texts, and texts byte by byte (characters
    split between ids), mixed: whatever a model may write."""
    size = len(tokenizer)
    texts = st.one_of(TEXT, st.just(lead), st.sampled_from(lead[1:] or "x"))  # the lead, and its last characters
    chunk = st.one_of(
        st.lists(st.integers(0, size - 1), min_size=1, max_size=6),
        st.sampled_from(tokenizer.all_special_ids).map(lambda i: [i]),  # no text at all
        texts.map(lambda text: tokenizer.encode(text, add_special_tokens=False)),
        texts.map(lambda text: byte_ids(tokenizer, text)),
    )
    return st.lists(chunk, max_size=30).map(lambda chunks: [i for c in chunks for i in c])


def pushes(scanner, ids):
    return [scanner.push(i) for i in ids]


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(), pattern=GENERATED, window=st.sampled_from([4, 8, 16, 512]), which=st.sampled_from(["tiny", "split"])
)
def test_the_prefiltered_scanner_answers_every_push_as_the_plain_one(
    tokenizer, split_tokenizer, data, pattern, window, which
):
    """Invariant: over generated patterns (literals, classes, alternations, anchors, flags, non-ASCII) and id
    streams that split characters anywhere, the scanner with the quiet table answers every push exactly
    as the plain scanner (no table: every id through the detokenizer) does; so it stops at the same id."""
    chosen = tokenizer if which == "tiny" else split_tokenizer
    try:
        stop = StopPattern(chosen, pattern, window=window)
    except ConfigError:
        return
    ids = data.draw(id_stream(chosen, stop.lead))
    assert pushes(stop.scanner(), ids) == pushes(stop.scanner(prefilter=False), ids)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), pattern=GENERATED, window=st.sampled_from([4, 8, 512]))
def test_quiet_ids_handed_over_late_and_in_runs_change_nothing(split_tokenizer, data, pattern, window):
    """As the vLLM stepping path uses it: while the scanner is idle, a quiet id is held back (no call at all);
    the held ids go in one ``skip`` just before the next id that must be pushed. The pushes answer as the
    plain scanner's do at every id that is pushed, and every held id is one the plain scanner says no to."""
    try:
        stop = StopPattern(split_tokenizer, pattern, window=window)
    except ConfigError:
        return
    ids = data.draw(id_stream(split_tokenizer, stop.lead))
    plain = pushes(stop.scanner(prefilter=False), ids)
    scanner, held, answers = stop.scanner(), [], []
    for token in ids:
        if scanner.idle and stop.quiet[token]:
            held.append(token)
            answers.append(False)
            continue
        if held:
            scanner.skip(held)
            held = []
        answers.append(scanner.push(token))
    assert answers == plain


def test_a_scanner_holding_part_of_a_character_pushes_the_next_ids_itself(tokenizer):
    """A lone first byte of "é" leaves the detokenizer holding it: the next id's text is no longer its own
    (here "a" comes out as "\ufffda"), so the scanner is not idle until a whole character comes out."""
    ids = [*byte_ids(tokenizer, "x"), byte_ids(tokenizer, "é")[0], *byte_ids(tokenizer, "ab")]
    stop = StopPattern(tokenizer, "ab")
    scanner = stop.scanner()
    answers = [scanner.push(ids[0]), scanner.push(ids[1]), scanner.idle, *pushes(scanner, ids[2:])]
    assert answers == [False, False, False, False, True]  # x, (é's first byte: held), not idle, a, b: "x\ufffdab"
    assert pushes(stop.scanner(prefilter=False), ids) == [False, False, False, True]


def test_the_quiet_table_is_one_per_tokenizer_and_lead_and_absent_without_a_lead(tokenizer):
    """An id is quiet unless its text could end a copy of the lead (holds one, or begins with its end) or holds part
    of a character; a pattern with no lead, and a tokenizer that is not byte-level (its ids' texts depend on
    their neighbours), have no table."""
    stop = StopPattern(tokenizer, r"\\boxed\{")
    texts = tokenizer.backend_tokenizer.decode_batch([[i] for i in range(len(tokenizer))], skip_special_tokens=True)
    ends = ["{", "d{", "ed{", "xed{", "oxed{", "boxed{"]  # "\\boxed{" without its first 1..6 characters
    assert [bool(q) for q in stop.quiet] == [
        "\\boxed{" not in text and "\ufffd" not in text and not any(text.startswith(end) for end in ends)
        for text in texts
    ]
    assert not stop.quiet[tokenizer.convert_tokens_to_ids("{")] and stop.quiet[tokenizer.convert_tokens_to_ids("}{")]
    assert StopPattern(tokenizer, r"\\boxed\{").quiet is stop.quiet  # built once
    for pattern in ("a|b", "[xy]z", "(?i)x"):
        assert StopPattern(tokenizer, pattern).quiet is None
    from tokenizers import decoders

    from e1.models.tiny import build_tokenizer

    other = build_tokenizer()
    other.backend_tokenizer.decoder = decoders.Metaspace()
    assert StopPattern(other, r"\\boxed\{").quiet is None


# ---- parsing ------------------------------------------------------------------------------------------


def test_new_options_parse_round_trip_and_refuse():
    for text in [
        "soft",
        "soft:start=0.5:strength=4:shape=exp:ceiling=2",
        r"elastic:stop='\\boxed\{'",
        "soft:stop='a:b,c':grace=4",
        'budget-forcing:stop="it\'s"',
    ]:
        assert Mode.parse(str(Mode.parse(text))) == Mode.parse(text)
    assert Mode.parse(r"elastic:stop='\\boxed\{'").stop == r"\\boxed\{"
    assert Mode.split_list("soft:stop='a,b',elastic") == ["soft:stop='a,b'", "elastic"]
    for bad, message in [
        ("soft:strat=0.5", "did you mean 'start'"),
        ("elastic:start=0.5", "does not fit"),
        ("soft:shape=expo", "did you mean 'exp'"),
        ("elastic:stop='('", "stop= pattern .* is not a regex"),
        ("none:stop=x", "does not fit"),
        ("soft:strength=nan", "finite"),
        ("soft:ceiling=0.5", ">= 1|in \\[1"),
        ("soft:start=x", "invalid mode option"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Mode.parse(bad)


# ---- the transformers backend --------------------------------------------------------------------


def test_soft_on_the_scripted_model_is_cut_at_the_ceiling(tiny_engine):
    from tests.test_engine import make_fake

    scripts = [(3, 2), (5, 2), (None, 2)]  # ends itself at 3, at 5 (past t, before the ceiling), never
    engine, prompts = make_fake(tiny_engine.tokenizer, scripts)
    completions = engine.generate(prompts, Budget(4, 4), Mode.parse("soft:strength=0"), GREEDY)
    got = [(c.think_tokens, c.think_end, c.forced) for c in completions]
    assert got == [(3, "natural", False), (5, "natural", False), (6, "budget", True)]


def test_a_strong_soft_bias_ends_the_tiny_model_s_thinking_itself(tiny_engine):
    prompts = ["What is 2 + 3?", "Let x = 7."]
    elastic = tiny_engine.generate(prompts, Budget(8, 4), Mode(), GREEDY)
    assert all(c.think_end == "budget" for c in elastic)  # the random model never ends by itself
    soft = tiny_engine.generate(prompts, Budget(8, 4), Mode.parse("soft:start=0:strength=100"), GREEDY)
    assert all(c.think_end == "natural" and c.think_tokens <= 8 for c in soft)
    for c in soft:
        assert_engine_invariants(c, Budget(8, 4), "soft:start=0:strength=100", tiny_engine.markers.end_ids, 64)
    for c in tiny_engine.generate(prompts, Budget(8, 4), Mode.parse("soft:strength=0:stop='zzz'"), GREEDY):
        assert (c.think_tokens, c.think_end, c.forced) == (12, "budget", True)  # no bias: cut at the ceiling 1.5 t


def test_stop_on_the_tiny_model_ends_at_the_first_match(tiny_engine):
    prompts = ["What is 2 + 3?", "Let x = 7."]
    free = tiny_engine.generate(prompts, Budget(12, 4), Mode("none"), Sampling(temperature=0.0, max_tokens=12))
    texts = [tiny_engine.tokenizer.decode(c.token_ids[2:4]) for c in free]  # two ids each row writes early
    pattern = "|".join(re.escape(t) for t in texts if t.strip())
    stopped = tiny_engine.generate(prompts, Budget(12, 4), Mode("elastic", stop=pattern), GREEDY)
    for c, whole in zip(stopped, free):
        assert c.think_end == "pattern" and c.think_tokens <= 4 and not c.forced  # not cut by the budget
        assert re.search(pattern, c.think_text)
        assert c.token_ids[: c.think_tokens] == whole.token_ids[: c.think_tokens]  # the same greedy thinking


def test_shared_prefixes_give_independent_results_for_soft_and_stop(tiny_engine):
    prompts = ["What is 2 + 3?", "Let x = 7."]
    roots = tiny_engine.generate(prompts, Budget(1, 1), Mode("none"), Sampling(temperature=0.0, max_tokens=40), n=2)
    prefixes = [c.token_ids for c in roots]
    for mode, followed in [("soft:start=0.5:strength=3", 4), ("soft:strength=0", 9), ("elastic:stop='zzz'", 6)]:
        budget = Budget(6, 4)
        shared = tiny_engine.generate(prompts, budget, mode, GREEDY, n=2, prefixes=prefixes)
        alone = tiny_engine.generate(prompts, budget, mode, GREEDY, n=2)
        assert [c.token_ids for c in shared] == [c.token_ids for c in alone], mode
        assert [c.think_end for c in shared] == [c.think_end for c in alone], mode
        assert [c.prefix_tokens for c in shared] == [followed] * 4, mode


def test_e1_sweep_runs_soft_and_stop_shared_as_independent_and_prints_every_metric(
    tiny_model_dir, problems_file, tmp_path
):
    import pandas as pd
    from typer.testing import CliRunner

    from e1.cli.app import app

    modes = "elastic,soft:start=0.5:strength=6,elastic:stop='\\d'"
    frames = []
    for out, extra in ((tmp_path / "shared", []), (tmp_path / "alone", ["--independent"])):
        result = CliRunner().invoke(
            app,
            [
                "sweep",
                "--model",
                str(tiny_model_dir),
                "--datasets",
                str(problems_file),
                "--think",
                "8",
                "--solve",
                "4",
                "--modes",
                modes,
                "--n",
                "1",
                "--temperature",
                "0",
                "--out",
                str(out),
                *extra,
            ],
            prog_name="e1",
        )
        assert result.exit_code == 0, result.output
        assert "whole curves" in result.output and "tok/✓" in result.output and "cut" in result.output
        frames.append(pd.read_parquet(out / "samples.parquet").sort_values(["mode", "think_budget", "problem_id"]))
    shared, alone = frames
    columns = [
        "mode",
        "think_budget",
        "problem_id",
        "think_tokens",
        "solve_tokens",
        "think_end",
        "forced",
        "think_text",
    ]
    pd.testing.assert_frame_equal(shared[columns].reset_index(drop=True), alone[columns].reset_index(drop=True))
    assert set(shared["think_end"]) <= {"natural", "budget", "pattern", "open", "unopened"}
    assert set(shared["mode"]) == {"elastic", "soft:start=0.5:strength=6", "elastic:stop='\\d'"}


# -- the gate of a stop pattern (outside input: a client's, a config's): RE2, linear time --------------------

REGEX_PIECES = st.sampled_from(
    [
        "a",
        "b",
        ".",
        "\\w",
        "\\d",
        "\\s",
        "é",
        "(",
        ")",
        "(?:",
        "|",
        "*",
        "+",
        "?",
        "{2}",
        "{0,999}",
        "{1000}",
        "[a-z]",
        "[^x]",
        "^",
        "$",
        "\\1",
        "(?=",
        "(?<!",
        "\\Z",
        "\\p{L}",
        "++",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.one_of(st.lists(REGEX_PIECES, max_size=40).map("".join), st.text(max_size=80)),
    text=st.text(st.sampled_from(list("ab é→\n{}\\x1")), min_size=500, max_size=512),
)
def test_any_pattern_compiles_to_a_bounded_search_or_is_one_line_naming_stop(pattern, text):
    """Invariant: every pattern a client can send is compiled by RE2 or refused in one line naming stop=;
    a compiled one searches the 512-character window in well under a millisecond (linear time, bounded program)."""
    import time

    try:
        compiled = compile_stop(pattern)
    except ConfigError as err:
        assert str(err).startswith("stop= pattern ") and "\n" not in str(err)
        return
    start = time.perf_counter()
    compiled.search(text.encode())
    assert time.perf_counter() - start < 0.01


def test_nested_quantifiers_run_in_linear_time_and_backreferences_are_named():
    import time

    text = ("a" * 100_000 + "b").encode()
    start = time.perf_counter()
    assert compile_stop(r"(a+)+$").search(text) is None and compile_stop(r"(a|aa)*c").search(text) is None
    assert time.perf_counter() - start < 0.5  # Python's re: minutes (exponential backtracking)
    for pattern, says in [
        (r"(\w)\1", r"a backreference \1"),
        ("a(?!b)", "a lookahead (?!...)"),
        ("(?<=a)b", "a lookbehind"),
        ("a++", "a possessive quantifier"),
        (r"a\Z", r"RE2 writes the end of text \z"),
        ("(.{0,500}){3}", "a repetition of more than 1000"),
        (".{300}", "more than 500"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            Mode.parse(f"elastic:stop='{pattern}'")
