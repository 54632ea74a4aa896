"""--backend openai against a stand-in plain OpenAI-compatible server on loopback (no network).

The stand-in is scripted: a prompt containing "short" thinks 3 tokens and ends thinking itself, any
other thinks until its budget; a solution is 3 tokens (the last its EOS). It reports ``usage`` and
vLLM's ``stop_reason``, knows nothing of e1's budget fields, and counts every request it gets, so
the tests can check the two-call method, the counts, retries, clear errors and resuming.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from e1.budget import Budget
from e1.data.prompts import PromptOptions, build_prompt
from e1.engine.api.openai_engine import ONE_CALL, PLAIN_SERVER, TWO_CALLS, ApiSettings, OpenAIEngine
from e1.engine.base import Mode, Sampling
from e1.engine.spec import EngineSpec
from e1.errors import ConfigError, E1Error, ResultsError
from e1.rewards.scoring import ScoringSpec
from tests.serving import free_port

MODEL = "stand-in"
END = "</think>"


class StandIn:
    """A plain OpenAI-compatible server (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``)
    in a thread; ``fault(path, body)`` may return (status, headers, raw body) instead of the reply, "drop",
    or a callable that writes the reply itself through the request handler."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.requests: list[tuple[str, dict]] = []
        self.answered: Counter = Counter()  # (prompt, call) answered with a reply
        self.keys: set = set()  # authorization headers seen
        self.token_ids = None  # (choice, body) -> the reply's token ids, as vLLM returns them when asked
        self.decode = None  # token ids -> text, for prompts given as ids
        self.fault = lambda path, body: None
        self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stand_in.requests.append((self.path, body))
                stand_in.keys.add(self.headers.get("authorization"))
                fault = stand_in.fault(self.path, body)
                if fault == "drop":
                    self.close_connection = True
                    return
                if callable(fault):  # a behaviour that writes the reply itself: drips, endless bodies
                    self.close_connection = True
                    try:
                        fault(self)
                    except OSError:  # the client cut the reply
                        pass
                    return
                if fault is not None:
                    status, headers, raw = fault
                    self.send_response(status)
                    for key, value in {"content-type": "application/json", **headers}.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if isinstance(body.get("prompt"), list):  # token ids: taken where decode is set (vLLM), else refused
                    if stand_in.decode is None:
                        self._send(400, {"error": {"message": "prompt must be a string"}})
                        return
                    body = {**body, "prompt": stand_in.decode(body["prompt"])}
                reply = stand_in.reply(self.path, body)
                if stand_in.token_ids is not None and body.get("return_token_ids"):
                    reply["choices"][0]["token_ids"] = stand_in.token_ids(reply["choices"][0], body)
                if "thinking_budget" not in body:  # not e1's probe
                    stand_in.answered[_call_key(body)] += 1
                self._send(200, reply)

            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def reply(path: str, body: dict) -> dict:
        if path.endswith("/chat/completions"):  # a reasoning parser's split, and its count
            tokens = min(body.get("max_tokens", 16), 6)
            message = {"role": "assistant", "reasoning_content": "a a a", "content": "\\boxed{5}"}
            usage = {
                "prompt_tokens": 9,
                "completion_tokens": tokens,
                "completion_tokens_details": {"reasoning_tokens": 3},
            }
            return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}
        prompt, limit = body["prompt"], body.get("max_tokens", 16)
        if body.get("stop") == [END]:  # thinking: "short" prompts end it after 3 tokens
            natural = "short" in prompt and limit >= 3
            tokens = 3 if natural else limit
            choice = {
                "text": " a" * (tokens - 1 if natural else tokens),
                "finish_reason": "stop" if natural else "length",
                "stop_reason": END if natural else None,
            }
        elif prompt.rstrip().endswith(END) or END in prompt:  # the solution: " 5", "!", EOS
            tokens = min(3, limit)
            choice = {
                "text": " \\boxed{5}"[: 4 * tokens],
                "finish_reason": "stop" if tokens == 3 else "length",
                "stop_reason": None,
            }
        else:  # one call: 3 thinking tokens, the marker, 2 solution tokens and EOS
            tokens = min(6, limit)
            choice = {
                "text": (" a a" + END + " \\boxed{5}") if tokens == 6 else " a" * tokens,
                "finish_reason": "stop" if tokens == 6 else "length",
                "stop_reason": None,
            }
        return {"choices": [{"index": 0, **choice}], "usage": {"prompt_tokens": 9, "completion_tokens": tokens}}


def _call_key(body: dict) -> tuple:
    return (body.get("prompt") or json.dumps(body.get("messages")), "think" if body.get("stop") else "rest")


@pytest.fixture
def stand_in():
    server = StandIn().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from e1.models.tiny import build_tokenizer

    path = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer().save_pretrained(path)
    return str(path)


def _engine(stand_in, tokenizer_dir, modes=("elastic",), **settings):
    options = {"tokenizer": tokenizer_dir, "max_retries": 2, **settings}
    return OpenAIEngine.load(MODEL, ApiSettings(stand_in.url, **options), [Mode.parse(m) for m in modes])


def test_two_calls_make_elastic_on_a_plain_server(stand_in, tokenizer_dir):
    engine = _engine(stand_in, tokenizer_dir, modes=("elastic", "elastic:exit='Stop now.'", "truncate", "none"))
    assert engine.server == PLAIN_SERVER
    # the stand-in refuses a token-id prompt: the run is recorded as not token-exact, and why
    assert not engine.describe()["token_exact"] and "no token-id prompt" in engine.describe()["exactness"]
    assert engine.describe()["methods"] == {
        "elastic": TWO_CALLS,
        "elastic:exit='Stop now.'": TWO_CALLS,
        "truncate": ONE_CALL,
        "none": ONE_CALL,
    }
    sampling = Sampling(temperature=0.6, seed=3)
    prompt = lambda text: build_prompt(engine.tokenizer, text)  # the template opens thinking  # noqa: E731
    short, long_ = engine.generate(
        [prompt("short question"), prompt("long question")], Budget(5, 4), Mode(), sampling, seeds=[1, 2]
    )
    # the short row ended thinking itself after 3 tokens (the marker counted, as in e1's engines);
    # its solution is 3 tokens, the EOS counted: the counts are the replies' usage
    assert (short.think_tokens, short.solve_tokens, short.forced, short.closed, short.finish_reason) == (
        3,
        3,
        False,
        True,
        "stop",
    )
    # the long row was cut at t = 5 and its solution continued after the forced marker
    assert (long_.think_tokens, long_.solve_tokens, long_.forced, long_.closed) == (5, 3, True, True)
    assert long_.solution_text == " \\boxed{5}" and long_.think_text == " a a a a a"
    calls = [body for _, body in stand_in.requests if "long" in body["prompt"]]
    assert [(c["max_tokens"], c.get("stop")) for c in calls] == [(5, [END]), (4, None)]
    assert calls[1]["prompt"] == prompt("long question") + " a" * 5 + END  # prompt + thinking + the forced marker
    assert calls[0]["seed"] != calls[1]["seed"] and calls[0]["temperature"] == 0.6
    exit_row = engine.generate([prompt("long question")], Budget(5, 4), "elastic:exit='Stop now.'", sampling)[0]
    assert stand_in.requests[-1][1]["prompt"].endswith(" a" * 5 + "Stop now." + END) and exit_row.forced


def test_one_call_modes_count_from_usage_and_tokenizer(stand_in, tokenizer_dir):
    engine = _engine(stand_in, tokenizer_dir, modes=("truncate", "none"))
    tokens = engine.tokenizer.encode(" a a" + END, add_special_tokens=False)
    row = engine.generate(["q"], Budget(4, 4), "truncate", Sampling(temperature=0))[0]
    assert stand_in.requests[-1][1]["max_tokens"] == 8  # one budget t + s
    assert (row.think_tokens, row.solve_tokens, row.closed) == (len(tokens), 6 - len(tokens), True)
    cut = engine.generate(["q"], Budget(2, 1), "truncate", Sampling(temperature=0))[0]
    assert (cut.think_tokens, cut.solve_tokens, cut.closed, cut.finish_reason) == (3, 0, False, "length")


def test_what_a_plain_server_cannot_do_is_refused(stand_in, tokenizer_dir):
    with pytest.raises(ConfigError, match="pass --tokenizer"):
        OpenAIEngine.load(MODEL, ApiSettings(stand_in.url), [Mode()])  # chat messages: no forced marker
    with pytest.raises(ConfigError, match="grace"):
        _engine(stand_in, tokenizer_dir, modes=("elastic:grace=4",))
    with pytest.raises(ConfigError, match="trial answers need the model's token probabilities"):
        _engine(stand_in, tokenizer_dir, modes=("early-exit",))
    chat = OpenAIEngine.load(MODEL, ApiSettings(stand_in.url), [Mode("none")])  # counts from reasoning_tokens
    options = PromptOptions(system="Be brief.", template_kwargs='{"enable_thinking": true}')
    row = chat.generate(
        [build_prompt(chat.tokenizer, "q", options=options)], Budget(1, 1), "none", Sampling(max_tokens=50)
    )[0]
    assert (row.think_tokens, row.solve_tokens, row.think_text, row.solution_text) == (3, 3, "a a a", "\\boxed{5}")
    sent = stand_in.requests[-1][1]  # the system prompt and template arguments reach the server's template
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    with pytest.raises(E1Error, match="does not serve 'other'"):
        OpenAIEngine.load("other", ApiSettings(stand_in.url), [Mode("none")])
    with pytest.raises(ConfigError, match="not set"):
        ApiSettings(stand_in.url, api_key_env="E1_TEST_NO_SUCH_KEY").api_key()


def test_429_is_retried_and_500s_fail_clearly(stand_in, tokenizer_dir):
    engine = _engine(stand_in, tokenizer_dir)
    seen = Counter()

    def rate_limited(path, body):
        seen[body.get("prompt")] += 1
        if body.get("prompt") == "short one" and seen["short one"] == 1:
            return 429, {"retry-after-ms": "10"}, b'{"error": {"message": "slow down"}}'
        return None

    stand_in.fault = rate_limited
    row = engine.generate(["short one"], Budget(5, 4), Mode(), Sampling())[0]
    assert seen["short one"] == 2 and row.think_tokens == 3  # retried once, then answered
    stand_in.fault = lambda path, body: (500, {"retry-after-ms": "1"}, b'{"error": {"message": "boom"}}')
    before = len(stand_in.requests)
    with pytest.raises(E1Error, match="prompt 0, sample [01] failed: HTTP 500 from the server: boom"):
        engine.generate(["q"], Budget(5, 4), Mode(), Sampling(), n=2)
    assert len(stand_in.requests) - before == 2 * 3  # each sample: 1 try + 2 retries, then given up


# ---- through e1 eval: errors name the problem, finished samples are kept, a rerun resumes ----------


def _dataset(tmp_path: Path, count: int = 4) -> Path:
    path = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "problem": ("short " if i % 2 else "long ") + f"question {i}", "answer": "5"}
        for i in range(count)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _eval(url: str, tokenizer_dir: str, tmp_path: Path, batch_size: int = 1, **api):
    from e1.eval.run import EvalConfig, evaluate

    settings = ApiSettings(url, tokenizer=tokenizer_dir, max_retries=1, concurrency=2, **api)
    config = EvalConfig(
        model=MODEL,
        datasets=(str(_dataset(tmp_path)),),
        budgets=(Budget(5, 4),),
        n=1,
        sampling=Sampling(temperature=0),
        out=tmp_path / "run",
        batch_size=batch_size,
        engine=EngineSpec(backend="openai"),
        api=settings,
        scoring=ScoringSpec(workers=1),
    )
    return evaluate(config)


def _stored(tmp_path: Path) -> list[str]:
    from e1.store.samples import SampleStore

    return sorted(SampleStore(tmp_path / "run").read()["problem_id"])


def _failing_on(problem: str, status: int, raw: bytes):
    return lambda path, body: (status, {"retry-after-ms": "1"}, raw) if problem in body.get("prompt", "") else None


@pytest.mark.parametrize(
    "status, raw, reason",
    [
        (500, b'{"error": {"message": "boom"}}', "HTTP 500 from the server: boom"),
        (200, b'{"choices": [{"text": "cut', "the reply is not JSON"),
    ],
)
def test_a_failed_request_names_its_problem_and_keeps_finished_samples(
    stand_in, tokenizer_dir, tmp_path, status, raw, reason
):
    stand_in.fault = _failing_on("question 2", status, raw)
    with pytest.raises(E1Error, match=rf"problem p2 \(elastic, t=5 s=4\), sample 0 failed: {reason}"):
        _eval(stand_in.url, tokenizer_dir, tmp_path)
    assert _stored(tmp_path) == ["p0", "p1"]  # the batches before it are kept
    stand_in.fault = lambda path, body: None
    samples, summary = _eval(stand_in.url, tokenizer_dir, tmp_path)
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert max(stand_in.answered.values()) == 1  # no answered request was sent again


def test_a_server_that_dies_mid_run_is_resumed_without_repeating_a_request(
    stand_in, tokenizer_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("E1_TEST_API_KEY", "sk-test-secret")

    def dies(path, body):
        if "question 3" in body.get("prompt", ""):  # the last batch's second problem: the server goes away
            for _ in range(200):  # once the batch's other problem, p2, is answered (its journal has it)
                if any("question 2" in key[0] and key[1] == "rest" for key in stand_in.answered):
                    break
                threading.Event().wait(0.05)
            threading.Thread(target=stand_in.stop).start()
            return "drop"
        return None

    stand_in.fault = dies
    with pytest.raises(E1Error, match="problem p3"):
        _eval(stand_in.url, tokenizer_dir, tmp_path, batch_size=2, api_key_env="E1_TEST_API_KEY")
    assert _stored(tmp_path) == ["p0", "p1"]  # p2 was answered, but its batch (with p3) was not written
    back = StandIn(stand_in.port).start()  # the server comes back on the same address
    try:
        samples, _ = _eval(stand_in.url, tokenizer_dir, tmp_path, batch_size=2, api_key_env="E1_TEST_API_KEY")
    finally:
        back.stop()
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert list(samples["think_tokens"]) == [5, 3, 5, 3] and list(samples["solve_tokens"]) == [3, 3, 3, 3]
    answered = stand_in.answered + back.answered
    assert max(answered.values()) == 1  # p2's replies came from the journal, not from the server again
    assert not any("question 2" in key[0] for key in back.answered)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["api_method"]["methods"] == {"elastic": TWO_CALLS} and config["api_method"]["server"] == PLAIN_SERVER
    from e1.commands.eval import api_line

    assert config["api_method"]["token_exact"] is False  # the stand-in takes no token-id prompt: the summary says so
    assert "NOT token-exact: the server takes no token-id prompt" in api_line(tmp_path / "run")
    assert stand_in.keys == back.keys == {"Bearer sk-test-secret"}  # the key is sent, and only its variable is stored
    assert "sk-test-secret" not in json.dumps(config) and config["api"]["api_key_env"] == "E1_TEST_API_KEY"
    assert not (tmp_path / "run" / "api-replies.jsonl").exists()
    with pytest.raises(ResultsError, match="model_identity|model"):  # another server is another model
        _eval("http://127.0.0.1:9/v1", tokenizer_dir, tmp_path, api_key_env="E1_TEST_API_KEY")


def test_a_sweep_draws_every_cell_on_its_own_behind_an_api(stand_in, tokenizer_dir, tmp_path):
    from e1.eval.run import EvalConfig
    from e1.eval.sweep import SweepConfig, sweep

    grid = EvalConfig(
        model="",
        datasets=(str(_dataset(tmp_path, count=2)),),
        budgets=(Budget(5, 4),),
        modes=(Mode(), Mode("truncate")),
        n=1,
        sampling=Sampling(temperature=0),
        engine=EngineSpec(backend="openai"),
        api=ApiSettings(stand_in.url, tokenizer=tokenizer_dir),
        scoring=ScoringSpec(workers=1),
    )
    samples, _, curves = sweep(SweepConfig(models=(MODEL,), settings=grid, out=tmp_path / "sweep"))
    assert sorted(zip(samples["mode"], samples["problem_id"], samples["think_tokens"])) == [
        ("elastic", "p0", 5),
        ("elastic", "p1", 3),
        ("truncate", "p0", 3),
        ("truncate", "p1", 3),
    ]
    assert json.loads((tmp_path / "sweep" / "config.json").read_text())["share_prefixes"] is False
    assert not any(body.get("max_tokens") == 32768 for _, body in stand_in.requests)  # no unconstrained roots grown


def test_the_api_options_are_checked_before_anything_starts(tmp_path):
    from typer.testing import CliRunner

    from e1.cli.app import app

    def run(*args):
        result = CliRunner().invoke(
            app, ["eval", "--model", MODEL, "--datasets", "x.jsonl", "--out", str(tmp_path / "r"), *args]
        )
        assert isinstance(result.exception, E1Error), result.output  # e1's one-line error, not a traceback
        return str(result.exception)

    assert "--backend openai needs --api-url" in run("--backend", "openai")
    assert "is for --backend openai" in run("--backend", "hf", "--api-url", "http://127.0.0.1:9/v1")
    assert "not an http(s) URL" in run("--backend", "openai", "--api-url", "127.0.0.1:9")
    assert "not an environment variable name" in run(
        "--backend", "openai", "--api-url", "http://x/v1", "--api-key-env", "sk-123"
    )
    assert "--concurrency must be >= 1" in run("--backend", "openai", "--api-url", "http://x/v1", "--concurrency", "0")
    assert "are for --backend openai" in run("--tokenizer", "./tok")


def test_a_server_that_returns_token_ids_is_continued_from_them(stand_in, tokenizer_dir):
    """vLLM returns the ids when asked: the solution call continues from prompt + the row's own ids
    (the forced marker included), so the record is the local engines' (ids, forced mask, counts)."""
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(tokenizer_dir)
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    markers = resolve_markers(tokenizer)
    end, eos = list(markers.end_ids), min(markers.eos_ids)

    def token_ids(choice, body):
        ids = encode(choice["text"])
        return ids + (end if choice.get("stop_reason") == END else [eos] if choice["finish_reason"] == "stop" else [])

    stand_in.token_ids = token_ids  # a server that takes and returns ids, as vLLM does: found by e1's probe at load
    stand_in.decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
    engine = _engine(stand_in, tokenizer_dir, modes=("budget-forcing",))
    assert engine.describe()["token_exact"] and (engine.ids_in, engine.ids_out) == (True, True)
    prompt = build_prompt(engine.tokenizer, "long question")
    row = engine.generate([prompt], Budget(3, 20), "budget-forcing", Sampling(temperature=0))[0]
    newline = list(engine.markers.newline_ids)
    forced = newline + end + newline + list(engine.markers.answer_ids)  # s1 forces "\n", the marker, "\nFinal Answer:"
    thinking, solution = encode(" a a a"), encode(" \\boxed{5}")
    assert stand_in.requests[-1][1]["prompt"] == engine.encode([prompt])[0] + thinking + forced  # ids, not text
    assert row.token_ids == thinking + forced + solution + [eos]
    assert row.forced_mask == [False] * 3 + [True] * len(forced) + [False] * (len(solution) + 1)
    # counted from the ids, as the local engines count (the solution's EOS included)
    assert (row.think_tokens, row.solve_tokens, row.forced, row.finish_reason) == (3, len(solution) + 1, True, "stop")
    assert (row.solution_text, row.forced_text, row.think_text) == (" \\boxed{5}", "\n\nFinal Answer:", " a a a")


def test_a_server_that_takes_ids_but_returns_none_is_sent_ids_and_recorded_inexact(stand_in, tokenizer_dir):
    """A server that takes token-id prompts but returns no ids (SGLang, llama.cpp without e1's fields):
    both calls are sent as ids (e1's prompt ids, then the thinking text tokenised after them), never
    as text the server would tokenise again; the thinking's re-tokenisation makes the run inexact."""
    from e1.engine.hf.hf_engine import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    stand_in.decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
    engine = _engine(stand_in, tokenizer_dir, modes=("elastic",))
    assert (engine.ids_in, engine.ids_out) == (True, False)
    record = engine.describe()
    assert not record["token_exact"] and "re-tokenised" in record["exactness"]
    prompt = build_prompt(tokenizer, "long question")
    row = engine.generate([prompt], Budget(4, 4), Mode(), Sampling(temperature=0))[0]
    think_call, solve_call = [body for _, body in stand_in.requests[-2:]]
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert think_call["prompt"] == prompt_ids
    assert solve_call["prompt"] == prompt_ids + tokenizer.encode(" a" * 4 + END, add_special_tokens=False)
    assert (row.think_tokens, row.forced, row.solution_text) == (4, True, " \\boxed{5}")


def test_nothinking_on_a_plain_server_sends_the_prompt_ending_in_the_box(stand_in, tokenizer_dir):
    from e1.engine import prefilled

    engine = _engine(stand_in, tokenizer_dir, modes=("nothinking",))
    assert engine.describe()["methods"] == {"nothinking": ONE_CALL}
    mode = Mode.parse("nothinking")
    prompt = prefilled(build_prompt(engine.tokenizer, "q"), mode, engine.markers)
    row = engine.generate([prompt], Budget(4, 4), mode, Sampling(temperature=0))[0]
    sent = stand_in.requests[-1][1]
    assert sent["prompt"].endswith("Okay, I think I have finished thinking.\n" + END) and sent["max_tokens"] == 8
    assert (row.think_tokens, row.think_text, row.think_end, row.closed) == (0, "", "prefilled", True)
    with pytest.raises(ConfigError, match="without --tokenizer"):  # chat messages: the server renders the prompt
        OpenAIEngine.load(MODEL, ApiSettings(stand_in.url), [mode])
