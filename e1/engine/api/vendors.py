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
| OpenAI Chat Completions (in :mod:`e1.engine.api.openai_engine`) | ``reasoning_effort`` (none, minimal, low, medium, high, xhigh), ``max_completion_tokens``, ``seed`` | ``usage.completion_tokens``, ``usage.completion_tokens_details.reasoning_tokens`` | platform.openai.com/docs/api-reference/chat/create; openai SDK ``ReasoningEffort``, ``CompletionUsage`` |

Claude's Messages API (anthropic >= 2) takes no sampling settings and no seed: Claude samples as
the vendor sets it, which config.json records (``sampling``), rather than e1 sending fields the API
no longer documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from e1.budget import Budget
from e1.engine.api.client import ChatMessages
from e1.engine.api.replies import Count, RequestError, Shape, accept, bounded_client, transport_reason
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.markers import DEFAULT_END, DEFAULT_START
from e1.errors import ConfigError, did_you_mean

OPENAI_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
GEMINI_LEVELS = ("minimal", "low", "medium", "high")  # thinkingLevel; "dynamic" is thinkingBudget -1
ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh", "max")
VENDOR_BUDGET, VENDOR_EFFORT = (
    "the vendor's thinking budget (t), cap t + s",
    "the vendor's effort level, cap --max-tokens",
)


def check_effort(backend: str, effort: str, efforts: tuple[str, ...]) -> None:
    """An effort level the vendor documents, or one clear line with the closest one."""
    if effort and effort not in efforts:
        raise ConfigError(
            f"--backend {backend} has no effort level {effort!r}",
            hint=did_you_mean(effort, efforts, f"{backend} takes"),
        )


def _split_messages(text: str) -> tuple[str, list[dict]]:
    """(the system prompt, the other messages) of an engine prompt (:class:`ChatMessages`)."""
    messages = ChatMessages.request(text)["messages"]
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    return system, [m for m in messages if m.get("role") != "system"]


def _count(value: int | None, what: str) -> int:
    if value is None:
        raise RequestError(f"the reply has no {what}, so its tokens cannot be counted")
    return value


def _unsplit(thoughts: str, answer: str) -> str | None:
    """A vendor's split that holds e1's thinking markers: scored, its answer could sit inside thinking."""
    for marker in (DEFAULT_START, DEFAULT_END):
        if marker in thoughts or marker in answer:
            return f"the reply's texts hold the thinking marker {marker!r}"
    return None


# ---- the replies' shapes, as the SDKs dump them (the gate: e1.engine.api.replies.accept) ---------


class GeminiPart(Shape):
    text: str | None = None
    thought: bool | None = None


class GeminiContent(Shape):
    parts: list[GeminiPart] = []


class GeminiCandidate(Shape):
    content: GeminiContent = GeminiContent()
    finish_reason: str | None = None


class GeminiUsage(Shape):
    prompt_token_count: Count | None = None
    candidates_token_count: Count | None = None
    thoughts_token_count: Count | None = None  # documented: left out when the model did not think


class GeminiReply(Shape):
    candidates: list[GeminiCandidate] = Field(min_length=1)
    usage_metadata: GeminiUsage = GeminiUsage()

    def split(self) -> tuple[str, str]:
        parts = self.candidates[0].content.parts
        return (
            "".join(p.text or "" for p in parts if p.thought),
            "".join(p.text or "" for p in parts if not p.thought),
        )

    def texts(self) -> str:
        return "".join(self.split())


class AnthropicBlock(Shape):
    type: str
    text: str | None = None
    thinking: str | None = None


class AnthropicDetails(Shape):
    thinking_tokens: Count | None = None


class AnthropicUsage(Shape):
    input_tokens: Count = 0
    output_tokens: Count | None = None
    output_tokens_details: AnthropicDetails | None = None


class AnthropicReply(Shape):
    content: list[AnthropicBlock]
    usage: AnthropicUsage
    stop_reason: str | None = None

    def split(self) -> tuple[str, str]:
        return (
            "".join(b.thinking or "" for b in self.content if b.type == "thinking"),
            "".join(b.text or "" for b in self.content if b.type == "text"),
        )

    def texts(self) -> str:
        return "".join(self.split())


def _sdk(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            f"this backend needs the {module} package, which is not installed", hint=f"pip install 'e1[{extra}]'"
        ) from err


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
        if mode.prefills:
            raise ConfigError(
                f"mode {mode} cannot run on --backend {self.backend}: the vendor writes its own thinking, and no "
                "request can close it with a text of e1's",
                hint="use --backend openai --tokenizer against a served model, or a local backend",
            )
        axes = "elastic (its thinking budget) or none[:effort=LEVEL]" if self.takes_budget else "none[:effort=LEVEL]"
        raise ConfigError(
            f"mode {mode} cannot run on --backend {self.backend}: the vendor decodes, so e1 forces nothing",
            hint=f"use {axes}; efforts: {', '.join(self.efforts)}",
        )


class Gemini(Vendor):
    """Gemini ``generateContent`` through ``google-genai``."""

    def client(self, settings, key: str):
        genai = _sdk("google.genai", self.extra)
        from google.genai import types

        retry = types.HttpRetryOptions(
            attempts=settings.max_retries + 1,
            initial_delay=0.5,
            max_delay=8,
            http_status_codes=[408, 409, 429, 500, 502, 503, 504],
        )
        options = types.HttpOptions(
            base_url=settings.url,
            api_version="v1beta",
            timeout=int(settings.request_timeout_s * 1000),
            retry_options=retry,
            httpx_client=bounded_client(settings.request_timeout_s),
        )
        return genai.Client(api_key=key, vertexai=False, http_options=options)

    def request(self, model: str, text: str, budget: Budget, mode: Mode, sampling: Sampling, seed: int) -> dict:
        system, messages = _split_messages(text)
        contents = [
            {
                "role": "model" if m.get("role") == "assistant" else "user",
                "parts": [{"text": str(m.get("content") or "")}],
            }
            for m in messages
        ]
        thinking: dict = {"include_thoughts": True}
        if mode.bounded:  # elastic (Vendor.method): the vendor's thinking budget
            thinking["thinking_budget"] = budget.think  # 0: thinking off
        elif mode.effort == "dynamic":
            thinking["thinking_budget"] = -1
        elif mode.effort:
            thinking["thinking_level"] = mode.effort.upper()
        config = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": seed,
            "max_output_tokens": budget.total if mode.bounded else sampling.max_tokens,
            "thinking_config": thinking,
        }
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

    def accept(self, raw: dict, request: dict) -> GeminiReply:
        """The gate: the reply's shape, and its counts against the request's cap."""
        from e1.engine.api.replies import Limits

        reply = accept(GeminiReply, raw, Limits(), counted=self._counted(raw))
        thoughts, answer = reply.split()
        usage, cap = reply.usage_metadata, request["config"]["max_output_tokens"]
        problem = _unsplit(thoughts, answer)
        if usage.candidates_token_count is not None and usage.candidates_token_count > cap:
            problem = f"usageMetadata.candidatesTokenCount {usage.candidates_token_count} exceeds maxOutputTokens {cap}"
        if problem:
            raise RequestError(f"the reply is inconsistent: {problem}")
        return reply

    @staticmethod
    def _counted(raw) -> int | None:
        usage = raw.get("usage_metadata") if isinstance(raw, dict) else None
        counts = (
            [usage.get(k) for k in ("candidates_token_count", "thoughts_token_count")]
            if isinstance(usage, dict)
            else []
        )
        counts = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**31]
        return sum(counts) if counts else None

    def completion(self, reply: GeminiReply, row: tuple[int, int]) -> Completion:
        thoughts, answer = reply.split()
        usage = reply.usage_metadata
        thinking = usage.thoughts_token_count
        if thinking is None and not thoughts:
            thinking = 0  # documented: left out when the model did not think
        solve = usage.candidates_token_count if usage.candidates_token_count is not None or answer else 0
        return Completion(
            prompt_index=row[0],
            sample_index=row[1],
            think_text=thoughts,
            solution_text=answer,
            prompt_tokens=usage.prompt_token_count or 0,
            think_tokens=_count(thinking, "usageMetadata.thoughtsTokenCount"),
            solve_tokens=_count(solve, "usageMetadata.candidatesTokenCount"),
            forced=False,
            finish_reason="stop" if reply.candidates[0].finish_reason == "STOP" else "length",
            token_ids=[],
            forced_mask=[],
            closed=bool(answer),
        )


class Anthropic(Vendor):
    """Claude's Messages API through ``anthropic``."""

    def client(self, settings, key: str):
        anthropic = _sdk("anthropic", self.extra)
        return anthropic.Anthropic(
            api_key=key,
            base_url=settings.url,
            timeout=settings.request_timeout_s,
            http_client=bounded_client(settings.request_timeout_s, like=anthropic.DefaultHttpxClient),
            max_retries=settings.max_retries,
        )

    def request(self, model: str, text: str, budget: Budget, mode: Mode, sampling: Sampling, seed: int) -> dict:
        system, messages = _split_messages(text)
        body: dict = {"model": model, "messages": messages}
        if mode.bounded:  # elastic (Vendor.method): the vendor's thinking budget
            if 0 < budget.think < 1024:
                raise ConfigError(
                    f"--backend anthropic: a thinking budget is 0 (off) or >= 1024 tokens, got {budget.think}",
                    hint="use --think 0,1k,2k,...",
                )
            body["max_tokens"] = budget.total
            body["thinking"] = (
                {"type": "enabled", "budget_tokens": budget.think} if budget.think else {"type": "disabled"}
            )
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

    def accept(self, raw: dict, request: dict) -> AnthropicReply:
        """The gate: the reply's shape, and its counts against each other and the request's ``max_tokens``."""
        from e1.engine.api.replies import Limits

        usage = raw.get("usage") if isinstance(raw, dict) else None
        counted = usage.get("output_tokens") if isinstance(usage, dict) else None
        counted = (
            counted if isinstance(counted, int) and not isinstance(counted, bool) and 0 <= counted < 2**31 else None
        )
        reply = accept(AnthropicReply, raw, Limits(), counted=counted)
        output = _count(reply.usage.output_tokens, "usage.output_tokens")
        thinking = reply.usage.output_tokens_details.thinking_tokens if reply.usage.output_tokens_details else None
        problem = _unsplit(*reply.split())
        if thinking is not None and thinking > output:
            problem = f"it counts {thinking} thinking tokens of {output} output tokens"
        if output > request["max_tokens"]:
            problem = f"usage.output_tokens {output} exceeds max_tokens {request['max_tokens']}"
        if problem:
            raise RequestError(f"the reply is inconsistent: {problem}")
        return reply

    def completion(self, reply: AnthropicReply, row: tuple[int, int]) -> Completion:
        thoughts, answer = reply.split()
        thought = any(b.type in ("thinking", "redacted_thinking") for b in reply.content)
        output = _count(reply.usage.output_tokens, "usage.output_tokens")
        details = reply.usage.output_tokens_details
        thinking = details.thinking_tokens if details else None
        thinking = _count(
            0 if thinking is None and not thought else thinking, "usage.output_tokens_details.thinking_tokens"
        )
        return Completion(
            prompt_index=row[0],
            sample_index=row[1],
            think_text=thoughts,
            solution_text=answer,
            prompt_tokens=reply.usage.input_tokens,
            think_tokens=thinking,
            solve_tokens=output - thinking,
            forced=False,
            finish_reason="stop" if reply.stop_reason == "end_turn" else "length",
            token_ids=[],
            forced_mask=[],
            closed=bool(answer),
        )


def _transport_errors() -> tuple[type, ...]:
    """httpx's connection and timeout errors: google-genai sends through httpx or httpx2."""
    import importlib.util

    return tuple(
        importlib.import_module(name).TransportError for name in ("httpx", "httpx2") if importlib.util.find_spec(name)
    )


def _unread(err: Exception) -> RequestError:
    """A reply never read (after the SDK's retries), or not JSON (json's errors are ValueErrors)."""
    if isinstance(err, ValueError):
        return RequestError(f"the reply is not JSON ({err.__class__.__name__}: {str(err)[:200]})")
    cut = transport_reason(err)
    if cut:
        return RequestError(cut)
    return RequestError(f"cannot reach the server ({err.__class__.__name__}: {str(err)[:200]})")


def _error_text(body, err) -> str:
    inner = body.get("error", body) if isinstance(body, dict) else None
    text = inner.get("message") if isinstance(inner, dict) else None
    return str(text or err).splitlines()[0][:300]


VENDORS = {
    "gemini": Gemini(
        "gemini",
        "gemini",
        "GEMINI_API_KEY",
        (*GEMINI_LEVELS, "dynamic"),
        takes_budget=True,
        sampling="temperature, top_p, top_k, seed",
    ),
    "anthropic": Anthropic(
        "anthropic",
        "anthropic",
        "ANTHROPIC_API_KEY",
        ANTHROPIC_EFFORTS,
        takes_budget=True,
        sampling="none: the vendor's defaults",
    ),
}
EFFORTS = {"openai": OPENAI_EFFORTS, **{name: vendor.efforts for name, vendor in VENDORS.items()}}
