"""The gate of ``e1 serve`` (e1.serve.gate) and the middleware's door, on generated bodies; no server.

Invariant: whatever body a client sends, the gate gives what vLLM is handed (or None: not a JSON
object, vLLM's own 400) or one line with a 4xx status, never another exception, within a time
bound; and the middleware answers it 2xx/4xx, or logs a client that hung up, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import E1Error
from e1.serve.budgets import Served, ServeDefaults
from e1.serve.gate import MAX_BODY_BYTES, MAX_DEPTH, admit
from e1.serve.middleware import BudgetMiddleware

SECONDS = 1.0  # the most the gate may take on one body (~100x what it takes)


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(str(tiny_model_dir))
    return Served(ServeDefaults(think=6, solve=4), tokenizer, resolve_markers(tokenizer), 256)


# what hostile clients sent: nested quantifiers, constructs RE2 refuses, deep nesting, surrogates, huge texts
PATTERNS = [
    r"(a+)+$",
    r"(\w)\1",
    r"a(?=b)",
    r"(?<!x)y",
    "(" * 2000 + "a" + ")" * 2000,
    r".{249}",
    r"(.?){240}.{240}",
    r"\\boxed\{",
    "\ud800",
    "a{1001}",
    "((a{100}){100}){100}",
    "",
    "[",
    r"\Z",
]
TEXTS = st.one_of(st.text(max_size=40), st.sampled_from(["\ud800", "x" * 3000, "é" * 2049, "\\x", "'", '"', "\n"]))
MODES = st.one_of(
    st.sampled_from(
        [
            "elastic",
            "none",
            "truncate",
            "soft",
            "budget-forcing:wait=2",
            "early-exit:threshold=0.9",
            "elastic:grace=32",
            "\ud800",
            "elastic:" + "x" * 9000,
            "elastic:stop=",
            ":",
            "elastic::::",
        ]
    ),
    st.builds(lambda p: f"elastic:stop='{p}'", st.sampled_from(PATTERNS)),
    st.builds(lambda t: f"elastic:exit='{t}'", TEXTS),
    st.builds(lambda t, g: f"elastic:exit='{t}':grace={g}", TEXTS, st.integers(-5, 10**6)),
    st.text(max_size=60),
)
NUMBERS = st.one_of(
    st.integers(-10, 300),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(["2k", "1.5k", "9" * 400, "x", "\ud800", ""]),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "thinking_budget": NUMBERS,
        "solution_budget": NUMBERS,
        "budget_mode": MODES,
        "budget_room": NUMBERS,
        "max_tokens": NUMBERS,
        "n": NUMBERS,
        "stream": JSON,
        "seed": NUMBERS,
        "return_token_ids": JSON,
        "messages": st.one_of(JSON, st.just([{"role": "user", "content": "\ud800"}])),
        "prompt": st.one_of(JSON, TEXTS),
        "vllm_xargs": st.one_of(
            JSON, st.fixed_dictionaries({}, optional={"thinking_budget": NUMBERS, "budget_mode": MODES, "e1": JSON})
        ),
    },
)
RAW = st.sampled_from(
    [
        b"",
        b"{",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b'{"thinking_budget": NaN, "solution_budget": 4}',
        b'{"n": Infinity}',
        b"\xff\xfe{}",
        b'{"budget_mode": "elastic:exit=\'' + b"x" * 3_000_000 + b"'\"}",
        b'{"n": 1' + b"0" * 5000 + b"}",
        b'{"budget_mode": "\\ud800"}',
        b'{"\\udfff": 1}',
        b"null",
        b"[]",
    ]
)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def through_the_gate(body: bytes, served: Served):
    """(status, what came out): 200 and the gate's value, or the 4xx and its one line; and the time it took."""
    start = time.perf_counter()
    try:
        out = admit(body, served)
    except E1Error as err:
        status, out = getattr(err, "status", 400), str(err)
        assert "\n" not in out and 400 <= status < 500, out
    else:
        status = 200
        assert out is None or (isinstance(out[0], dict) and out[1] is not None)
    return status, out, time.perf_counter() - start


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=FIELDS)
def test_any_generated_request_is_admitted_or_one_line_400_within_a_bound(served, request):
    body = json.dumps(request).encode()
    status, out, seconds = through_the_gate(body, served)
    assert seconds < SECONDS, (request, seconds)
    if status == 200 and out is not None:  # admitted: what vLLM is handed is plain UTF-8 JSON with e1's settings
        json.dumps(out[0], ensure_ascii=False).encode("utf-8")
        assert "budget_mode" in out[0]["vllm_xargs"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.one_of(RAW, JSON.map(lambda value: json.dumps(value).encode())))
def test_any_body_at_all_is_answered_within_a_bound(served, body):
    assert len(body) <= MAX_BODY_BYTES
    status, out, seconds = through_the_gate(body, served)
    assert seconds < SECONDS, (body[:100], seconds)


@pytest.mark.parametrize(
    "body, says",
    [
        ({"budget_mode": "elastic:stop='(a+)+$'"}, None),  # accepted: RE2 matches it in linear time
        ({"budget_mode": r"elastic:stop='(\w)\1'"}, r"budget_mode: stop= pattern '(\\w)\\1' uses a backreference \1"),
        ({"budget_mode": "elastic:stop='a(?=b)'"}, "uses a lookahead (?=...)"),
        ({"budget_mode": "elastic:stop='.{300}'"}, "RE2 instructions, more than 500"),
        ({"budget_mode": "\ud800"}, "budget_mode holds a lone surrogate"),
        ({"messages": [{"role": "user", "content": "hi \udc00"}]}, "messages[0].content holds a lone surrogate"),
        (
            {"budget_mode": "elastic:exit='" + "x" * 3000 + "'"},
            "mode option exit= holds 3000 characters, more than 2048",
        ),
        ({"thinking_budget": "1" * 40, "solution_budget": 4}, "thinking_budget holds 40 characters, more than 32"),
        ({"vllm_xargs": {"solution_budget": [1]}}, "vllm_xargs.solution_budget must be a number of tokens"),
        ({"budget_mode": 5}, "budget_mode must be a text"),
        ({"budget_mode": "elastic:" + "x" * 9000}, "budget_mode holds 9008 characters, more than 8192"),
        ({"messages": nested(MAX_DEPTH + 1)}, f"nests deeper than {MAX_DEPTH} levels"),
        ({"messages": nested(MAX_DEPTH - 2)}, None),
    ],
)
def test_each_malformed_field_is_one_line_naming_it(served, body, says):
    status, out, _ = through_the_gate(json.dumps(body).encode(), served)
    if says is None:
        assert status == 200 and out is not None
    else:
        assert status == 400 and says in out, out


def test_nan_and_a_body_nested_past_the_parser_are_400_not_500(served):
    assert "holds NaN, which JSON does not have" in through_the_gate(b'{"temperature": NaN}', served)[1]
    assert "nests deeper than" in through_the_gate(b"[" * 100_000 + b"]" * 100_000, served)[1]


# -- the middleware's door: disconnects -----------------------------------------------------


def run_middleware(served, app, messages, body: bytes = b"{}"):
    """(what the middleware sent, what it logged): ``messages`` are what ``receive`` returns, in turn."""
    middleware, sent = BudgetMiddleware(app), []
    middleware.served = served
    queue = list(messages)

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    asyncio.run(middleware(scope, receive, send))
    return sent


@contextlib.contextmanager
def serve_log_to(caplog):
    """The middleware's logger sends its lines to ``caplog`` too: it is a child of vLLM's logger, which
    stops propagation to the root (where caplog listens) once vLLM has configured its logging."""
    logger = logging.getLogger("vllm.e1.serve")
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)


def test_a_client_that_hangs_up_before_its_body_arrives_is_logged_not_answered(served, caplog):
    async def app(scope, receive, send):
        raise AssertionError("reached vLLM")

    with caplog.at_level("INFO", logger="vllm.e1.serve"), serve_log_to(caplog):
        sent = run_middleware(
            served, app, [{"type": "http.request", "body": b'{"messa', "more_body": True}, {"type": "http.disconnect"}]
        )
    assert sent == [] and "hung up before its request arrived" in caplog.text


def test_vllms_empty_reply_to_a_client_that_hung_up_is_passed_on_not_a_traceback(served, caplog):
    """vLLM's handler, cancelled by the disconnect, returns None: FastAPI sends ``null`` with HTTP 200 (the
    middleware read it as a reply: an AttributeError, a traceback per hang-up)."""

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"null", "more_body": False})

    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    with caplog.at_level("INFO", logger="vllm.e1.serve"), serve_log_to(caplog):
        sent = run_middleware(served, app, [{"type": "http.request", "body": body}])
    assert sent[1]["body"] == b"null" and "hung up before its reply was ready" in caplog.text
