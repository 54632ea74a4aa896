"""--backend gemini|anthropic (and openai's reasoning_effort) against loopback stand-ins that
validate each vendor's documented request schema (tests/hosted_standins.py): what e1 sends for a
token budget or an effort level, and that thinking tokens are the vendor's measured count."""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.api.client import RequestError
from e1.engine.api.openai_engine import ApiSettings
from e1.engine.api.vendors import ANTHROPIC_EFFORTS, GEMINI_LEVELS, VENDORS
from e1.engine.base import Mode, Sampling
from e1.errors import ConfigError
from tests.hosted_standins import ANSWER, EFFORT_TOKENS, NATURAL, StandIn

pytest.importorskip("google.genai")
pytest.importorskip("anthropic")
KEYS = {"gemini": "GEMINI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@pytest.fixture(scope="module")
def stand_ins():
    servers = {vendor: StandIn(vendor).start() for vendor in ("gemini", "anthropic")}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    for variable in KEYS.values():
        monkeypatch.setenv(variable, "test-key")


def _engine(stand_in: StandIn, modes=("elastic",)):
    from e1.engine.api.hosted import HostedEngine

    return HostedEngine.load("stand-in", ApiSettings(stand_in.url, backend=stand_in.vendor, max_retries=0), modes)


SMALL, DEFAULT_SAMPLING = Budget(0, 64), Sampling()


def _one(
    stand_in: StandIn,
    mode: str,
    budget: Budget = SMALL,
    prompt: str = "this needs 500",
    sampling: Sampling = DEFAULT_SAMPLING,
):
    """(the body the stand-in received, the completion) of one sample."""
    before = len(stand_in.requests)
    completion = _engine(stand_in).generate([prompt], budget, Mode.parse(mode), sampling, seeds=[11])[0]
    assert len(stand_in.requests) == before + 1  # one request per sample
    return stand_in.requests[-1], completion


def test_gemini_maps_budgets_and_levels_to_thinking_config(stand_ins):
    gemini = stand_ins["gemini"]
    body, c = _one(gemini, "elastic", Budget(1024, 64))
    config = body["generationConfig"]
    assert config["thinkingConfig"] == {
        "thinking_budget": 1024,
        "include_thoughts": True,
    }  # proto names, as the SDK sends
    assert config["maxOutputTokens"] == 1024 + 64 and 0 <= config["seed"] < 2**31
    assert (c.think_tokens, c.solve_tokens, c.solution_text, c.finish_reason) == (1024, ANSWER, "\\boxed{5}", "stop")
    assert c.think_text  # the thought summary parts
    body, c = _one(gemini, "elastic", Budget(0, 64))  # 0: thinking off, and no thoughtsTokenCount in the reply
    assert body["generationConfig"]["thinkingConfig"]["thinking_budget"] == 0 and c.think_tokens == 0
    assert c.solution_text == "\\boxed{0}"  # needs 500, thought 0
    body, c = _one(gemini, "none:effort=low", sampling=Sampling(max_tokens=4096))
    assert body["generationConfig"]["thinkingConfig"] == {"thinking_level": "LOW", "include_thoughts": True}
    assert body["generationConfig"]["maxOutputTokens"] == 4096 and c.think_tokens == EFFORT_TOKENS["low"]
    body, c = _one(gemini, "none:effort=dynamic")
    assert (
        body["generationConfig"]["thinkingConfig"]["thinking_budget"] == -1
        and c.think_tokens == EFFORT_TOKENS["dynamic"]
    )


def test_anthropic_maps_budgets_and_efforts_to_thinking_and_output_config(stand_ins):
    claude = stand_ins["anthropic"]
    body, c = _one(claude, "elastic", Budget(2048, 100))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and body["max_tokens"] == 2148
    assert (c.think_tokens, c.solve_tokens) == (NATURAL, ANSWER)  # thought 1200 of 2048 allowed
    body, c = _one(claude, "elastic", Budget(0, 100))
    assert body["thinking"] == {"type": "disabled"} and c.think_tokens == 0
    body, c = _one(claude, "none:effort=medium", sampling=Sampling(max_tokens=5000))
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "medium"}
    assert body["max_tokens"] == 5000 and c.think_tokens == EFFORT_TOKENS["medium"]
    body, c = _one(claude, "none")  # no effort: the vendor's default, no thinking field
    assert "thinking" not in body and "output_config" not in body
    assert not {"temperature", "top_p", "top_k", "seed"} & set(body)  # anthropic >= 2 takes none of them
    body, c = _one(claude, "none:effort=low", sampling=Sampling(max_tokens=100))  # the cap cuts thinking
    assert (c.think_tokens, c.solve_tokens, c.finish_reason, c.closed) == (100, 0, "length", False)


def test_what_a_vendor_cannot_take_is_refused_before_anything_is_sent(stand_ins):
    gemini, claude = stand_ins["gemini"], stand_ins["anthropic"]
    sent = len(gemini.requests), len(claude.requests)
    with pytest.raises(ConfigError, match=r"no effort level 'hihg'.*high"):
        _engine(gemini).generate(["x needs 1"], Budget(0, 9), Mode.parse("none:effort=hihg"), Sampling())
    with pytest.raises(ConfigError, match="anthropic has no effort level 'minimal'"):  # Gemini's level, not Claude's
        _engine(claude).generate(["x needs 1"], Budget(0, 9), Mode.parse("none:effort=minimal"), Sampling())
    with pytest.raises(ConfigError, match="0 \\(off\\) or >= 1024"):
        _engine(claude).generate(["x needs 1"], Budget(512, 9), Mode(), Sampling())
    for mode in ("truncate", "budget-forcing", "elastic:grace=8", "elastic:exit=qwen"):
        with pytest.raises(ConfigError, match="the vendor decodes, so e1 forces nothing"):
            _engine(gemini, modes=(mode,))
    assert (len(gemini.requests), len(claude.requests)) == sent


def test_a_missing_sdk_names_its_extra(stand_ins, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.genai", None)  # an import of it now fails
    with pytest.raises(ConfigError, match=r"needs the google.genai package.*pip install 'e1\[gemini\]'"):
        _engine(stand_ins["gemini"])


def test_effort_is_a_mode_option_of_none_only():
    assert str(Mode.parse("none:effort=High")) == "none:effort=high"
    assert Mode.parse("none:effort=low") != Mode.parse("none:effort=high") != Mode("none")
    for text in ("elastic:effort=high", "none:effort=9", "truncate:effort=low"):
        with pytest.raises(ConfigError, match="effort"):
            Mode.parse(text)
    from e1.serve.budgets import check_fields

    with pytest.raises(ConfigError, match="hosted vendor's setting"):
        check_fields({"budget_mode": "none:effort=high"})


def test_openai_sends_reasoning_effort_and_counts_reasoning_tokens(monkeypatch):
    from e1.engine.api.openai_engine import OpenAIEngine

    server = StandIn("openai").start()
    try:
        engine = OpenAIEngine.load("stand-in", ApiSettings(server.url, max_retries=0), ["none:effort=high"])
        c = engine.generate(
            ["this needs 1400"], Budget(0, 9), Mode.parse("none:effort=high"), Sampling(max_tokens=3000), seeds=[1]
        )[0]
        body = server.requests[-1]
        assert body["reasoning_effort"] == "high" and body["max_completion_tokens"] == 3000 and "max_tokens" not in body
        assert (c.think_tokens, c.solve_tokens, c.solution_text) == (EFFORT_TOKENS["high"], ANSWER, "\\boxed{5}")
        with pytest.raises(ConfigError, match=r"openai has no effort level 'max'"):  # Claude's level, not OpenAI's
            engine.method("none:effort=max")
    finally:
        server.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    vendor=st.sampled_from(["gemini", "anthropic"]),
    think=st.integers(0, 5000),
    solve=st.integers(1, 3000),
    effort=st.sampled_from(["", *GEMINI_LEVELS, "dynamic", *ANTHROPIC_EFFORTS]),
    need=st.integers(0, 3000),
    token_axis=st.booleans(),
)
def test_every_request_is_the_vendors_schema_and_every_count_is_the_vendors(
    stand_ins, vendor, think, solve, effort, need, token_axis
):
    """Whatever the budget or level: the stand-in's strict schema accepts what e1 sends (or e1 refuses
    first, with one clear line), and the recorded tokens are the reply's own counts."""
    server = stand_ins[vendor]
    mode = "elastic" if token_axis else f"none:effort={effort}" if effort else "none"
    budget, sampling = Budget(think, solve), Sampling(max_tokens=solve + 1000)
    try:
        body, c = _one(server, mode, budget, prompt=f"this needs {need}", sampling=sampling)
    except ConfigError:
        refused = (vendor == "anthropic" and token_axis and 0 < think < 1024) or effort not in VENDORS[vendor].efforts
        assert refused
        return
    assert not isinstance(c, RequestError)
    cap = budget.total if token_axis else sampling.max_tokens
    if vendor == "gemini":
        sent = body["generationConfig"]["maxOutputTokens"]
    else:
        sent = body["max_tokens"]
    assert sent == cap
    assert c.think_tokens + c.solve_tokens <= cap  # the reply's usage, within its cap
    assert c.solution_text in ("\\boxed{5}", "\\boxed{0}") or "\\boxed{".startswith(c.solution_text)
    assert (c.solution_text == "\\boxed{5}") == (c.finish_reason == "stop" and c.think_tokens >= need)


def _reply(vendor: str, thinking, thought: bool, answer_tokens: int) -> dict:
    """A reply in the vendor's shape (as its SDK dumps it) with thinking count ``thinking`` (None: left out)."""
    if vendor == "anthropic":
        usage = {"input_tokens": 3, "output_tokens": answer_tokens + (thinking if isinstance(thinking, int) else 0)}
        if thinking is not None:
            usage["output_tokens_details"] = {"thinking_tokens": thinking}
        blocks = [{"type": "thinking", "thinking": "t"}] if thought else []
        return {"content": [*blocks, {"type": "text", "text": "a"}], "usage": usage, "stop_reason": "end_turn"}
    usage = {"prompt_token_count": 3, "candidates_token_count": answer_tokens}
    if thinking is not None:
        usage["thoughts_token_count"] = thinking
    parts = [{"text": "t", "thought": True}] if thought else []
    return {
        "candidates": [{"content": {"parts": [*parts, {"text": "a"}]}, "finish_reason": "STOP"}],
        "usage_metadata": usage,
    }


@given(
    vendor=st.sampled_from(["gemini", "anthropic"]),
    thought=st.booleans(),
    answer_tokens=st.integers(0, 60),
    thinking=st.one_of(st.none(), st.integers(-5, 50), st.text(max_size=3), st.floats(0, 9)),
)
def test_a_reply_without_its_thinking_count_is_refused_never_guessed(vendor, thinking, thought, answer_tokens):
    """Thinking tokens are the reply's own count; left out, they are 0 only when nothing was thought
    (Gemini documents thoughtsTokenCount as absent then); anything else is refused, never estimated."""
    if thinking is None:
        expected = None if thought else 0
    else:
        expected = thinking if isinstance(thinking, int) and thinking >= 0 else None
    reply, gate = _reply(vendor, thinking, thought, answer_tokens), VENDORS[vendor]
    request = {"max_tokens": 200} if vendor == "anthropic" else {"config": {"max_output_tokens": 200}}
    if expected is None:
        with pytest.raises(RequestError, match="token|integer"):
            gate.completion(gate.accept(reply, request), (0, 0))
        return
    c = gate.completion(gate.accept(reply, request), (0, 0))
    assert (c.think_tokens, c.solve_tokens) == (expected, answer_tokens)
