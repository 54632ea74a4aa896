"""What an OpenAI-compatible server can do, asked once when :class:`~e1.engine.api.openai_engine.OpenAIEngine` loads.

    context = served_context(client, "my-model", url)    # vLLM lists max_model_len; None if not said
    server = probe_budgets(caller, "my-model", chat=False)   # BUDGET_SERVER (e1 serve) or PLAIN_SERVER
    ids_in, ids_out = probe_token_ids(caller, "my-model", tokenizer.encode("Hi", add_special_tokens=False))
    exact, why = exactness(chat=False, ids_in=ids_in, ids_out=ids_out)   # recorded per run in config.json
    warn_inexact(url, chat=False, ids_in=ids_in, ids_out=ids_out)   # and one warning line if not exact

A plain server that takes a prompt as token ids is sent e1's own ids, never the text it would tokenise
again (R1's tokenizer adds a BOS to a text, so the server would see a second one); one that also
returns the reply's ids (vLLM's ``return_token_ids``) is run on ids throughout, token for token.
"""

from __future__ import annotations

from e1.engine.api.client import Caller
from e1.engine.api.replies import MODE_FIELD, SOLVE_FIELD, THINK_FIELD, PromptChanged, RequestError
from e1.errors import ModelError, redact

BUDGET_SERVER, PLAIN_SERVER = "takes e1 budgets", "plain"


def served_context(client, model: str, url: str) -> int | None:
    """The served model's context (vLLM lists ``max_model_len``); refuses a model the server does not serve."""
    import openai

    try:
        cards = list(client.models.list())
    except openai.NotFoundError:
        return None  # a server without /v1/models
    except openai.APIConnectionError as err:
        raise ModelError(f"cannot reach {url}: {err}", hint="check --api-url and that the server is up") from err
    except openai.APIStatusError as err:
        raise ModelError(
            f"{url} refused to list its models (HTTP {err.status_code})", hint="check --api-key-env and --api-url"
        ) from err
    served = {card.id: card for card in cards}
    if served and model not in served:
        from e1.errors import did_you_mean

        raise ModelError(f"{url} does not serve {model!r}", hint=did_you_mean(model, served, "it serves"))
    extra = getattr(served.get(model), "model_extra", None) or {}
    context = extra.get("max_model_len")
    return context if isinstance(context, int) and context > 0 else None


def probe_token_ids(caller: Caller, model: str, prompt_ids: list[int]) -> tuple[bool, bool]:
    """Whether a plain server takes a prompt as token ids (the OpenAI completions API allows it;
    vLLM, SGLang and llama.cpp do) and returns the reply's ids (vLLM's ``return_token_ids``): one
    request. A refusal (HTTP 400/422) means text only; a server that echoes other prompt ids than
    e1 sent (it added a BOS: the reply gate's :class:`PromptChanged`) is treated as text only too.
    Every later reply passes the same gate, so a server that changes its prompts after the probe
    gets its rows refused, never stored as token for token."""
    import openai

    body = {"model": model, "prompt": list(prompt_ids), "max_tokens": 1, "temperature": 0, "return_token_ids": True}
    try:
        choice = caller.call("completions", body).choice
    except PromptChanged:
        return False, False
    except RequestError as err:
        if isinstance(err.__cause__, (openai.BadRequestError, openai.UnprocessableEntityError)):
            return False, False
        raise ModelError(
            f"the server at {caller.client.base_url} does not answer: {err.reason}",
            hint="check --api-url, --model (the served name) and --api-key-env",
        ) from err
    return True, choice.token_ids is not None


def probe_budgets(caller: Caller, model: str, chat: bool) -> str:
    """One small request carrying e1's budget fields: a reply with ``budget`` means the server takes them."""
    import openai

    body = {"model": model, "max_tokens": 8, "temperature": 0, THINK_FIELD: 0, SOLVE_FIELD: 1, MODE_FIELD: "elastic"}
    body.update({"messages": [{"role": "user", "content": "Hi"}]} if chat else {"prompt": "Hi"})
    try:
        reply = caller.call("chat/completions" if chat else "completions", body)
    except RequestError as err:
        if isinstance(err.__cause__, openai.BadRequestError):
            return PLAIN_SERVER  # a server that refuses fields it does not know
        raise ModelError(
            f"the server at {caller.client.base_url} does not answer: {err.reason}",
            hint="check --api-url, --model (the served name) and --api-key-env",
        ) from err
    return BUDGET_SERVER if reply.choice.budget is not None else PLAIN_SERVER


def exactness(chat: bool, ids_in: bool, ids_out: bool) -> tuple[bool, str]:
    """Whether a run's records are token for token the local engines' (the same prompt ids, the
    replies' own ids replayed through the row's state), and why: config.json and the summary line."""
    if chat:
        return False, "chat messages: the server applies the template and counts the tokens"
    if ids_in and ids_out:
        return True, "prompts sent as token ids, the replies' token ids replayed"
    split = (
        "thinking is split from the solution at the end marker's text (a marker the model spells out ends it too) "
        "and re-tokenised, counts come from usage"
    )
    if ids_in:
        return False, f"prompts sent as token ids, but the replies carry none: {split}"
    return False, (
        "the server takes no token-id prompt: it tokenises the prompt text itself (a tokenizer that "
        f"adds a BOS gets a second one); {split}"
    )


def warn_inexact(url: str, chat: bool, ids_in: bool, ids_out: bool) -> None:
    """The one warning line of a run whose records are not token for token (:func:`exactness`), as the
    engine loads (every command and library caller), beside ``config.json``'s ``api_method.token_exact``."""
    import logging

    exact, why = exactness(chat, ids_in, ids_out)
    if not exact:
        logging.getLogger("e1").warning(
            "e1: the run at %s is NOT token-exact (recorded in config.json: api_method.token_exact): %s",
            redact(url),
            why,
        )
