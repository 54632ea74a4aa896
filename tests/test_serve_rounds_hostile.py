"""early-exit served in rounds, against hostile clients: no engine (the stand-in of tests/test_serve_rounds.py).

- ``vllm_xargs["e1"]`` (the rounds' raw settings: forced token ids, history) is refused by the middleware on
  its two routes, but vLLM has others that take ``vllm_xargs`` and never pass it (``/invocations``,
  ``/v1/responses``, ``/v1/messages``): the processor's admission check must refuse it there too, or a
  client forces a token id past the vocabulary and the engine dies (every client's requests with it);
- a server whose default mode is early-exit must not decode trials into a request that reached the engine
  around the middleware (one request cannot roll a trial back: its answer would be the output);
- every field the driver itself reads (``seed``, ``skip_special_tokens``) is a one-line 400, never a 500.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("vllm")

from e1.serve.budgets import Served, ServeDefaults
from e1.serve.middleware import BudgetMiddleware
from tests.test_serve_rounds import StandIn, ToyModel

MODE = "early-exit:threshold=0.9:trial=2:at=' x'"


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(str(tiny_model_dir))
    return Served(ServeDefaults(), tokenizer, resolve_markers(tokenizer), 512)


class Recording(StandIn):
    """The stand-in, keeping each round's ``vllm_xargs``."""

    def __init__(self, model, served):
        super().__init__(model, served)
        self.xargs = []

    def complete(self, body):
        self.xargs.append(body["vllm_xargs"])
        return super().complete(body)


def post(served: Served, app, body: dict, path="/v1/completions") -> tuple[int, dict]:
    middleware, sent, data = BudgetMiddleware(app=app), [], json.dumps(body).encode()
    middleware.served = served

    async def receive():
        return {"type": "http.request", "body": data}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", str(len(data)).encode())]}
    asyncio.run(middleware(scope, receive, send))
    return sent[0]["status"], json.loads(sent[1]["body"])


def model_for(served: Served) -> ToyModel:
    tokenizer, markers = served.tokenizer, served.markers
    a, x = (tokenizer.encode(c, add_special_tokens=False)[0] for c in ("a", " x"))
    return ToyModel([a, x, *markers.end_ids, min(markers.eos_ids)], 11, rare=(*markers.end_ids, min(markers.eos_ids)))


def rounds_xargs(served: Served) -> list[dict]:
    app = Recording(model_for(served), served)
    status, _ = post(
        served,
        app,
        {"prompt": "What is 2 + 3? <think>", "thinking_budget": 8, "solution_budget": 3, "budget_mode": MODE},
    )
    assert status == 200 and app.xargs
    return app.xargs


def test_the_rounds_settings_from_a_client_are_refused_at_admission(served):
    """What /invocations or /v1/responses hand vLLM as it came: the rounds' settings, with a forced id past the
    vocabulary (the engine's logits[row, id] = 0 would raise, in the engine process, for every request in it)."""
    from vllm import SamplingParams

    from e1.serve.processor import ServedBudgetProcessor

    args = json.loads(rounds_xargs(served)[0]["e1"])
    args.update(think=0, thinking="open", end=[10**9], history=[])  # thinking ends at once: the id is forced first
    for xargs in ({"e1": json.dumps(args)}, {"e1": json.dumps(args), "e1_rounds": "guess"}):
        with pytest.raises(ValueError, match="e1's own"):
            ServedBudgetProcessor.validate_params(SamplingParams(max_tokens=8, extra_args=xargs))


def test_the_middlewares_own_rounds_pass_admission(served):
    from vllm import SamplingParams

    from e1.serve.processor import ServedBudgetProcessor

    for xargs in rounds_xargs(served):
        ServedBudgetProcessor.validate_params(SamplingParams(max_tokens=8, extra_args=xargs))


def test_a_default_early_exit_decodes_no_trial_around_the_middleware(served):
    """``--mode early-exit`` with default budgets, and a request from a route the middleware never sees (no
    fields): the processor's state must never begin a trial (its prompt and answer would be the output)."""
    from vllm import SamplingParams

    from e1.serve.processor import ServedBudgetProcessor

    processor = object.__new__(ServedBudgetProcessor)
    processor.served = Served(ServeDefaults(think=12, solve=4, mode=MODE), served.tokenizer, served.markers, 512)
    prompt = served.tokenizer.encode("What is 2 + 3? <think>", add_special_tokens=False)
    state = processor.request_state(SamplingParams(max_tokens=64, extra_args={}), prompt)
    x = served.tokenizer.encode(" x", add_special_tokens=False)
    for _ in range(3):
        for token in x:
            state.accept(token)
            assert not state.in_trial and state.forced_token() is None


@pytest.mark.parametrize(
    "extra, name",
    [
        ({"seed": "x"}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"seed": [1]}, "seed"),
        ({"skip_special_tokens": {"a": 1}}, "skip_special_tokens"),
    ],
)
def test_a_field_the_driver_reads_is_a_one_line_400(served, extra, name):
    app = Recording(model_for(served), served)
    status, body = post(
        served,
        app,
        {"prompt": "What is 2 + 3? <think>", "thinking_budget": 8, "solution_budget": 3, "budget_mode": MODE, **extra},
    )
    message = body["error"]["message"]
    assert status == 400 and name in message and "\n" not in message
    assert not app.xargs  # refused before any round ran


def test_a_one_token_prompt_is_a_prompt_of_ids(served):
    """``prompt: [5]`` is one token id, as vLLM reads it (not the number 5 for /tokenize to refuse)."""
    token = served.tokenizer.encode("a", add_special_tokens=False)[0]
    for prompt in ([token], [[token]]):
        status, body = post(
            served,
            Recording(model_for(served), served),
            {
                "prompt": prompt,
                "thinking_budget": 4,
                "solution_budget": 2,
                "budget_mode": MODE,
                "return_token_ids": True,
            },
        )
        assert status == 200 and body["choices"][0]["prompt_token_ids"] == [token]
