"""ASGI middleware that puts e1's budgets into vLLM's OpenAI-compatible server.

Load it into any ``vllm serve`` with ``--middleware e1.serve.middleware.BudgetMiddleware``
(``e1 serve`` does). For ``/v1/chat/completions`` and ``/v1/completions`` it

- checks the API key first, as vLLM does (``--api-key``, else ``$VLLM_API_KEY``; HTTP 401),
  before it reads a byte of the body: vLLM adds user middleware outside its own key check,
  so this runs before that check would,
- refuses a body larger than ``MAX_BODY_BYTES`` (``$E1_SERVE_MAX_BODY_BYTES``) with HTTP 413,
  from its Content-Length before reading it, or once that much has arrived,
- passes the body through the gate (:func:`e1.serve.gate.admit`: every field bounded, a malformed
  one a one-line HTTP 400 naming it; a bad request never reaches the engine),
- fills in the server's defaults and hands vLLM the complete settings in ``vllm_xargs``,
- adds per-phase counts to every choice and to ``usage``, non-streamed or streamed (see
  :mod:`e1.serve.responses`), and splits the chat text where e1 split the tokens: a whole
  message's, and each streamed delta's (:mod:`e1.serve.stream`),
- serves early-exit itself, in several requests per sample to the app inside it
  (:mod:`e1.serve.rounds`): one vLLM request cannot roll a trial answer back.

Other routes pass through untouched. No tokenization, regex or JSON work on a request runs on the
event loop that answers every client: the gate, the rewriting of replies and stream events, and the
rounds' bookkeeping run in worker threads (``anyio.to_thread``). A client that hangs up is logged in
one line (vLLM's logger), never a traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets

from anyio import to_thread

from e1.errors import E1Error
from e1.serve.budgets import error_body
from e1.serve.gate import MAX_BODY_BYTES, Refused, admit
from e1.serve.responses import Plan, Served, rewrite_response

PATHS = ("/v1/chat/completions", "/v1/completions")
_GONE = object()  # what _read_body returns when the client hung up before its body arrived
log = logging.getLogger("vllm.e1.serve")  # a child of vLLM's logger: its lines appear among vLLM's, formatted alike


class BudgetMiddleware:
    def __init__(self, app):
        self.app = app
        self.served: Served | None = None  # loaded at the first request: the app state exists only then
        self.keys: list[bytes] | None = None  # sha256 of each API key; [] for none (also loaded then)
        self._loading = asyncio.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in PATHS:
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _send_json(send, 401, {"error": "Unauthorized"})  # vLLM's own answer
            return
        body = await _read_body(scope, receive, MAX_BODY_BYTES)
        if body is _GONE:
            log.info("%s %s: the client hung up before its request arrived", scope.get("method"), scope.get("path"))
            return
        if body is None:
            await _send_json(
                send,
                413,
                {
                    "error": {
                        "message": f"the request body is larger than this server's limit of {MAX_BODY_BYTES} bytes",
                        "type": "RequestTooLargeError",
                        "param": None,
                        "code": 413,
                    }
                },
            )
            return
        try:
            served = self.served or await self._load(scope)
            admitted = await to_thread.run_sync(_admit, body, served)
        except Refused as err:
            await _send_json(send, err.status, error_body(str(err), err.status))
            return
        except E1Error as err:
            await _send_json(send, 400, error_body(str(err)))
            return
        if admitted is None:  # not a JSON object: vLLM answers it itself
            await self.app(scope, _replay(body, receive), send)
            return
        request, plan, data = admitted
        if plan.rounds:
            await self._rounds(scope, receive, send, request, plan, served)
            return
        rewriter = _Rewriter(send, plan, served, scope)
        await self.app(scope, _replay(data, receive), rewriter.send)

    async def _rounds(self, scope, receive, send, request: dict, plan: Plan, served: Served) -> None:
        """early-exit: several requests per sample to the app inside (:mod:`e1.serve.rounds`), one reply."""
        from e1.serve.rounds import Disconnected, RoundFailed, serve_rounds

        try:
            response = await serve_rounds(self.app, scope, receive, request, plan, served)
        except E1Error as err:
            await _send_json(send, 400, error_body(str(err)))
        except RoundFailed as failed:  # a round's own error (a wrong model name, a dead engine): as vLLM said it
            await _send_json(send, failed.status, failed.body)
        except Disconnected:
            log.info("%s: the client hung up during its early-exit rounds; they were cancelled", scope.get("path"))
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

    async def _load(self, scope) -> Served:
        """The served model's tokenizer and markers, loaded once, in a thread (the first requests wait for it)."""
        from e1.serve.budgets import load_served

        async with self._loading:
            if self.served is None:
                self.served = await to_thread.run_sync(load_served, scope["app"].state.vllm_config)
        return self.served


class _Rewriter:
    """Wraps ``send``: a JSON response is held until complete and rewritten whole; a stream is
    rewritten event by event (events may straddle body messages)."""

    def __init__(self, send, plan: Plan, served: Served, scope: dict):
        self._send, self.plan, self.served, self.path = send, plan, served, scope.get("path")
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
            events = await to_thread.run_sync(self._events, events)
            await self._send({"type": "http.response.body", "body": events, "more_body": more})
        elif not more:
            body = await to_thread.run_sync(self._whole, self.buffer)
            if body is None:  # vLLM's reply when the client hung up mid-request (a JSON null): nobody to answer
                log.info("%s: the client hung up before its reply was ready", self.path)
                body = self.buffer
            start = _without_length(self.start)
            start["headers"].append((b"content-length", str(len(body)).encode()))
            await self._send(start)
            await self._send({"type": "http.response.body", "body": body, "more_body": False})

    def _whole(self, data: bytes) -> bytes | None:
        """A whole reply rewritten (None: it is not a JSON object, so not a reply to rewrite)."""
        try:
            response = json.loads(data)
        except ValueError:
            return None
        if not isinstance(response, dict):
            return None
        return json.dumps(rewrite_response(response, self.plan, self.served)).encode()

    def _events(self, events: bytes) -> bytes:
        out = []
        for event in events.split(b"\n\n"):
            if event.startswith(b"data: {"):
                chunk = self.plan.rewrite_chunk(json.loads(event[len(b"data: ") :]), self.served)
                event = b"data: " + json.dumps(chunk).encode()
            out.append(event)
        return b"\n\n".join(out) + (b"\n\n" if events else b"")


def _without_length(start: dict) -> dict:
    headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
    return {**start, "headers": headers}


def _admit(body: bytes, served: Served) -> tuple[dict, Plan, bytes] | None:
    """The gate, and the body vLLM is handed, written (in a worker thread)."""
    admitted = admit(body, served)
    if admitted is None:
        return None
    request, plan = admitted
    return request, plan, json.dumps(request).encode()


async def _read_body(scope, receive, limit: int):
    """The whole request body; None if it is (or says it is) longer than ``limit`` bytes; ``_GONE``
    if the client hung up before it all arrived."""
    headers = {name.lower(): value for name, value in scope.get("headers") or []}
    length = headers.get(b"content-length", b"0")
    if not length.isdigit() or int(length) > limit:
        return None
    parts, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return _GONE
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
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
