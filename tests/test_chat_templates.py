"""What a prompt leaves thinking, on the chat templates of every family e1 documents (R1 before and
after DeepSeek's update, Qwen3 with thinking on and off, a template without think markers), built
offline (:mod:`tests.chat_templates`): the last marker decides, and every engine path decodes by it
(a Qwen3 "thinking off" reply is all solution, nothing forced into it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.data.prompts import PromptOptions, build_prompt
from e1.engine.base import Mode, Sampling
from e1.engine.markers import (
    PROMPT_ABSENT,
    PROMPT_CLOSED,
    PROMPT_OPEN,
    Markers,
    resolve_markers,
)
from tests.chat_templates import PHASES, family_model, family_tokenizer


def earlier_turns(family: str) -> list[dict]:
    """A conversation whose earlier assistant turn thought: R1's and Qwen3's templates drop that
    thinking (a template that kept it would leave the prompt closed, as vLLM reads it too)."""
    said = "The answer is 5." if family == "plain" else "<think>\n2 + 3 = 5.\n</think>\n\nThe answer is 5."
    return [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "Then 2x + 1?"},
    ]


@pytest.fixture(scope="module")
def tokenizers():
    return {name: family_tokenizer(name) for name in {family for family, _ in PHASES}}


@pytest.mark.parametrize("family,kwargs", sorted(PHASES))
def test_each_family_leaves_thinking_as_its_generation_prompt_says(tokenizers, family, kwargs):
    tokenizer = tokenizers[family]
    markers = resolve_markers(tokenizer)
    for chat in ([{"role": "user", "content": "What is 2 + 3?"}], earlier_turns(family)):
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, **dict(kwargs))
        assert markers.prompt_thinking(tokenizer.encode(text, add_special_tokens=False)) == PHASES[family, kwargs]


SEGMENTS = st.lists(st.sampled_from(["<think>", "</think>", "\n", "\n\n", " 2 + 3 = 5.", "Wait", " x"]), max_size=12)


def last_marker(segments: list[str]) -> str:
    """The expected phase, read off the segments the prompt was written from (not its ids)."""
    marks = [s for s in segments if s in ("<think>", "</think>")]
    return PROMPT_ABSENT if not marks else PROMPT_OPEN if marks[-1] == "<think>" else PROMPT_CLOSED


@settings(max_examples=300, deadline=None)
@given(family=st.sampled_from(["r1_new", "qwen3"]), tail=SEGMENTS)
def test_a_prompt_is_open_iff_its_last_start_marker_follows_its_last_end_marker(tokenizers, family, tail):
    """Generated prompt tails on the real tokenizers: any mix of markers and text after a chat turn."""
    tokenizer = tokenizers[family]
    head = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=False
    )
    ids = tokenizer.encode(head + "".join(tail), add_special_tokens=False)
    assert resolve_markers(tokenizer).prompt_thinking(ids) == last_marker(tail)


START, END = (3, 4), (7, 8, 9)  # multi-token markers (--think-start/--think-end text), overlapping ids
MULTI = Markers("<t>", "</t>", START, END, frozenset({2}), 0, (5,), (6,))


def positions(ids: list[int], marker: tuple[int, ...]) -> list[int]:
    return [i for i in range(len(ids) - len(marker) + 1) if tuple(ids[i : i + len(marker)]) == marker]


@settings(max_examples=500, deadline=None)
@given(ids=st.lists(st.sampled_from([3, 4, 7, 8, 9, 11, 12]), max_size=40))
def test_multi_token_markers_are_found_as_whole_sequences(ids):
    starts, ends = positions(ids, START), positions(ids, END)
    expected = (
        PROMPT_ABSENT
        if not starts and not ends
        else PROMPT_OPEN
        if max(starts, default=-9) > max(ends, default=-9)
        else PROMPT_CLOSED
    )
    assert MULTI.prompt_thinking(ids) == expected


def options(kwargs) -> PromptOptions:
    import json

    return PromptOptions(template_kwargs=json.dumps(dict(kwargs)) if kwargs else "")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from e1.engine import EngineSpec
    from e1.engine.hf.hf_engine import HFEngine

    root = tmp_path_factory.mktemp("families")
    return {
        name: HFEngine.load(str(family_model(root / name, name)), EngineSpec(dtype="float32", device="cpu"))
        for name in ("r1_old", "r1_new", "qwen3")
    }


@pytest.mark.parametrize("family,kwargs", sorted(key for key in PHASES if key[0] != "plain"))
def test_the_engine_decodes_each_prompt_in_the_phase_it_left(engines, family, kwargs):
    """Elastic t=2 s=6, greedy: an open prompt gets only the end marker forced at t, one that never
    opened thinking gets start + end, and a closed one (Qwen3 thinking off) is all solution."""
    engine = engines[family]
    markers, phase = engine.markers, PHASES[family, kwargs]
    prompt = build_prompt(engine.tokenizer, "What is 2 + 3?", options=options(kwargs))
    for c in engine.generate([prompt], Budget(2, 6), Mode(), Sampling(temperature=0, max_tokens=64), n=1):
        forced = [token for token, f in zip(c.token_ids, c.forced_mask) if f]
        if phase == PROMPT_CLOSED:
            assert (c.think_tokens, forced, c.think_text, c.think_end) == (0, [], "", "prefilled")
            assert c.solve_tokens == len(c.token_ids) > 0 and c.closed
        elif c.forced:  # the tiny model did not end thinking within t itself
            assert forced == list(markers.end_ids if phase == PROMPT_OPEN else markers.start_ids + markers.end_ids)
            assert c.think_tokens == 2 and c.think_end == "budget"
