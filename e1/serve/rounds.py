"""early-exit served: each sample decoded in several vLLM requests, driven from e1's middleware.

One vLLM request cannot roll a trial answer back, so an early-exit request (``budget_mode:
"early-exit[:threshold=...:trial=...:at=...]"``) never reaches vLLM as it came. The middleware
(:mod:`e1.serve.middleware`) hands it here, and each sample runs the offline vLLM backend's rounds
(:mod:`e1.engine.vllm.vllm_engine`) against the server's own app: its prompt ids from ``/tokenize`` (vLLM's
chat template and tokenizer, as the request would have had), then ``/v1/completions`` requests with
token prompts, each carrying the offline engine's settings (``budget_args``) for the logits processor.
A round ends at the next trial (the processor forces the trial prompt, the greedy answer, then EOS)
or at the row's end; the trial answer's probabilities come back as raw logprobs; the row's
:class:`~e1.engine.early_exit_state.EarlyExitState` — the one phase machine of every backend — keeps the
real tokens only (:func:`~e1.engine.early_exit_state.replay_round`), and the next round continues from
prompt + real tokens, a prefix-cache hit. The reply is then built like any other served reply
(:func:`~e1.serve.responses.rewrite_response`), with the trials added to each choice's ``budget``:

    response = await serve_rounds(app, scope, receive, request, plan, served)   # the reply's JSON

Streaming is refused (the real tokens are only known round by round; a client that wants them as
they come can ask elastic), as are the request fields the rounds cannot honour (``REFUSED``).
``n`` > 1 works: the samples run concurrently, each its own rows of rounds, seeded from the
request's ``seed`` and the sample's index (greedy samples are all alike).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

from anyio import to_thread

from e1.engine import EarlyExitState, replay_round
from e1.serve.budgets import (
    ROOM_FIELD,
    ROUNDS_FIELD,
    ROUNDS_SECRET,
    SOLVE_FIELD,
    THINK_FIELD,
    Served,
    check_room,
    error_body,
)

SAMPLING = ("temperature", "top_p", "top_k")  # passed on to every round as the client gave them
_TEMPLATE = (
    "messages",
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
)  # what /tokenize needs to render a chat prompt as vLLM would


class Disconnected(Exception):
    """The client hung up: vLLM answered a round with no reply (its handler was cancelled)."""


class RoundFailed(Exception):
    """A round's request was not answered with HTTP 200: the client gets that status and body."""

    def __init__(self, status: int, body: dict):
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


async def serve_rounds(app, scope, receive, request: dict, plan, served: Served) -> dict:
    """The whole reply to an early-exit request (``plan`` from :func:`~e1.serve.responses.prepare`)."""
    call = _Caller(app, scope, receive)
    chat = scope["path"].endswith("/chat/completions")
    prompt_ids = await _prompt_ids(call, request, chat)
    room = request.get("max_completion_tokens") or request["max_tokens"]
    budget = plan.budget
    check_room(
        {
            THINK_FIELD: budget.budget.think,
            SOLVE_FIELD: budget.budget.solve,
            ROOM_FIELD: room + budget.mode.trial_room(served.markers),
        },
        served.max_model_len - len(prompt_ids),
    )
    rows = [
        asyncio.ensure_future(_row(call, request, plan, served, prompt_ids, room, j))
        for j in range(request.get("n") or 1)
    ]
    try:
        states = await asyncio.gather(*rows)
    except BaseException:  # a failed round (or a cancelled request) ends the other samples' rounds too
        for row in rows:
            row.cancel()
        raise
    return await to_thread.run_sync(_reply, request, plan, served, chat, prompt_ids, states)


def _reply(request: dict, plan, served: Served, chat: bool, prompt_ids: list[int], states) -> dict:
    """The reply built from the samples' finished states (in a worker thread: it decodes every text)."""
    from e1.serve.responses import rewrite_response

    plan.states.update(enumerate(states))  # done: the replay in rewrite_response adds nothing
    response = _skeleton(request, chat, prompt_ids, states, served)
    response = rewrite_response(response, plan, served)
    for choice, state in zip(response["choices"], states):
        choice["budget"].update(_trials(state, served.tokenizer))
    response["usage"]["trial_tokens"] = sum(state.trial_decoded for state in states)
    return response


async def _prompt_ids(call: _Caller, request: dict, chat: bool) -> list[int]:
    """The prompt's ids: given as ids, or rendered and tokenized by vLLM's own ``/tokenize``."""
    prompt = request.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):  # [5]: one token id
        prompt = prompt[0]
    if not chat and isinstance(prompt, list):
        return list(prompt)
    if chat:
        body = {key: request[key] for key in _TEMPLATE if key in request}
    else:
        body = {"prompt": prompt, **{k: request[k] for k in ("add_special_tokens",) if k in request}}
    reply = await call("/tokenize", {"model": request.get("model"), **body})
    return list(reply["tokens"])


async def _row(
    call: _Caller, request: dict, plan, served: Served, prompt_ids: list[int], room: int, sample: int
) -> EarlyExitState:
    """One sample: rounds until its state is done, each continuing from prompt + the real tokens."""
    from e1.engine import KEY, budget_args, derive_seed, sample_seed

    budget, markers = plan.budget, served.markers
    state = await to_thread.run_sync(served.state, budget, prompt_ids, room)  # tokenizes the exit text
    thinking, sampling = markers.prompt_thinking(prompt_ids), {key: request[key] for key in SAMPLING if key in request}
    round_index = 0

    def settings() -> str:  # the offline engine's settings for the next round (its history: the tokens so far)
        return json.dumps(
            budget_args(
                budget.budget, budget.mode, markers, thinking, state.max_new_tokens, state.tokens, state.exit_ids, state
            )
        )

    while not state.done:
        args = await to_thread.run_sync(settings)
        seed = (
            None if request.get("seed") is None else derive_seed(sample_seed(request["seed"], sample), round_index) >> 1
        )
        body = {
            **sampling,
            "model": request.get("model"),
            "prompt": prompt_ids + state.tokens,
            "seed": seed,
            "max_tokens": max(1, state.max_new_tokens - len(state.tokens) + budget.mode.trial_room(markers)),
            "stop_token_ids": sorted(markers.eos_ids),
            "logprobs": 0,
            "return_token_ids": True,
            "vllm_xargs": {KEY: args, ROUNDS_FIELD: ROUNDS_SECRET},
        }
        choice = (await call("/v1/completions", body))["choices"][0]
        ids, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
        before = (
            len(state.tokens),
            state.trial_decoded,
            state.in_trial,
        )  # in_trial: a trial deferred to the next round
        await to_thread.run_sync(replay_round, state, ids, lambda k, logprobs=logprobs: math.exp(logprobs[k]))
        if (len(state.tokens), state.trial_decoded, state.in_trial) == before and not state.done:
            raise RoundFailed(500, error_body(f"an early-exit round made no progress ({len(ids)} ids)", 500))
        round_index += 1
    return state


def _skeleton(request: dict, chat: bool, prompt_ids: list[int], states, served: Served) -> dict:
    """The reply vLLM would have given for these token ids (the counts and the split come after)."""
    choices, eos = [], min(served.markers.eos_ids)
    for index, state in enumerate(states):
        # the EOS e1 forces when the solution budget runs out ends vLLM's request: its ids carry it
        ids = state.tokens + (
            [eos] if state.finish_reason == "length" and len(state.tokens) < state.max_new_tokens else []
        )
        text = served.tokenizer.decode(state.tokens, skip_special_tokens=request.get("skip_special_tokens", True))
        choice = {"index": index, "logprobs": None, "finish_reason": "stop", "stop_reason": None, "token_ids": ids}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning": None, "tool_calls": []}
        else:
            choice.update(text=text, prompt_token_ids=prompt_ids)
        choices.append(choice)
    completion = sum(len(choice["token_ids"]) for choice in choices)
    kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
    return {
        "id": f"{kind[0]}-{uuid.uuid4().hex}",
        "object": kind[1],
        "created": int(time.time()),
        "model": request.get("model"),
        "choices": choices,
        **({"prompt_token_ids": prompt_ids} if chat else {}),
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion,
            "total_tokens": len(prompt_ids) + completion,
        },
    }


def _trials(state: EarlyExitState, tokenizer) -> dict:
    """What a choice's ``budget`` adds for early-exit: the trial tokens decoded (never output), every
    token decoded, and one record per trial, as ``e1 eval``'s samples carry them."""
    texts = [tokenizer.decode(list(trial.ids), skip_special_tokens=True) for trial in state.trials]
    return {
        "trial_tokens": state.trial_decoded,
        "decoded_tokens": len(state.tokens) + state.trial_decoded,
        "trials": [trial.record(text) for trial, text in zip(state.trials, texts)],
    }


class _Caller:
    """POST JSON to the server's own app (inside e1's middleware: vLLM's key check still applies), with
    the client's headers; a client that disconnects cancels the round in flight, as it would its request."""

    def __init__(self, app, scope, receive):
        self.app, self.scope, self.receive = app, scope, receive

    async def __call__(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = [
            (k, v) for k, v in self.scope.get("headers") or [] if k.lower() not in (b"content-length", b"content-type")
        ]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        scope = {**self.scope, "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers}
        sent, status, parts = False, 500, []

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await self.receive()

        async def send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))

        await self.app(scope, receive, send)
        try:
            reply = json.loads(b"".join(parts) or b"null")
        except ValueError:
            reply = None
        if status == 200 and reply is None:  # vLLM's handler was cancelled: the client hung up
            raise Disconnected(path)
        if status != 200 or not isinstance(reply, dict):
            raise RoundFailed(
                status if status != 200 else 500,
                reply if isinstance(reply, dict) else error_body(f"{path} answered {status} without JSON", 500),
            )
        return reply
