"""Loopback stand-ins for the hosted reasoning APIs (the real ones cannot be reached from tests).

Each follows its vendor's published request schema strictly (pydantic models that refuse unknown
or misspelled fields and wrong types, plus the documented constraints: Gemini's thinkingBudget
and thinkingLevel not both, Claude's ``budget_tokens`` >= 1024 and < ``max_tokens``; the Messages
API of anthropic >= 2 has no temperature, top_p or top_k) and answers in its documented reply shape (fields
and sources: the table in ``e1/engine/api/vendors.py``).

The scripted model: a problem "needs N" thinking tokens; it thinks as many tokens as its effort
level says (:data:`EFFORT_TOKENS`), or :data:`NATURAL` tokens within a token budget, then answers
``\\boxed{5}`` (right) if it thought at least N tokens, else ``\\boxed{0}``, in ANSWER tokens;
a cap below thinking + answer cuts the reply. So accuracy grows with the measured thinking.
``fault(vendor, body)`` may return a starlette Response to send instead (429s, broken JSON).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from typing import ClassVar, Literal

import uvicorn
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic.alias_generators import to_camel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.serving import free_port

EFFORT_TOKENS = {
    "none": 0,
    "minimal": 64,
    "low": 256,
    "medium": 640,
    "high": 1500,
    "xhigh": 2500,
    "max": 3000,
    "dynamic": 900,
}
NATURAL, ANSWER = 1200, 8  # thinking tokens when nothing limits it; answer tokens
Number = StrictInt | StrictFloat


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- Gemini generateContent (ai.google.dev/api/generate-content) ------------------------------
# A proto3 JSON API: a field is accepted by its lowerCamelCase name or its proto name (snake_case),
# as protobuf's JSON mapping specifies (google-genai sends nested thinkingConfig fields in snake_case).


class Proto(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Part(Proto):
    text: StrictStr
    thought: StrictBool | None = None


class Content(Proto):
    role: Literal["user", "model"] | None = None
    parts: list[Part]


class ThinkingConfig(Proto):
    include_thoughts: StrictBool | None = None
    thinking_budget: StrictInt | None = Field(None, ge=-1)
    thinking_level: Literal["MINIMAL", "LOW", "MEDIUM", "HIGH"] | None = None

    @model_validator(mode="after")
    def one_of(self):
        if self.thinking_budget is not None and self.thinking_level is not None:
            raise ValueError("thinkingBudget and thinkingLevel cannot both be set")
        return self


class GenerationConfig(Proto):
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    top_k: StrictInt | None = Field(None, ge=1)
    seed: StrictInt | None = Field(None, ge=-(2**31), lt=2**31)
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    thinking_config: ThinkingConfig | None = None


class GenerateContent(Proto):
    contents: list[Content]
    system_instruction: Content | None = None
    generation_config: GenerationConfig | None = None


# ---- Anthropic Messages (platform.claude.com/docs/en/api/messages) ----------------------------


class Message(Strict):
    role: Literal["user", "assistant"]
    content: StrictStr


class Thinking(Strict):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: StrictInt | None = Field(None, ge=1024)


class OutputConfig(Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"]


class Messages(Strict):
    model: StrictStr
    max_tokens: StrictInt = Field(ge=1)
    messages: list[Message]
    system: StrictStr | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None

    @model_validator(mode="after")
    def thinking_rules(self):
        thinking = self.thinking
        enabled = thinking is not None and thinking.type == "enabled"
        if enabled and (thinking.budget_tokens is None or thinking.budget_tokens >= self.max_tokens):
            raise ValueError("thinking.budget_tokens is required and must be less than max_tokens")
        return self


# ---- OpenAI Chat Completions (platform.openai.com/docs/api-reference/chat/create) --------------


class ChatMessage(Strict):
    role: Literal["system", "user", "assistant", "developer"]
    content: StrictStr


class ChatCompletion(Strict):
    model: StrictStr
    messages: list[ChatMessage]
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    seed: StrictInt | None = None
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None


# ---- the scripted model ---------------------------------------------------------------------------


def script(prompt: str, think_limit: int, cap: int) -> tuple[int, int, str, bool]:
    """(thinking tokens, answer tokens, answer, finished) for a prompt, a thinking limit and a cap."""
    need = int(re.search(r"needs (\d+)", prompt).group(1))
    thinking = min(think_limit, cap)
    answer_tokens = min(ANSWER, cap - thinking)
    finished = answer_tokens == ANSWER
    answer = ("\\boxed{5}" if thinking >= need else "\\boxed{0}") if finished else "\\boxed{"[:answer_tokens]
    return thinking, answer_tokens, answer, finished


def _gemini(body: GenerateContent) -> dict:
    config = body.generation_config or GenerationConfig()
    thinking = config.thinking_config or ThinkingConfig()
    if thinking.thinking_level is not None:
        limit = EFFORT_TOKENS[thinking.thinking_level.lower()]
    else:
        budget = thinking.thinking_budget
        limit = NATURAL if budget is None else EFFORT_TOKENS["dynamic"] if budget == -1 else min(budget, NATURAL)
    prompt = body.contents[-1].parts[-1].text
    think, answer_tokens, answer, finished = script(prompt, limit, config.max_output_tokens or 65536)
    parts = [{"text": "thought " * 3, "thought": True}] if think and thinking.include_thoughts else []
    usage = {
        "promptTokenCount": 12,
        "candidatesTokenCount": answer_tokens,
        "totalTokenCount": 12 + think + answer_tokens,
    }
    if think:
        usage["thoughtsTokenCount"] = think  # documented: absent when the model did not think
    parts += [{"text": answer}] if answer else []
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": "STOP" if finished else "MAX_TOKENS",
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        "modelVersion": "stand-in",
    }


def _anthropic(body: Messages) -> dict:
    thinking = body.thinking
    if thinking is None or thinking.type == "disabled":
        limit = 0
    elif thinking.type == "enabled":
        limit = min(thinking.budget_tokens, NATURAL)
    else:
        limit = EFFORT_TOKENS[body.output_config.effort if body.output_config else "high"]
    think, answer_tokens, answer, finished = script(body.messages[-1].content, limit, body.max_tokens)
    blocks = [{"type": "thinking", "thinking": "thought " * 3, "signature": "c2ln"}] if think else []
    return {
        "id": "msg_stand_in",
        "type": "message",
        "role": "assistant",
        "model": body.model,
        "content": [*blocks, *([{"type": "text", "text": answer}] if answer else [])],
        "stop_reason": "end_turn" if finished else "max_tokens",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "output_tokens": think + answer_tokens,
            "output_tokens_details": {"thinking_tokens": think},
        },
    }


def _openai(body: ChatCompletion) -> dict:
    limit = EFFORT_TOKENS[body.reasoning_effort or "medium"]
    think, answer_tokens, answer, finished = script(
        body.messages[-1].content, limit, body.max_completion_tokens or body.max_tokens or 65536
    )
    message = {"role": "assistant", "content": answer}
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 0,
        "model": body.model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop" if finished else "length"}],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": think + answer_tokens,
            "total_tokens": 12 + think + answer_tokens,
            "completion_tokens_details": {"reasoning_tokens": think},
        },
    }


class StandIn:
    """One vendor's stand-in on a loopback port, in a thread. ``requests``: every valid body;
    ``answered``: replies sent, by request; ``keys``: the key headers seen."""

    KEY_HEADERS: ClassVar[dict[str, str]] = {
        "gemini": "x-goog-api-key",
        "anthropic": "authorization",
        "openai": "authorization",
    }  # anthropic>=2: Bearer

    def __init__(self, vendor: str, port: int | None = None):
        self.vendor, self.port = vendor, port or free_port()
        self.requests: list[dict] = []
        self.answered: Counter = Counter()
        self.keys: set = set()
        self.fault = lambda vendor, body: None
        self._server = self._thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/v1" if self.vendor == "openai" else "")

    def app(self) -> Starlette:
        schema, answer = {
            "gemini": (GenerateContent, _gemini),
            "anthropic": (Messages, _anthropic),
            "openai": (ChatCompletion, _openai),
        }[self.vendor]

        async def post(request: Request):
            self.keys.add(request.headers.get(self.KEY_HEADERS[self.vendor]))
            raw = await request.json()
            try:
                body = schema.model_validate(raw)
            except ValueError as err:
                return JSONResponse(
                    {"error": {"code": 400, "message": str(err).splitlines()[0], "type": "invalid_request_error"}},
                    status_code=400,
                )
            self.requests.append(raw)
            fault = self.fault(self.vendor, raw)
            if fault is not None:
                return fault
            import json

            self.answered[json.dumps(raw, sort_keys=True)] += 1
            return JSONResponse(answer(body))

        async def models(request: Request):
            return JSONResponse({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

        return Starlette(
            routes=[
                Route("/v1beta/models/{model}:generateContent", post, methods=["POST"]),
                Route("/v1/messages", post, methods=["POST"]),
                Route("/v1/chat/completions", post, methods=["POST"]),
                Route("/v1/models", models),
            ]
        )

    def start(self) -> StandIn:
        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=20)
