"""The JSON side of serving with budgets: requests in, responses and stream chunks out.

Pure functions on decoded JSON, used by :mod:`e1.serve.middleware`:

    request, plan = prepare(body, served)          # budgets validated, defaults filled, ids asked for
    response = rewrite_response(response, plan, served)
    chunk = plan.rewrite_chunk(chunk, served)      # streaming: one RowState per choice, fed as ids arrive

Every choice gains ``budget`` (thinking/solution/forced token counts, whether thinking was
forced, the budgets it ran under); ``usage`` gains the totals and fills OpenAI's
``completion_tokens_details.reasoning_tokens``; a chat message's ``reasoning`` and ``content``
are split exactly where the RowState split the tokens (markers removed), as ``e1 eval`` does,
whole or streamed (a streamed delta's text is decoded from the same split, :mod:`e1.serve.stream`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from e1.budget import MAX_TOKENS
from e1.engine import RowState
from e1.errors import ConfigError
from e1.numeric import Number
from e1.serve.budgets import (
    FIELDS,
    MODE_FIELD,
    ROOM_FIELD,
    SOLVE_FIELD,
    THINK_FIELD,
    RequestBudget,
    Served,
    check_context,
    feed,
    report,
    request_budget,
    room_field,
    worst_case_tokens,
)
from e1.serve.stream import ChoiceText

KEY = "e1"  # vllm_xargs[KEY]: the offline engine's settings, as e1.engine.vllm.processor reads them (its KEY)


@dataclass
class Plan:
    """One request's budget, whether its client asked for token ids, and its choices' states."""

    budget: RequestBudget | None
    wants_ids: bool
    rounds: bool = False  # early-exit: the middleware drives it in rounds (e1.serve.rounds), not vLLM in one request
    prompt_ids: list[int] = field(default_factory=list)
    states: dict[int, RowState] = field(default_factory=dict)
    texts: dict[int, ChoiceText] = field(default_factory=dict)  # streaming: each choice's text so far

    def state(self, index: int, served: Served, prompt_ids=None) -> RowState:
        if index not in self.states:
            self.states[index] = served.state(self.budget, prompt_ids or self.prompt_ids)
        return self.states[index]

    def rewrite_chunk(self, chunk: dict, served: Served) -> dict:
        """One streamed chunk: feed its ids and rebuild its chat text from them; a choice's last
        chunk gets ``budget``, usage the totals."""
        if chunk.get("prompt_token_ids"):
            self.prompt_ids = list(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            state = self.state(index, served)
            feed(state, choice.get("token_ids") or [])
            delta = choice.get("delta")
            if isinstance(delta, dict) and choice.get("token_ids") is not None and not delta.get("tool_calls"):
                if index not in self.texts:
                    self.texts[index] = ChoiceText(served.tokenizer)
                self.texts[index].rewrite(delta, state, final=choice.get("finish_reason") is not None)
            if choice.get("finish_reason") is not None:
                _finish(choice, state, self.budget)
            _hide_ids(choice, self.wants_ids, "token_ids")
        if chunk.get("usage"):
            _add_usage(chunk["usage"], self.states.values())
        _hide_ids(chunk, self.wants_ids, "prompt_token_ids")
        return chunk


def prepare(request: dict, served: Served) -> tuple[dict, Plan]:
    """Validate the request's budgets and hand vLLM complete settings: top-level budget fields
    move into ``vllm_xargs``, the server's defaults fill the rest, ``max_tokens`` defaults to the
    budget's worst case (the processor then refuses a prompt that leaves too little room), and token ids are
    asked for (the counts are replayed from them; they are hidden again unless the client asked)."""
    xargs = request.get("vllm_xargs") or {}
    if not isinstance(xargs, dict):
        raise ConfigError("vllm_xargs must be a JSON object", hint=f'e.g. {{"{THINK_FIELD}": 512}}')
    xargs = dict(xargs)
    if KEY in xargs:  # the rounds' own settings: never a client's
        raise ConfigError(f"vllm_xargs[{KEY!r}] is e1's own (its early-exit rounds)", hint="send budget_mode instead")
    for name in FIELDS:
        if name in request:
            value = request.pop(name)
            if xargs.get(name, value) != value:
                raise ConfigError(f"{name} is given twice with different values", hint="send it once")
            xargs[name] = value
    room_field(xargs)  # a client's budget_room of the wrong type: 400 naming it, not a 500 later
    budget = request_budget(xargs, served.defaults)
    if budget is None:
        xargs[MODE_FIELD] = "none"  # the server's default budgets must not apply to it in vLLM either
    else:
        exit_ids = served.exit_ids(budget)
        check_context(budget, served.markers, served.max_model_len, exit_ids)
        xargs.update({THINK_FIELD: budget.budget.think, SOLVE_FIELD: budget.budget.solve, MODE_FIELD: str(budget.mode)})
        if request.get("max_tokens") is None and request.get("max_completion_tokens") is None:
            request["max_tokens"] = xargs[ROOM_FIELD] = worst_case_tokens(budget, served.markers, exit_ids)
    if budget is not None and budget.mode.prefills:
        _prefill(request, budget.mode, served)
    plan = Plan(
        budget, wants_ids=bool(request.get("return_token_ids")), rounds=budget is not None and budget.mode.trials
    )
    if plan.rounds:
        check_request(request, budget.mode)  # what the rounds cannot honour, refused before any round
    return {**request, "vllm_xargs": xargs, "return_token_ids": True}, plan


def _prefill(request: dict, mode, served: Served) -> None:
    """A mode that writes into the prompt (nothinking's closed thinking box): a text prompt gets it here, as
    ``e1 eval`` prefills (:func:`e1.engine.prefilled`); a prompt of ids must hold it already (e1's
    ``--backend openai`` sends it so); chat messages cannot: vLLM renders them after this point."""
    from e1.engine import PROMPT_CLOSED, prefilled

    prompt = request.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # one prompt in a list
    if isinstance(prompt, str):
        request["prompt"] = prefilled(prompt, mode, served.markers)
    elif not (isinstance(prompt, list) and all(isinstance(i, int) for i in prompt) and prompt) or (
        served.markers.prompt_thinking(prompt) != PROMPT_CLOSED
    ):
        _refuse_ids(mode)
    else:  # ids closed by the template alone (no box) are refused as that text is, by the one prefill
        try:
            text = served.tokenizer.decode(prompt, skip_special_tokens=False)
        except (OverflowError, TypeError, ValueError, IndexError):  # an id no token has (negative, too large)
            _refuse_ids(mode)
        if prefilled(text, mode, served.markers) != text:
            _refuse_ids(mode)


def _refuse_ids(mode) -> None:
    raise ConfigError(
        f"mode {mode} needs one prompt sent to /v1/completions, as text (or as ids already ending in its box)",
        hint="chat messages are rendered after e1 could write the closed thinking box: send the prompt as text",
    )


def rewrite_response(response: dict, plan: Plan, served: Served) -> dict:
    """A whole (non-streamed) response: every choice replayed from its ids."""
    plan.prompt_ids = list(response.get("prompt_token_ids") or [])
    for choice in response.get("choices") or []:
        state = plan.state(choice.get("index", 0), served, choice.get("prompt_token_ids"))
        feed(state, choice.get("token_ids") or [])
        _finish(choice, state, plan.budget)
        message = choice.get("message")
        if isinstance(message, dict) and not message.get("tool_calls"):
            _split_message(message, state, served.tokenizer)
        _hide_ids(choice, plan.wants_ids, "token_ids", "prompt_token_ids")
    if response.get("usage"):
        _add_usage(response["usage"], plan.states.values())
    _hide_ids(response, plan.wants_ids, "prompt_token_ids")
    return response


def _finish(choice: dict, state: RowState, budget: RequestBudget | None) -> None:
    choice["budget"] = report(state, budget)
    if budget is not None and state.done and state.finish_reason == "length":
        choice["finish_reason"] = "length"  # vLLM saw the EOS e1 forced when the solution budget ran out


def _split_message(message: dict, state: RowState, tokenizer) -> None:
    if not state.opened:
        return  # the model did not think: vLLM's message stands
    think, solution = state.split()
    message["reasoning"] = tokenizer.decode(think, skip_special_tokens=True) or None
    message["content"] = (tokenizer.decode(solution, skip_special_tokens=True) or None) if state.closed else None


def _add_usage(usage: dict, states) -> None:
    states = list(states)
    thinking = sum(s.think_tokens for s in states)
    usage.update(
        thinking_tokens=thinking,
        solution_tokens=sum(s.solve_tokens for s in states),
        forced_tokens=sum(sum(s.forced) for s in states),
    )
    usage["completion_tokens_details"] = {
        **(usage.get("completion_tokens_details") or {}),
        "reasoning_tokens": thinking,
    }


def _hide_ids(obj: dict, wanted: bool, *keys: str) -> None:
    if not wanted:
        for key in keys:
            if key in obj:
                obj[key] = None


# request fields the rounds do not honour: refused (HTTP 400) when set to anything but their default
REFUSED = (
    "stream",
    "logprobs",
    "top_logprobs",
    "echo",
    "best_of",
    "suffix",
    "prompt_logprobs",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "min_tokens",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_p",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "tools",
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
)
_DEFAULTS = {"repetition_penalty": 1.0, "top_logprobs": 0}
_COUNTS = {
    "n": Number(int, min=1, max=1024, optional=True),
    "max_tokens": Number(int, min=1, max=MAX_TOKENS, optional=True),
    "max_completion_tokens": Number(int, min=1, max=MAX_TOKENS, optional=True),
    "seed": Number(int, optional=True),
}  # the driver's own arithmetic (each round's seed is derived)


def check_request(request: dict, mode) -> None:
    """Refuse, in one line, what an early-exit request cannot have: a stream, or a field in ``REFUSED``."""
    if request.get("stream"):
        raise ConfigError(
            f"mode {mode} is not streamed: its samples are decoded in rounds, one per trial answer",
            hint="send stream: false, or stream another mode",
        )
    given = [key for key in REFUSED if request.get(key) not in (None, False, [], {}, "", _DEFAULTS.get(key, None))]
    if given:
        raise ConfigError(
            f"mode {mode} does not take {given[0]}: its samples are decoded in rounds of plain completions",
            hint=f"leave out {given[0]}, or use another mode",
        )
    for key, number in _COUNTS.items():
        number.check(request.get(key), key)
    if not isinstance(request.get("skip_special_tokens", True), bool):  # the driver decodes the text itself
        raise ConfigError("skip_special_tokens must be true or false", hint="send a JSON boolean")
    prompt = request.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) and len(prompt) > 1:
        raise ConfigError(f"mode {mode} takes one prompt per request", hint="send the prompts one by one")
