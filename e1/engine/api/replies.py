"""The one gate for a remote server's reply: read within a deadline and a size cap, parsed into one
typed shape, and checked against the request that asked for it.

    client = openai.OpenAI(base_url=url, http_client=bounded_client(600.0))   # each reply: <= 600 s, <= 8 MiB
    reply = accept(Reply, raw_bytes, limits_of(body), markers=("<think>", "</think>"))   # a Reply, or RequestError

What a reply may be, whatever the server sends:

- **time**: the whole reply within the request's deadline (``--request-timeout``), however slowly
  its bytes arrive (a per-read timeout alone lets a server dripping one byte a second run forever);
- **size**: at most :data:`MAX_REPLY_BYTES`, refused from its ``content-length`` or as the bytes
  pass the cap (an endless body is cut there, never held);
- **types**: every field e1 reads has its type, strictly: a count is an ``int`` in [0, 2**31), never
  a bool, float or string (``"false"`` is no boolean, ``1e30`` no count), a text is a ``str``;
- **counts**: each agrees with the request and with the others: completion tokens within
  ``max_tokens``; reasoning tokens within completion tokens; a budget report's thinking within
  the mode's limit (t, soft's ceiling, the grace window) and its solution within s, both within
  the completion; a text at most :data:`MAX_CHARS_PER_TOKEN` characters per token it counts;
- **prompt ids**: a reply that shows the prompt as the server took it (vLLM's ``prompt_token_ids``)
  shows exactly the ids e1 sent: a server that changed them (a BOS of its own in front) decoded
  another prompt, so its reply is refused (:class:`PromptChanged`), never stored as token for token;
- **texts**: a text never runs past the stop string it was asked to stop at, and a chat reply's
  split holds no thinking marker (an answer inside unclosed thinking would otherwise be scored).

Anything else is a :class:`RequestError` for that request, so it is never journalled and never
stored: a resumed run sends it again. Nothing past the gate re-checks a reply.
"""

from __future__ import annotations

import functools
import importlib
import reprlib
import time
import zlib
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from e1.data import lone_surrogate
from e1.engine.api.net_bounds import (
    DEADLINE,
    bound_sockets,
    env_proxies,
    proxy_error,
    proxy_transport,
    unpacked,
    unpacking,
)
from e1.engine.row_state import THINK_ENDS
from e1.errors import ModelError

MAX_REPLY_BYTES = 8 * 1024 * 1024  # a 128k-token completion with its token ids is ~2 MiB
MAX_CHARS_PER_TOKEN = 256  # longer than any vocabulary entry; a longer text does not fit its count
MAX_COUNT = 2**31 - 1
THINK_FIELD, SOLVE_FIELD, MODE_FIELD = "thinking_budget", "solution_budget", "budget_mode"  # e1 serve's fields
_HINT = "finished samples are kept; rerun the same command to resume"


class RequestError(ModelError):
    """A request that failed for good (retries spent) or got a reply e1 cannot read, for one sample.
    ``where`` names the sample; :meth:`about` lets the caller name its problem too."""

    def __init__(self, reason: str, prompt_index: int = -1, sample_index: int = -1, hint: str | None = None):
        self.prompt_index, self.sample_index = prompt_index, sample_index
        where = f"prompt {prompt_index}, sample {sample_index}" if prompt_index >= 0 else "a request"
        super().__init__(f"the request for {where} failed: {reason}", hint=hint or _HINT)
        self.reason = self.message.partition(" failed: ")[2]  # redacted with the message (e1.errors)

    def for_sample(self, prompt_index: int, sample_index: int) -> RequestError:
        return RequestError(self.reason, prompt_index, sample_index, self.hint)

    def about(self, name: str) -> RequestError:
        """The same error naming the sample as ``name`` (e.g. ``aime problem 7``) and its sample index."""
        error = RequestError(self.reason, self.prompt_index, self.sample_index, self.hint)
        error.message = f"the request for {name}, sample {self.sample_index} failed: {self.reason}"
        return error


# ---- time and size: below the SDKs, so their retries see a cut reply as a failed try -----------


def bounded_client(deadline_s: float, like: type | None = None, max_bytes: int = MAX_REPLY_BYTES, **options):
    """The one bounded HTTP client of every server e1 talks to (the API backends' SDKs, the hub's
    ``--push``; ``deadline_s``: ``--request-timeout`` or the push's deadline): an ``httpx`` client, or
    one of the fork ``like`` (an SDK's client class) is built on, whose every reply arrives whole
    within ``deadline_s`` and ``max_bytes``; ``options``: the client's other arguments (hooks, redirects)."""
    module = importlib.import_module(_package(like) if like is not None else "httpx")
    bounded = _transport_class(module.__name__)
    try:
        proxies = {  # HTTP(S)_PROXY, ALL_PROXY, NO_PROXY as httpx's own client reads them, each proxy as bounded
            pattern: None if proxy is None else bounded(deadline_s, max_bytes, proxy)
            for pattern, proxy in env_proxies(module).items()
        }
        return module.Client(transport=bounded(deadline_s, max_bytes), mounts=proxies, timeout=deadline_s, **options)
    except module.InvalidURL as err:  # (what httpx's own client would raise too)
        raise proxy_error(err) from None


def transport_reason(err: BaseException | None, deadline_s: float | None = None) -> str | None:
    """What a cut reply was, from an SDK's error and its causes (None: not a cut reply)."""
    while err is not None:
        names = {cls.__name__ for cls in type(err).__mro__ if _package(cls).startswith("httpx")}
        if names & {"ReplyTooLarge", "DecodingError"}:
            return str(err)
        if "TimeoutException" in names:
            within = f"{deadline_s:g} s" if deadline_s else "the deadline"
            return f"no complete reply within {within} (--request-timeout bounds each request, all its bytes)"
        err = err.__cause__ or err.__context__
    return None


def _package(cls: type) -> str:
    return next((c.__module__.partition(".")[0] for c in cls.__mro__ if c.__module__.startswith("httpx")), "")


@functools.cache
def _transport_class(name: str) -> type:
    """A transport of the ``httpx`` fork ``name`` (SDKs ship their own) whose every reply arrives
    whole within the deadline and :data:`MAX_REPLY_BYTES`. A per-read timeout alone lets a server
    dripping a byte at a time run forever: the body is cut at the deadline as it passes."""
    httpx = importlib.import_module(name)

    class ReplyTooLarge(httpx.TransportError):
        pass

    def too_large(request, cap: int, size: str = "") -> Exception:
        return ReplyTooLarge(f"the reply is larger than {cap / 2**20:g} MiB{size}", request=request)

    class Bounded(httpx.SyncByteStream):
        def __init__(self, inner, request, deadline: float, cap: int, unpack=None):
            self.inner, self.request, self.deadline, self.cap = inner, request, deadline, cap
            self.unpack = unpack  # a compressed body is counted as it unpacks: a gzip bomb stops at the cap

        def __iter__(self):
            return _pieces(httpx, self, too_large)

        def close(self) -> None:
            self.inner.close()

    class BoundedTransport(httpx.BaseTransport):
        def __init__(self, deadline_s: float, cap: int, proxy: str | None = None):
            self.inner, self.deadline_s, self.cap = proxy_transport(httpx, proxy), deadline_s, cap
            bound_sockets(self.inner)  # every socket wait of its connections (a proxy's too) ends by the deadline

        def handle_request(self, request):
            deadline = DEADLINE.at = time.monotonic() + self.deadline_s  # (its headers' bytes too, however slow)
            _read_within(request, deadline)
            request.headers["accept-encoding"] = "gzip, deflate"  # the encodings unpacked here, within the cap
            response = self.inner.handle_request(request)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > self.cap:
                response.close()
                raise too_large(request, self.cap, f" ({int(length) >> 20} MiB)")
            headers, unpack = unpacking(httpx, request, response)
            _read_within(request, deadline)  # the body's reads: httpcore reads the timeout as the body starts
            return httpx.Response(
                response.status_code,
                headers=headers,
                extensions=response.extensions,
                stream=Bounded(response.stream, request, deadline, self.cap, unpack),
            )

        def close(self) -> None:
            self.inner.close()

    return BoundedTransport


def _pieces(httpx, stream, too_large):
    """``stream``'s body as it arrives, cut at its deadline and its cap (a compressed body counted as it
    unpacks: a gzip bomb stops at the cap)."""
    read = 0
    DEADLINE.at = stream.deadline  # (read on the caller's thread, as the SDK reads the body)
    for chunk in stream.inner:
        if time.monotonic() > stream.deadline:
            raise httpx.ReadTimeout("the reply was not complete within its deadline", request=stream.request)
        try:
            pieces = list(unpacked(stream.unpack, chunk, stream.cap - read)) if stream.unpack else [chunk]
        except zlib.error as err:
            raise httpx.DecodingError(
                f"the reply's compressed body is broken ({err})", request=stream.request
            ) from None
        for piece in pieces:
            read += len(piece)
            if read > stream.cap:
                raise too_large(stream.request, stream.cap)
            yield piece


def _read_within(request, deadline: float) -> None:
    """Every wait of the request (connect, write, pool, read) ends by ``deadline``."""
    left = max(0.001, deadline - time.monotonic())
    timeouts = dict(request.extensions.get("timeout") or {})
    request.extensions["timeout"] = {
        key: left if key == "read" or timeouts.get(key) is None else min(timeouts[key], left)
        for key in ("connect", "read", "write", "pool")
    }


# ---- types ---------------------------------------------------------------------------------------

Count = Annotated[int, Field(strict=True, ge=0, le=MAX_COUNT)]


class Shape(BaseModel):
    """A reply's shape: strict types, frozen, fields e1 does not read ignored (and not journalled)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    def texts(self) -> str:
        """The texts whose length must fit the counted tokens."""
        return ""


class Details(Shape):
    reasoning_tokens: Count | None = None


class Usage(Shape):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    completion_tokens_details: Details | None = None

    @property
    def reasoning_tokens(self) -> int | None:
        return self.completion_tokens_details.reasoning_tokens if self.completion_tokens_details else None

    def completion(self) -> int:
        if self.completion_tokens is None:
            raise RequestError("the reply has no usage.completion_tokens, so its tokens cannot be counted")
        return self.completion_tokens


class Message(Shape):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @property
    def thinking(self) -> str:
        return self.reasoning or self.reasoning_content or ""


class BudgetReport(Shape):
    """A budget server's per-choice ``budget`` (e1 serve: :func:`e1.serve.budgets.report`)."""

    thinking_tokens: Count
    solution_tokens: Count
    thinking_forced: bool = False
    thinking_end: Literal[(*THINK_ENDS, "")] | None = None  # e1.engine.row_state: how thinking ended


class Choice(Shape):
    text: str | None = None
    message: Message | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # vLLM
    matched_stop: str | int | None = None  # SGLang
    stopping_word: str | None = None  # llama.cpp
    token_ids: list[Count] | None = None
    prompt_token_ids: list[Count] | None = None  # vLLM, with return_token_ids: the prompt as the server took it
    budget: BudgetReport | None = None

    def stopped_at(self, end_text: str) -> bool:
        """Whether a ``stop`` finish was the end marker rather than the end of sequence."""
        for key in ("stop_reason", "matched_stop", "stopping_word"):
            if key in self.model_fields_set:
                return getattr(self, key) == end_text
        raise RequestError(
            "the reply does not say why thinking stopped (no stop_reason), so e1 cannot tell "
            "the end marker from the end of sequence",
            hint="use a vLLM, SGLang or llama.cpp server",
        )

    @property
    def stopped(self) -> str:
        return "stop" if self.finish_reason == "stop" else "length"


class Reply(Shape):
    """An OpenAI-compatible ``/v1/completions`` or ``/v1/chat/completions`` reply: its first choice is read."""

    choices: list[Choice] = Field(min_length=1)
    usage: Usage = Usage()
    prompt_token_ids: list[Count] | None = None  # vLLM's chat replies show the prompt here, not per choice

    @field_validator("usage", mode="before")
    @classmethod
    def _null_usage(cls, value):
        return {} if value is None else value  # "usage": null, as some servers send: no counts

    @property
    def choice(self) -> Choice:
        return self.choices[0]

    def texts(self) -> str:
        message = self.choice.message or Message()
        return (self.choice.text or "") + (message.content or "") + message.thinking


@dataclass(frozen=True)
class Limits:
    """What a request allows its reply: ``max_tokens``, stop strings, and e1's budget fields if sent."""

    max_tokens: int | None = None  # max_tokens, or truncate's t + s: the whole output
    stop: tuple[str, ...] = ()
    think_limit: int | None = None  # a mode with a thinking budget: t (soft: its ceiling) plus the grace window
    solve_limit: int | None = None  # ... and s
    prompt_ids: tuple[int, ...] | None = None  # a prompt sent as token ids: what a reply's prompt_token_ids must be


def limits_of(body: dict) -> Limits:
    """The limits of an OpenAI-compatible request body e1 built."""
    cap = body.get("max_tokens", body.get("max_completion_tokens"))
    stop, prompt = tuple(body.get("stop") or ()), body.get("prompt")
    ids = tuple(prompt) if isinstance(prompt, list) else None
    if THINK_FIELD not in body:
        return Limits(cap, stop, prompt_ids=ids)
    from e1.budget import Budget
    from e1.engine.modes import Mode

    budget, mode = Budget(body[THINK_FIELD], body[SOLVE_FIELD]), Mode.parse(body[MODE_FIELD])
    if not mode.separate:  # truncate: one budget t + s over the whole output (none: only max_tokens)
        total = mode.output_cap(budget)
        cap = total if cap is None else cap if total is None else min(cap, total)
        return Limits(cap, stop, prompt_ids=ids)
    return Limits(cap, stop, mode.think_limit(budget) + mode.grace, budget.solve, ids)


def accept(shape: type[Shape], raw, limits: Limits, markers: tuple[str, ...] = (), counted: int | None = None):
    """``raw`` (JSON bytes, or a dict: a journal's line, an SDK's dump) as ``shape``, checked
    against ``limits``; ``markers``: the thinking markers a chat split may not hold; ``counted``:
    the tokens its texts must fit (None: the reply's usage)."""
    try:
        reply = shape.model_validate_json(raw) if isinstance(raw, (bytes, str)) else shape.model_validate(raw)
    except ValidationError as err:
        raise RequestError(_shape_error(err)) from None
    if isinstance(reply, Reply):
        _check_prompt(reply, limits)
    problem = _inconsistent(reply, limits, markers) if isinstance(reply, Reply) else None
    counted = reply.usage.completion_tokens if counted is None and isinstance(reply, Reply) else counted
    texts = reply.texts()
    if problem is None and counted is not None and len(texts) > MAX_CHARS_PER_TOKEN * (counted + 1):
        problem = f"its texts hold {len(texts)} characters for {counted} tokens"
    if problem is None and lone_surrogate(texts):  # (an SDK's json.loads keeps "\ud800"; parquet would not)
        problem = f"its text holds a lone surrogate {lone_surrogate(texts).group()!r}, which is no text"
    if problem is not None:
        raise RequestError(f"the reply is inconsistent: {problem}")
    return reply


def _shape_error(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        if "recursion limit" in first["msg"]:
            return "the reply is JSON nested deeper than e1 reads (its parser's recursion limit)"
        return f"the reply is not JSON ({first['msg']}{'; a lone surrogate?' if 'hex escape' in first['msg'] else ''})"
    where = ".".join(str(part) for part in first["loc"])
    where = f"the reply's {where}" if where else "the reply"
    return f"{where}: {first['msg'].lower()} (got {reprlib.repr(first.get('input'))})"


class PromptChanged(RequestError):
    """A reply whose ``prompt_token_ids`` are not the ids e1 sent: the server decoded another prompt."""


def _check_prompt(reply: Reply, limits: Limits) -> None:
    """Every reply that shows the prompt's ids shows e1's own (a prompt sent as ids), or is refused."""
    sent = limits.prompt_ids
    for shown in (reply.choice.prompt_token_ids, reply.prompt_token_ids):
        if sent is not None and shown is not None and tuple(shown) != sent:
            at = next((i for i, (a, b) in enumerate(zip(shown, sent)) if a != b), min(len(shown), len(sent)))
            raise PromptChanged(
                f"the server took other prompt ids than e1 sent ({len(shown)} ids for {len(sent)}, "
                f"the first difference at position {at}), so its reply is not token for token",
                hint="serve the model so that it takes token-id prompts as given (no BOS added), "
                "or leave out --tokenizer",
            )


def _inconsistent(reply: Reply, limits: Limits, markers: tuple[str, ...]) -> str | None:
    """The first way ``reply`` disagrees with its request or with itself, or None."""
    usage, choice = reply.usage, reply.choice
    completion, reasoning = usage.completion_tokens, usage.reasoning_tokens
    if completion is not None and limits.max_tokens is not None and completion > limits.max_tokens:
        return f"usage.completion_tokens {completion} exceeds the request's max_tokens {limits.max_tokens}"
    if reasoning is not None and (completion is None or reasoning > completion):
        return f"usage counts {reasoning} reasoning tokens of {completion} completion tokens"
    if choice.token_ids is not None and limits.max_tokens is not None and len(choice.token_ids) > limits.max_tokens:
        return f"{len(choice.token_ids)} token ids exceed the request's max_tokens {limits.max_tokens}"
    if any(stop and stop in (choice.text or "") for stop in limits.stop):
        return "its text runs past the stop string it was asked to stop at"
    message = choice.message or Message()
    for marker in markers if choice.message is not None else ():
        if marker and (marker in (message.content or "") or marker in message.thinking):
            return (
                f"its message holds the thinking marker {marker!r}: the server did not split thinking from the answer"
            )
    return _report_problem(choice.budget, limits, completion) if choice.budget is not None else None


def _report_problem(report: BudgetReport, limits: Limits, completion: int | None) -> str | None:
    think, solve = report.thinking_tokens, report.solution_tokens
    if limits.think_limit is not None and think > limits.think_limit:
        return f"the budget report counts {think} thinking tokens under a thinking limit of {limits.think_limit}"
    if limits.solve_limit is not None and solve > limits.solve_limit:
        return f"the budget report counts {solve} solution tokens under s = {limits.solve_limit}"
    if limits.max_tokens is not None and think + solve > limits.max_tokens:
        return f"the budget report counts {think + solve} tokens under max_tokens {limits.max_tokens}"
    if completion is not None and think + solve > completion:
        return f"the budget report counts {think} + {solve} tokens of {completion} completion tokens"
    if report.thinking_end and report.thinking_forced != (report.thinking_end == "budget"):
        return (
            f"the budget report says thinking_forced={report.thinking_forced} but thinking_end={report.thinking_end!r}"
        )
    return None
