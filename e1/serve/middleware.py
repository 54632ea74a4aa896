"""ASGI middleware that puts e1's budgets into vLLM's OpenAI-compatible server.

Load it into any ``vllm serve`` with ``--middleware e1.serve.middleware.BudgetMiddleware``
(``e1 serve`` does). For ``/v1/chat/completions`` and ``/v1/completions`` it

- checks the API key first, as vLLM does (``--api-key``, else ``$VLLM_API_KEY``; HTTP 401),
  before it reads a byte of the body: vLLM adds user middleware outside its own key check,
  so this runs before that check would,
- refuses a body larger than ``MAX_BODY_BYTES`` (``$E1_SERVE_MAX_BODY_BYTES``) with HTTP 413,
  from its Content-Length before reading it, or once that much has arrived,
- validates the request's budget fields and answers HTTP 400 with one clear message (a bad
  request never reaches the engine),
- fills in the server's defaults and hands vLLM the complete settings in ``vllm_xargs``,
- adds per-phase counts to every choice and to ``usage``, non-streamed or streamed (see
  :mod:`e1.serve.responses`), and splits the chat text where e1 split the tokens: a whole
  message's, and each streamed delta's (:mod:`e1.serve.stream`),
- serves early-exit itself, in several requests per sample to the app inside it
  (:mod:`e1.serve.rounds`): one vLLM request cannot roll a trial answer back.

Other routes pass through untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets

from e1.errors import E1Error
from e1.serve.responses import Plan, Served, error_body, prepare, rewrite_response

PATHS = ("/v1/chat/completions", "/v1/completions")
MAX_BODY_BYTES = int(os.environ.get("E1_SERVE_MAX_BODY_BYTES", 32 << 20))


class BudgetMiddleware:
    def __init__(self, app):
        self.app = app
        self.served: Served | None = None  # loaded at the first request: the app state exists only then
        self.keys: list[bytes] | None = None  # sha256 of each API key; [] for none (also loaded then)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in PATHS:
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _send_json(send, 401, {"error": "Unauthorized"})  # vLLM's own answer
            return
        body = await _read_body(scope, receive, MAX_BODY_BYTES)
        if body is None:
            await _send_json(send, 413, {"error": {
                "message": f"the request body is larger than this server's limit of {MAX_BODY_BYTES} bytes",
                "type": "RequestTooLargeError", "param": None, "code": 413}})
            return
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if not isinstance(request, dict):  # vLLM answers malformed JSON itself
            await self.app(scope, _replay(body, receive), send)
            return
        try:
            served = self.served or self._load(scope)
            request, plan = prepare(request, served)
        except E1Error as err:
            await _send_json(send, 400, error_body(str(err)))
            return
        if plan.rounds:
            await self._rounds(scope, receive, send, request, plan, served)
            return
        rewriter = _Rewriter(send, plan, served)
        await self.app(scope, _replay(json.dumps(request).encode(), receive), rewriter.send)

    async def _rounds(self, scope, receive, send, request: dict, plan: Plan, served: Served) -> None:
        """early-exit: several requests per sample to the app inside (:mod:`e1.serve.rounds`), one reply."""
        from e1.serve.rounds import RoundFailed, serve_rounds

        try:
            response = await serve_rounds(self.app, scope, receive, request, plan, served)
        except E1Error as err:
            await _send_json(send, 400, error_body(str(err)))
        except RoundFailed as failed:  # a round's own error (a wrong model name, a dead engine): as vLLM said it
            await _send_json(send, failed.status, failed.body)
        else:
            await _send_json(send, 200, response)

    def _authorized(self, scope) -> bool:
        """The bearer key is one of the server's (any request, if it has none), compared as vLLM's
        AuthenticationMiddleware compares: sha256 digests, in constant time, against all keys."""
        if self.keys is None:
            args = getattr(getattr(scope.get("app"), "state", None), "args", None)
            keys = getattr(args, "api_key", None) or [os.environ.get("VLLM_API_KEY")]
            self.keys = [hashlib.sha256(key.encode()).digest() for key in keys if key]
        if not self.keys:
            return True
        headers = {name.lower(): value for name, value in scope.get("headers") or []}
        scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        digest = hashlib.sha256(key.encode()).digest()
        matched = False
        for known in self.keys:
            matched |= secrets.compare_digest(digest, known)
        return scheme.lower() == "bearer" and matched

    def _load(self, scope) -> Served:
        from e1.serve.budgets import load_served

        self.served = load_served(scope["app"].state.vllm_config)
        return self.served


class _Rewriter:
    """Wraps ``send``: a JSON response is held until complete and rewritten whole; a stream is
    rewritten event by event (events may straddle body messages)."""

    def __init__(self, send, plan: Plan, served: Served):
        self._send, self.plan, self.served = send, plan, served
        self.start: dict | None = None
        self.streaming = self.passthrough = False
        self.buffer = b""

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            self.passthrough = message["status"] != 200
            self.streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            self.start = message
            if self.passthrough or self.streaming:
                await self._send(_without_length(message) if self.streaming else message)
            return
        if message["type"] != "http.response.body" or self.passthrough:
            await self._send(message)
            return
        self.buffer += message.get("body", b"")
        more = message.get("more_body", False)
        if self.streaming:
            if more:
                events, _, self.buffer = self.buffer.rpartition(b"\n\n")
            else:
                events, self.buffer = self.buffer.rstrip(b"\n"), b""
            await self._send({"type": "http.response.body", "body": self._events(events), "more_body": more})
        elif not more:
            body = json.dumps(rewrite_response(json.loads(self.buffer), self.plan, self.served)).encode()
            start = _without_length(self.start)
            start["headers"].append((b"content-length", str(len(body)).encode()))
            await self._send(start)
            await self._send({"type": "http.response.body", "body": body, "more_body": False})

    def _events(self, events: bytes) -> bytes:
        out = []
        for event in events.split(b"\n\n"):
            if event.startswith(b"data: {"):
                chunk = self.plan.rewrite_chunk(json.loads(event[len(b"data: "):]), self.served)
                event = b"data: " + json.dumps(chunk).encode()
            out.append(event)
        return b"\n\n".join(out) + (b"\n\n" if events else b"")


def _without_length(start: dict) -> dict:
    headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
    return {**start, "headers": headers}


async def _read_body(scope, receive, limit: int) -> bytes | None:
    """The whole request body, or None if it is (or says it is) longer than ``limit`` bytes."""
    headers = {name.lower(): value for name, value in scope.get("headers") or []}
    length = headers.get(b"content-length", b"0")
    if not length.isdigit() or int(length) > limit:
        return None
    parts, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            return None
        more = message.get("more_body", False)
    return b"".join(parts)


def _replay(body: bytes, receive):
    """A ``receive`` that yields ``body`` once, then waits on the real one (for disconnects)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _send_json(send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
