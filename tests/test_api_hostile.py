"""--backend openai against a hostile or broken server, and the hosted vendors' replies: one gate.

The invariant (docs/api-backends.md, "Models behind an API"): a reply is read within a total deadline and a size
cap, parsed into one typed, validated shape, and every stored count is one e1 measured or checked
against its request (0 <= think <= t, 0 <= solve <= s, think + solve = completion); anything else
is that sample's :class:`RequestError`, never a stored number, and never journalled, so a resumed
run sends its request again. The stand-in (:class:`tests.test_api_backend.StandIn`) serves replies
and behaviours that hypothesis generates: drips, endless and huge bodies, headers then silence,
wrong types, inconsistent usage and budget reports, answers inside unclosed thinking.
"""

from __future__ import annotations

import copy
import json
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.api.openai_engine import BUDGET_SERVER, PLAIN_SERVER, ApiSettings, OpenAIEngine
from e1.engine.api.replies import MAX_REPLY_BYTES, RequestError
from e1.engine.base import Mode, Sampling
from e1.engine.markers import DEFAULT_END, DEFAULT_START
from e1.errors import E1Error
from tests.test_api_backend import MODEL, StandIn, _eval, tokenizer_dir  # noqa: F401  (tokenizer_dir: a fixture)

DEADLINE_S = 1.0
T, S = 16, 8  # the budget of the budget server's rows
CHAT_CAP = 50  # max_tokens of the plain server's chat rows (mode none)


def hypothesis_settings(examples: int):
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def server():
    stand_in = StandIn().start()
    yield stand_in
    stand_in.stop()


@pytest.fixture(autouse=True)
def _healthy(request):
    yield
    if "server" in request.fixturenames:
        request.getfixturevalue("server").fault = lambda path, body: None


# ---- replies, valid and consistent ---------------------------------------------------------------


def chat_reply(think: int = 3, solve: int = 3) -> dict:
    """A plain server's chat reply (a reasoning parser's split and its count)."""
    message = {"role": "assistant", "reasoning_content": "a " * think, "content": "\\boxed{5}"}
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": think + solve,
        "completion_tokens_details": {"reasoning_tokens": think},
    }
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}


def budget_reply(think: int = 5, solve: int = 3, end: str = "natural") -> dict:
    """A budget server's chat reply (e1 serve: a per-choice ``budget``); the forced marker counts in usage."""
    reply = chat_reply(think, solve)
    reply["choices"][0]["budget"] = {
        "thinking_tokens": think,
        "solution_tokens": solve,
        "thinking_forced": end == "budget",
        "thinking_end": end,
    }
    reply["usage"]["completion_tokens"] += 1
    return reply


def _is_probe(body: dict) -> bool:
    return body.get("thinking_budget") == 0 and body.get("max_tokens") == 8


def _serve(server: StandIn, reply, budget_server: bool = False) -> None:
    """Answer e1's probe as a plain or a budget server, and every other request with ``reply``:
    a dict or raw bytes, or a callable that writes the reply itself (a behaviour)."""

    def fault(path, body):
        if _is_probe(body):
            return (200, {}, json.dumps(budget_reply(0, 1, "budget")).encode()) if budget_server else None
        if callable(reply):
            return reply
        return 200, {}, reply if isinstance(reply, bytes) else json.dumps(reply).encode()

    server.fault = fault


def _engine(server: StandIn, budget_server: bool, journal=None) -> OpenAIEngine:
    mode = "elastic" if budget_server else "none"
    settings_ = ApiSettings(server.url, max_retries=0, request_timeout_s=DEADLINE_S)
    engine = OpenAIEngine.load(MODEL, settings_, [Mode.parse(mode)], journal=journal)
    assert engine.server == (BUDGET_SERVER if budget_server else PLAIN_SERVER)
    return engine


def _journalled(journal) -> list[str]:
    return journal.read_text().splitlines() if journal.exists() else []


def _row(engine: OpenAIEngine):
    budget_server = engine.server == BUDGET_SERVER
    mode = Mode.parse("elastic" if budget_server else "none")
    return engine.generate(["q"], Budget(T, S), mode, Sampling(max_tokens=CHAT_CAP), seeds=[1])[0]


# ---- behaviours: a reply within a deadline and a size cap ----------------------------------------


def drip(every_s: float):
    def write(handler):
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(10**6))
        handler.end_headers()
        for _ in range(10**6):
            handler.wfile.write(b" ")
            time.sleep(every_s)

    return write


def endless(chunk_bytes: int):
    def write(handler):  # HTTP/1.0 without content-length: the body runs until the connection closes
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.end_headers()
        handler.wfile.write(b'{"choices": [{"text": "')
        while True:
            handler.wfile.write(b"a" * chunk_bytes)

    return write


def huge(size_bytes: int, announced: bool = True):
    def write(handler):
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        if announced:
            handler.send_header("content-length", str(size_bytes))
        handler.end_headers()
        head, tail = b'{"choices": [{"message": {"content": "', b'"}}]}'
        handler.wfile.write(head)
        left, chunk = size_bytes - len(head) - len(tail), b"a" * (1 << 16)  # written in pieces: the stand-in holds none
        while left > 0:
            handler.wfile.write(chunk[:left])
            left -= len(chunk)
        handler.wfile.write(tail)

    return write


def silent_after(headers_after_s: float):
    def write(handler):  # headers late, a few bytes, then nothing: the body's reads share the deadline
        time.sleep(headers_after_s)
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", "100")
        handler.end_headers()
        handler.wfile.write(b'{"choices": ')
        time.sleep(10 * DEADLINE_S)

    return write


TOO_SLOW = r"no complete reply within 1 s \(--request-timeout"
TOO_LARGE = r"the reply is larger than 8 MiB"


@pytest.mark.parametrize(
    "behaviour, reason",
    [
        (drip(0.25), TOO_SLOW),  # 1 byte every 0.25 s: each read is quick, the reply never ends
        (silent_after(0.6 * DEADLINE_S), TOO_SLOW),  # headers at 0.6 s, then silence: cut at 1 s, not at 1.6 s
        (endless(1 << 16), TOO_LARGE),
        (huge(48 << 20), TOO_LARGE + r" \(48 MiB\)"),  # refused from its content-length, never read
        (huge(12 << 20, announced=False), TOO_LARGE),
    ],
)
def test_a_reply_is_cut_at_its_deadline_and_its_size_cap(server, behaviour, reason):
    engine = _engine(server, budget_server=False)
    _serve(server, behaviour)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(RequestError, match=reason):
            _row(engine)
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.4 * DEADLINE_S  # the deadline is the whole reply's, whatever its reads
    assert peak < 4 * MAX_REPLY_BYTES  # at most the cap is held (it reached 672-865 MiB)


# ---- types and counts: each failure class of the issue -------------------------------------------


def _with(reply: dict, path: tuple, value) -> dict:
    reply = copy.deepcopy(reply)
    *parents, last = path
    node = reply
    for key in parents:
        node = node[key]
    node[last] = value
    return reply


CHOICE, USAGE = ("choices", 0), ("usage",)
CLASSES = {  # failure class -> (budget server?, the reply, what the error says)
    "negative usage": (False, _with(chat_reply(), USAGE + ("completion_tokens",), -3), "greater than or equal to 0"),
    "reasoning 900 of 5": (
        False,
        _with(chat_reply(2, 3), USAGE + ("completion_tokens_details", "reasoning_tokens"), 900),
        "900 reasoning tokens of 5 completion tokens",
    ),
    "completion beyond max_tokens": (
        False,
        _with(chat_reply(), USAGE + ("completion_tokens",), 900),
        "900 exceeds the request's max_tokens 50",
    ),
    "1e30": (False, _with(chat_reply(), USAGE + ("completion_tokens",), 1e30), "valid integer"),
    "a huge int": (False, _with(chat_reply(), USAGE + ("prompt_tokens",), 10**30), "less than or equal to"),
    "a bool count": (False, _with(chat_reply(), USAGE + ("prompt_tokens",), True), "valid integer"),
    "100,000 thinking tokens under t = 16": (
        True,
        _with(budget_reply(), CHOICE + ("budget", "thinking_tokens"), 100_000),
        "100000 thinking tokens under a thinking limit of 16",
    ),
    "solution beyond s": (True, _with(budget_reply(), CHOICE + ("budget", "solution_tokens"), 9), "under s = 8"),
    '"false" as forced': (
        True,
        _with(budget_reply(), CHOICE + ("budget", "thinking_forced"), "false"),
        "valid boolean",
    ),
    "forced but ended naturally": (
        True,
        _with(budget_reply(), CHOICE + ("budget", "thinking_forced"), True),
        "thinking_forced=True but thinking_end='natural'",
    ),
    "report beyond usage": (True, _with(budget_reply(5, 3), USAGE + ("completion_tokens",), 7), "5 \\+ 3 tokens of 7"),
    "answer inside unclosed thinking": (
        False,
        _with(chat_reply(), CHOICE + ("message", "content"), "<think>a a a \\boxed{5}"),
        "thinking marker '<think>'",
    ),
    "answer after a marker in the reasoning": (
        False,
        _with(chat_reply(), CHOICE + ("message", "reasoning_content"), "a a </think> \\boxed{5}"),
        "thinking marker '</think>'",
    ),
    "content as a dict": (False, _with(chat_reply(), CHOICE + ("message", "content"), {"text": "5"}), "valid string"),
    "content as a list": (
        False,
        _with(chat_reply(), CHOICE + ("message", "content"), [{"type": "text"}]),
        "valid string",
    ),
    "a text too long for its count": (
        False,
        _with(chat_reply(), CHOICE + ("message", "content"), "a" * 5000),
        "characters for 6 tokens",
    ),
    "no choices": (False, {"choices": [], "usage": {}}, "at least 1 item"),
    "not an object": (False, [chat_reply()], "the reply: input should be an object"),
    "not JSON": (False, b'{"choices": [{"text": "cut', "the reply is not JSON"),
    "no reasoning count": (
        False,
        _with(chat_reply(), USAGE + ("completion_tokens_details",), None),
        "reasoning_tokens",
    ),
    "no usage": (False, _with(chat_reply(), USAGE, None), "reasoning_tokens"),
}


@pytest.mark.parametrize("name", CLASSES)
def test_each_hostile_reply_is_its_samples_failure_never_a_stored_number(server, name, tmp_path):
    budget_server, reply, reason = CLASSES[name]
    journal = tmp_path / "api-replies.jsonl"
    _serve(server, reply, budget_server)
    engine = _engine(server, budget_server, journal)
    probes = _journalled(journal)  # the probe's reply is journalled as it loads (a rerun does not ask again)
    with pytest.raises(RequestError, match=reason):
        _row(engine)
    assert _journalled(journal) == probes  # refused: never journalled
    _serve(server, budget_reply() if budget_server else chat_reply(), budget_server)  # the server heals
    row = _row(_engine(server, budget_server, journal))  # a resumed run sends the request again
    assert (row.think_tokens, row.solve_tokens) == ((5, 3) if budget_server else (3, 3))


# ---- generated: whatever the server sends --------------------------------------------------------

HOSTILE_COUNTS = st.one_of(
    st.integers(-5, -1),
    st.integers(2**31, 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.sampled_from(["5", "false", None]),
    st.integers(0, 2000),
)
HOSTILE_TEXTS = st.one_of(
    st.text(max_size=12),
    st.none(),
    st.integers(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([f"{DEFAULT_START}a \\boxed{{5}}", f"a {DEFAULT_END} \\boxed{{5}}", "a" * 9000]),
)
PLACES = {  # where a mutation lands -> what it puts there
    USAGE + ("completion_tokens",): HOSTILE_COUNTS,
    USAGE + ("prompt_tokens",): HOSTILE_COUNTS,
    USAGE + ("completion_tokens_details", "reasoning_tokens"): HOSTILE_COUNTS,
    CHOICE + ("message", "content"): HOSTILE_TEXTS,
    CHOICE + ("message", "reasoning_content"): HOSTILE_TEXTS,
    CHOICE + ("finish_reason",): st.one_of(st.sampled_from(["stop", "length", None]), st.integers()),
    CHOICE + ("budget", "thinking_tokens"): HOSTILE_COUNTS,
    CHOICE + ("budget", "solution_tokens"): HOSTILE_COUNTS,
    CHOICE + ("budget", "thinking_forced"): st.one_of(st.booleans(), st.sampled_from(["false", "true", 0, 1, None])),
    CHOICE + ("budget", "thinking_end"): st.sampled_from(["natural", "budget", "pattern", "open", "soon", None, 3]),
}


@st.composite
def replies(draw, budget_server: bool) -> dict:
    """A consistent reply, then up to three of its fields made hostile."""
    think, solve = draw(st.integers(0, T)), draw(st.integers(0, S))
    reply = (
        budget_reply(think, solve, draw(st.sampled_from(["natural", "budget"])))
        if budget_server
        else chat_reply(think, solve)
    )
    places = [p for p in PLACES if budget_server or "budget" not in p]
    for place in draw(st.lists(st.sampled_from(places), max_size=3, unique=True)):
        reply = _with(reply, place, draw(PLACES[place]))
    return reply


def _holds_the_invariant(row, reply: dict, budget_server: bool) -> None:
    """A row that was stored: typed, counted within its request, its texts split as counted."""
    counts = (row.prompt_tokens, row.think_tokens, row.solve_tokens)
    assert all(type(count) is int and 0 <= count < 2**31 for count in counts)
    assert type(row.forced) is bool and isinstance(row.think_text, str) and isinstance(row.solution_text, str)
    completion = reply["usage"]["completion_tokens"]
    if budget_server:
        assert row.think_tokens <= T and row.solve_tokens <= S
        assert row.think_tokens + row.solve_tokens <= completion  # the forced marker counts in neither
    else:
        assert row.think_tokens + row.solve_tokens == completion <= CHAT_CAP
    assert DEFAULT_END not in row.think_text and DEFAULT_START not in row.solution_text + row.think_text


@hypothesis_settings(150)
@given(data=st.data(), budget_server=st.booleans())
def test_whatever_the_server_replies_a_row_holds_the_invariant_or_fails_clearly(server, data, budget_server, tmp_path):
    reply = data.draw(replies(budget_server))
    journal = tmp_path / f"{time.monotonic_ns()}.jsonl"
    _serve(server, reply, budget_server)
    engine = _engine(server, budget_server, journal)
    probes = _journalled(journal)
    try:
        row = _row(engine)
    except RequestError:
        assert _journalled(journal) == probes  # a refused reply is never journalled: a resumed run asks again
        return
    _holds_the_invariant(row, reply, budget_server)


@hypothesis_settings(8)
@given(
    behaviour=st.one_of(
        st.builds(drip, st.sampled_from([0.05, 0.25])),
        st.builds(endless, st.integers(1, 1 << 17)),
        st.builds(huge, st.integers(MAX_REPLY_BYTES + 1, 48 << 20), st.booleans()),
        st.builds(silent_after, st.floats(0, 0.8 * DEADLINE_S)),
    )
)
def test_whatever_the_server_does_a_reply_ends_within_its_deadline(server, behaviour):
    engine = _engine(server, budget_server=False)
    _serve(server, behaviour)
    started = time.monotonic()
    with pytest.raises(RequestError, match=f"{TOO_SLOW}|{TOO_LARGE}"):
        _row(engine)
    assert time.monotonic() - started < 1.4 * DEADLINE_S


# ---- a resumed eval after any single bad reply completes ------------------------------------------


@hypothesis_settings(6)
@given(
    bad=st.sampled_from(
        [
            {"choices": [{"text": " a a", "finish_reason": "length"}]},  # no usage: the tokens cannot be counted
            {"choices": [{"text": " a a", "finish_reason": "length"}], "usage": {"completion_tokens": -1}},
            {"choices": [{"text": " a a", "finish_reason": "length"}], "usage": {"completion_tokens": 900}},
            {
                "choices": [{"text": " a a", "finish_reason": "stop"}],
                "usage": {"completion_tokens": 2},
            },  # no stop_reason
            {"choices": [{"text": " a </think> 5", "finish_reason": "length"}], "usage": {"completion_tokens": 3}},
            {"choices": [{"text": {"a": 1}}], "usage": {"completion_tokens": 3}},
        ]
    )
)
def test_a_resumed_run_after_any_single_bad_reply_completes_against_a_healthy_server(
    server, tokenizer_dir, tmp_path, bad
):
    out = tmp_path / f"{time.monotonic_ns()}"
    out.mkdir()
    sent = []

    def once(path, body):  # problem p2's thinking call gets the bad reply, once
        if "question 2" in body.get("prompt", "") and body.get("stop") and not sent:
            sent.append(body)
            return 200, {}, json.dumps(bad).encode()
        return None

    server.fault = once
    with pytest.raises(E1Error, match=r"problem p2 \(elastic, t=5 s=4\), sample 0 failed: "):
        _eval(server.url, tokenizer_dir, out)
    samples, _ = _eval(server.url, tokenizer_dir, out)  # the same command, against the healthy server
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert list(samples["think_tokens"]) == [5, 3, 5, 3] and list(samples["solve_tokens"]) == [3, 3, 3, 3]


# ---- the hosted vendors' replies: the same gate --------------------------------------------------


def _vendor_reply(vendor: str, think: int, answer: int) -> dict:
    if vendor == "anthropic":
        return {
            "content": [{"type": "thinking", "thinking": "t " * think}, {"type": "text", "text": "\\boxed{5}"}],
            "usage": {
                "input_tokens": 3,
                "output_tokens": think + answer,
                "output_tokens_details": {"thinking_tokens": think},
            },
            "stop_reason": "end_turn",
        }
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": "t " * think, "thought": True}, {"text": "\\boxed{5}"}]},
                "finish_reason": "STOP",
            }
        ],
        "usage_metadata": {"prompt_token_count": 3, "candidates_token_count": answer, "thoughts_token_count": think},
    }


VENDOR_PLACES = {
    "anthropic": [
        ("usage", "output_tokens"),
        ("usage", "input_tokens"),
        ("usage", "output_tokens_details", "thinking_tokens"),
        ("content", 1, "text"),
        ("content", 0, "thinking"),
    ],
    "gemini": [
        ("usage_metadata", "candidates_token_count"),
        ("usage_metadata", "thoughts_token_count"),
        ("usage_metadata", "prompt_token_count"),
        ("candidates", 0, "content", "parts", 1, "text"),
        ("candidates", 0, "content", "parts", 0, "thought"),
    ],
}


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(), vendor=st.sampled_from(["anthropic", "gemini"]), think=st.integers(0, 40), answer=st.integers(0, 20)
)
def test_a_vendors_reply_holds_the_invariant_or_fails_clearly(data, vendor, think, answer):
    pytest.importorskip("anthropic")
    from e1.engine.api.vendors import VENDORS

    cap = 64
    reply = _vendor_reply(vendor, think, answer)
    for place in data.draw(st.lists(st.sampled_from(VENDOR_PLACES[vendor]), max_size=2, unique=True)):
        reply = _with(reply, place, data.draw(HOSTILE_COUNTS if "token" in place[-1] else HOSTILE_TEXTS))
    request = {"max_tokens": cap} if vendor == "anthropic" else {"config": {"max_output_tokens": cap}}
    gate = VENDORS[vendor]
    try:
        row = gate.completion(gate.accept(reply, request), (0, 0))
    except RequestError:
        return
    assert all(type(c) is int and 0 <= c < 2**31 for c in (row.prompt_tokens, row.think_tokens, row.solve_tokens))
    assert isinstance(row.think_text, str) and isinstance(row.solution_text, str)
    assert DEFAULT_END not in row.think_text + row.solution_text
    if vendor == "anthropic":
        assert row.think_tokens + row.solve_tokens == reply["usage"]["output_tokens"] <= cap
    else:
        assert row.solve_tokens <= cap


def test_a_vendors_reply_is_cut_at_its_deadline(monkeypatch):
    """The hosted SDKs send through the same bounded transport (anthropic's own httpx fork included)."""
    pytest.importorskip("anthropic")
    from e1.engine.api.hosted import HostedEngine

    server = StandIn().start()
    _serve(server, drip(0.2))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    try:
        engine = HostedEngine.load(
            "m",
            ApiSettings(
                server.url.removesuffix("/v1"), backend="anthropic", max_retries=0, request_timeout_s=DEADLINE_S
            ),
            [Mode.parse("none")],
        )
        started = time.monotonic()
        with pytest.raises(RequestError, match="no complete reply within the deadline"):
            engine.generate(["q"], Budget(0, 8), Mode.parse("none"), Sampling(max_tokens=64))
        assert time.monotonic() - started < 1.4 * DEADLINE_S
    finally:
        server.stop()
