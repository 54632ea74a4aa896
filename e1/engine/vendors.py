"""Hosted reasoning APIs: e1's request mapped onto each vendor's budget axis, and the reply back.

    vendor = VENDORS["gemini"]
    request = vendor.request("gemini-2.5-flash", prompt, Budget(1024, 512), Mode.parse("elastic"), sampling, seed=7)
    completion = vendor.completion(vendor.send(vendor.client(settings), request), row=(0, 0))

Budgets are not tokens everywhere. Two methods (:func:`method`): ``elastic`` on a vendor that
takes a thinking budget in tokens sends t as that budget and t + s as the reply's cap (the vendor,
not e1, decides where thinking stops); ``none`` sends no budget, an effort level if the mode has
one (``none:effort=high``), and ``--max-tokens`` as the cap. Thinking tokens are always the
vendor's own count from the reply, never guessed: a reply that shows thinking without its count
is refused.

Fields relied on, and where they are documented (the official SDKs' types mirror them):

| vendor | request | reply | documentation |
|---|---|---|---|
| Gemini ``generateContent`` | ``contents[].role/parts[].text``, ``systemInstruction``, ``generationConfig``: ``temperature``, ``topP``, ``topK``, ``seed``, ``maxOutputTokens``, ``thinkingConfig``: ``thinkingBudget`` (0 = off, -1 = dynamic) or ``thinkingLevel`` (MINIMAL/LOW/MEDIUM/HIGH; not both), ``includeThoughts`` | ``candidates[0].content.parts[]`` (``thought: true`` marks a thought summary), ``candidates[0].finishReason`` (STOP, MAX_TOKENS), ``usageMetadata``: ``promptTokenCount``, ``candidatesTokenCount``, ``thoughtsTokenCount`` (left out when there were no thoughts) | ai.google.dev/gemini-api/docs/thinking; ai.google.dev/api/generate-content; google-genai ``types.ThinkingConfig``, ``ThinkingLevel``, ``GenerateContentResponseUsageMetadata`` |
| Anthropic Messages ``POST /v1/messages`` | ``model``, ``max_tokens``, ``messages``, ``system``, ``thinking``: ``{type: enabled, budget_tokens}`` (>= 1024, < ``max_tokens``), ``{type: disabled}`` or ``{type: adaptive}``; ``output_config.effort`` (low, medium, high, xhigh, max) | ``content[]`` blocks ``thinking`` (``thinking``), ``redacted_thinking``, ``text`` (``text``); ``stop_reason`` (end_turn, max_tokens); ``usage``: ``input_tokens``, ``output_tokens`` (thinking included), ``output_tokens_details.thinking_tokens`` | platform.claude.com/docs/en/build-with-claude/extended-thinking and /effort; anthropic SDK ``ThinkingConfigEnabledParam``, ``OutputConfigParam``, ``Usage``, ``OutputTokensDetails`` |
| OpenAI Chat Completions (in :mod:`e1.engine.api`) | ``reasoning_effort`` (none, minimal, low, medium, high, xhigh), ``max_completion_tokens``, ``seed`` | ``usage.completion_tokens``, ``usage.completion_tokens_details.reasoning_tokens`` | platform.openai.com/docs/api-reference/chat/create; openai SDK ``ReasoningEffort``, ``CompletionUsage`` |

Claude's Messages API (anthropic >= 2) takes no sampling settings and no seed: Claude samples as
the vendor sets it, which config.json records (``sampling``), rather than e1 sending fields the API
no longer documents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from e1.budget import Budget
from e1.engine.api_client import ChatMessages, RequestError
from e1.engine.base import Completion, Mode, Sampling
from e1.errors import ConfigError, did_you_mean

OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
GEMINI_LEVELS = ("minimal", "low", "medium", "high")  # thinkingLevel; "dynamic" is thinkingBudget -1
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")
VENDOR_BUDGET, VENDOR_EFFORT = "the vendor's thinking budget (t), cap t + s", "the vendor's effort level, cap --max-tokens"


def check_effort(backend: str, effort: str, efforts: tuple[str, ...]) -> None:
    """An effort level the vendor documents, or one clear line with the closest one."""
    if effort and effort not in efforts:
        raise ConfigError(f"--backend {backend} has no effort level {effort!r}",
                          hint=did_you_mean(effort, efforts, f"{backend} takes"))


def _split_messages(text: str) -> tuple[str, list[dict]]:
    """(the system prompt, the other messages) of an engine prompt (:class:`ChatMessages`)."""
    messages = ChatMessages.request(text)["messages"]
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    return system, [m for m in messages if m.get("role") != "system"]


def _count(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RequestError(f"the reply has no {what} (got {value!r}), so its tokens cannot be counted")
    return value


def _sdk(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"this backend needs the {module} package, which is not installed",
                          hint=f"pip install 'e1[{extra}]'") from err


@dataclass(frozen=True)
class Vendor:
    """One hosted API: its SDK (an optional extra), its key's default variable, its budget axes."""

    backend: str
    extra: str
    key_env: str
    efforts: tuple[str, ...]
    takes_budget: bool  # a thinking budget in tokens (elastic)
    sampling: str  # what the request takes of e1's sampling settings (config.json records it)

    def method(self, mode: Mode) -> str:
        """How ``mode`` runs here (see the module's docstring); refuses what the vendor cannot do."""
        if not mode.bounded:
            check_effort(self.backend, mode.effort, self.efforts)
            return VENDOR_EFFORT
        if mode.vendor_budget and self.takes_budget:
            return VENDOR_BUDGET
        axes = "elastic (its thinking budget) or none[:effort=LEVEL]" if self.takes_budget else "none[:effort=LEVEL]"
        raise ConfigError(f"mode {mode} cannot run on --backend {self.backend}: the vendor decodes, so e1 forces nothing",
                          hint=f"use {axes}; efforts: {', '.join(self.efforts)}")


class Gemini(Vendor):
    """Gemini ``generateContent`` through ``google-genai``."""

    def client(self, settings, key: str):
        genai = _sdk("google.genai", self.extra)
        from google.genai import types

        retry = types.HttpRetryOptions(attempts=settings.max_retries + 1, initial_delay=0.5, max_delay=8,
                                       http_status_codes=[408, 409, 429, 500, 502, 503, 504])
        options = types.HttpOptions(base_url=settings.url, api_version="v1beta", timeout=int(settings.request_timeout_s * 1000),
                                    retry_options=retry)
        return genai.Client(api_key=key, vertexai=False, http_options=options)

    def request(self, model: str, text: str, budget: Budget, mode: Mode, sampling: Sampling, seed: int) -> dict:
        system, messages = _split_messages(text)
        contents = [{"role": "model" if m.get("role") == "assistant" else "user",
                     "parts": [{"text": str(m.get("content") or "")}]} for m in messages]
        thinking: dict = {"include_thoughts": True}
        if mode.bounded:  # elastic (Vendor.method): the vendor's thinking budget
            thinking["thinking_budget"] = budget.think  # 0: thinking off
        elif mode.effort == "dynamic":
            thinking["thinking_budget"] = -1
        elif mode.effort:
            thinking["thinking_level"] = mode.effort.upper()
        config = {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": seed,
                  "max_output_tokens": budget.total if mode.bounded else sampling.max_tokens,
                  "thinking_config": thinking}
        if sampling.top_k:
            config["top_k"] = sampling.top_k
        if system:
            config["system_instruction"] = system
        return {"model": model, "contents": contents, "config": config}

    def send(self, client, request: dict) -> dict:
        from google.genai import errors, types

        config = types.GenerateContentConfig.model_validate(request["config"])  # typed: sent as the REST names
        try:
            reply = client.models.generate_content(model=request["model"], contents=request["contents"], config=config)
        except errors.APIError as err:
            raise RequestError(f"HTTP {err.code} from the server: {str(err.message or err.status)[:300]}") from err
        except (*_transport_errors(), ValueError) as err:  # unreachable, timed out; a body that is not JSON
            raise _unread(err) from err
        return reply.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})

    def completion(self, reply: dict, row: tuple[int, int]) -> Completion:
        candidates = reply.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            raise RequestError(f"the reply has no candidates: {json.dumps(reply)[:200]}")
        parts = (candidates[0].get("content") or {}).get("parts") or []
        thoughts = "".join(str(p.get("text") or "") for p in parts if p.get("thought"))
        answer = "".join(str(p.get("text") or "") for p in parts if not p.get("thought"))
        usage = reply.get("usage_metadata") or {}
        thinking = usage.get("thoughts_token_count")
        if thinking is None and not thoughts:
            thinking = 0  # documented: left out when the model did not think
        finish = candidates[0].get("finish_reason")
        return Completion(
            prompt_index=row[0], sample_index=row[1], think_text=thoughts, solution_text=answer,
            prompt_tokens=_count(usage.get("prompt_token_count", 0), "usageMetadata.promptTokenCount"),
            think_tokens=_count(thinking, "usageMetadata.thoughtsTokenCount"),
            solve_tokens=_count(usage.get("candidates_token_count", 0 if not answer else None),
                                "usageMetadata.candidatesTokenCount"),
            forced=False, finish_reason="stop" if finish == "STOP" else "length", token_ids=[], forced_mask=[],
            closed=bool(answer))


class Anthropic(Vendor):
    """Claude's Messages API through ``anthropic``."""

    def client(self, settings, key: str):
        anthropic = _sdk("anthropic", self.extra)
        return anthropic.Anthropic(api_key=key, base_url=settings.url, timeout=settings.request_timeout_s,
                                   max_retries=settings.max_retries)

    def request(self, model: str, text: str, budget: Budget, mode: Mode, sampling: Sampling, seed: int) -> dict:
        system, messages = _split_messages(text)
        body: dict = {"model": model, "messages": messages}
        if mode.bounded:  # elastic (Vendor.method): the vendor's thinking budget
            if 0 < budget.think < 1024:
                raise ConfigError(f"--backend anthropic: a thinking budget is 0 (off) or >= 1024 tokens, got {budget.think}",
                                  hint="use --think 0,1k,2k,...")
            body["max_tokens"] = budget.total
            body["thinking"] = {"type": "enabled", "budget_tokens": budget.think} if budget.think else {"type": "disabled"}
        else:
            body["max_tokens"] = sampling.max_tokens
            if mode.effort:  # the effort sets how much the model thinks (adaptive thinking)
                body["thinking"], body["output_config"] = {"type": "adaptive"}, {"effort": mode.effort}
        if system:
            body["system"] = system
        return body

    def send(self, client, request: dict) -> dict:
        import anthropic

        try:
            reply = client.messages.create(**request)
        except anthropic.APIStatusError as err:
            raise RequestError(f"HTTP {err.status_code} from the server: {_error_text(err.body, err)}") from err
        except (anthropic.APIConnectionError, ValueError) as err:
            raise _unread(err) from err
        return reply.model_dump(mode="json", exclude_none=True)

    def completion(self, reply: dict, row: tuple[int, int]) -> Completion:
        blocks, usage = reply.get("content"), reply.get("usage")
        if not isinstance(blocks, list) or not isinstance(usage, dict):
            raise RequestError(f"the reply is not a message: {json.dumps(reply)[:200]}")
        thoughts = "".join(str(b.get("thinking") or "") for b in blocks if b.get("type") == "thinking")
        answer = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
        thought = any(b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
        output = _count(usage.get("output_tokens"), "usage.output_tokens")
        thinking = (usage.get("output_tokens_details") or {}).get("thinking_tokens", None if thought else 0)
        thinking = _count(thinking, "usage.output_tokens_details.thinking_tokens")
        if thinking > output:
            raise RequestError(f"the reply counts {thinking} thinking tokens of {output} output tokens")
        return Completion(
            prompt_index=row[0], sample_index=row[1], think_text=thoughts, solution_text=answer,
            prompt_tokens=_count(usage.get("input_tokens", 0), "usage.input_tokens"), think_tokens=thinking,
            solve_tokens=output - thinking, forced=False,
            finish_reason="stop" if reply.get("stop_reason") == "end_turn" else "length", token_ids=[],
            forced_mask=[], closed=bool(answer))


def _transport_errors() -> tuple[type, ...]:
    """httpx's connection and timeout errors: google-genai sends through httpx or httpx2."""
    import importlib.util

    return tuple(importlib.import_module(name).TransportError for name in ("httpx", "httpx2")
                 if importlib.util.find_spec(name))


def _unread(err: Exception) -> RequestError:
    """A reply never read (after the SDK's retries), or not JSON (json's errors are ValueErrors)."""
    if isinstance(err, ValueError):
        return RequestError(f"the reply is not JSON ({err.__class__.__name__}: {str(err)[:200]})")
    return RequestError(f"cannot reach the server ({err.__class__.__name__}: {str(err)[:200]})")


def _error_text(body, err) -> str:
    inner = body.get("error", body) if isinstance(body, dict) else None
    text = inner.get("message") if isinstance(inner, dict) else None
    return str(text or err).splitlines()[0][:300]


VENDORS = {
    "gemini": Gemini("gemini", "gemini", "GEMINI_API_KEY", (*GEMINI_LEVELS, "dynamic"), takes_budget=True,
                     sampling="temperature, top_p, top_k, seed"),
    "anthropic": Anthropic("anthropic", "anthropic", "ANTHROPIC_API_KEY", ANTHROPIC_EFFORTS, takes_budget=True,
                           sampling="none: the vendor's defaults"),
}
EFFORTS = {"openai": OPENAI_EFFORTS, **{name: vendor.efforts for name, vendor in VENDORS.items()}}
