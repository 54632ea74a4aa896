"""Every outside server e1 talks to is bounded, and no secret reaches a line e1 prints.

``e1 export --push`` against a stand-in hub on 127.0.0.1 that stays silent, drips its reply a byte at
a time, sends an endless or a huge body, or refuses with a 401 that echoes the token: the push ends
within its deadline (:data:`e1.report.push.HUB_DEADLINE_S`, e1's one bounded client:
:func:`e1.engine.bounded_client`) with one line, and the Hugging Face token (``HF_TOKEN`` or the login
file's) is in no line printed. Each stand-in behaviour is bounded too, so the tests stop by themselves.
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import ConfigError

DEADLINE_S = 1.5
TOKEN = "hf_StandInLoginToken0123456789"


class Hub:
    """A hub on loopback whose every request gets ``behaviour(handler)``; each behaviour ends within seconds."""

    def __init__(self, behaviour):
        hub, self.requests = self, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                hub.requests.append((self.command, self.path))
                try:
                    behaviour(self)
                except OSError:  # e1 cut the reply
                    pass
                self.close_connection = True

            do_GET = do_POST = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _for(seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        yield


def silent(handler):
    for _ in _for(6):
        time.sleep(0.05)


def drip(every_s: float):
    def write(handler):
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(10**6))
        handler.end_headers()
        for _ in _for(6):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(every_s)

    return write


def endless(chunk_bytes: int):
    def write(handler):
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.end_headers()
        handler.wfile.write(b'{"url": "')
        for _ in _for(6):
            handler.wfile.write(b"a" * chunk_bytes)

    return write


def huge(handler):
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(1 << 31))
    handler.end_headers()
    handler.wfile.write(b"{")


def headers_then_silence(handler):
    handler.send_response(200)
    handler.send_header("content-length", "100")
    handler.end_headers()
    silent(handler)


BEHAVIOURS = st.one_of(
    st.just(silent),
    st.just(huge),
    st.just(headers_then_silence),
    st.floats(0.05, 0.4).map(drip),
    st.sampled_from([1 << 10, 1 << 16, 1 << 20]).map(endless),
)


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """In-process huggingface_hub pointed at a stand-in (its constants are read at import), online, logged in by file."""
    from huggingface_hub import HfApi, constants  # noqa: F401  (imported here: the push's time is its own)

    from e1.engine import bounded_client  # noqa: F401  (pydantic's import, too)

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(token_file))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("e1.report.push.HUB_DEADLINE_S", DEADLINE_S)
    results = tmp_path / "export" / ".eval_results"
    results.mkdir(parents=True)
    (results / "math500.yaml").write_text("- dataset: {id: HuggingFaceH4/MATH-500}\n  value: 0.5\n")
    return lambda url: monkeypatch.setattr(constants, "ENDPOINT", url), [results / "math500.yaml"]


def _push_bounded(written, wait_s: float):
    """push() in a thread the test gives up on after ``wait_s`` (the old push waited forever)."""
    from e1.report import push_results

    outcome = {}

    def run():
        try:
            outcome["value"] = push_results(written, "my-org/evals")
        except Exception as err:  # noqa: BLE001  (what the test inspects)
            outcome["error"] = err

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(wait_s)
    assert not worker.is_alive(), f"the push did not end within {wait_s} s"
    return outcome


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(behaviour=BEHAVIOURS)
def test_a_hub_that_drips_stays_silent_or_never_ends_its_body_gets_one_line_within_the_deadline(hub_env, behaviour):
    point, written = hub_env
    hub = Hub(behaviour)
    point(hub.url)
    tracemalloc.start()
    started = time.monotonic()
    try:
        outcome = _push_bounded(written, DEADLINE_S + 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        hub.stop()
    assert time.monotonic() - started < DEADLINE_S + 1.5
    error = outcome.get("error")
    assert isinstance(error, ConfigError) and str(error).startswith("cannot push to my-org/evals")
    assert "\n" not in str(error) and peak < 64 << 20  # cut at the cap, never held whole


def test_the_login_files_token_is_never_printed_from_a_401_or_a_commit_url(hub_env):
    point, written = hub_env
    echoed = {"error": f"Invalid user token {TOKEN} in POST {'/api/repos/create'}"}  # the request line, echoed

    def refuse(handler):
        raw = json.dumps(echoed).encode()
        handler.send_response(401)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        handler.send_header("x-error-message", echoed["error"])
        handler.end_headers()
        handler.wfile.write(raw)

    hub = Hub(refuse)
    try:
        point(hub.url)
        outcome = _push_bounded(written, DEADLINE_S + 3)
        point(hub.url.replace("http://", f"http://me:{TOKEN}@"))  # HF_ENDPOINT with the token in it: refused
        asked = len(hub.requests)
        refused = _push_bounded(written, DEADLINE_S + 3)
    finally:
        hub.stop()
    for error in (outcome.get("error"), refused.get("error")):
        assert isinstance(error, ConfigError) and TOKEN not in str(error) and "\n" not in str(error)
    assert hub.requests and len(hub.requests) == asked  # the 401 was asked for; the URL with the token never sent
    assert "HF_ENDPOINT" in str(refused["error"])


def test_a_commit_url_that_carries_the_token_is_printed_masked(hub_env, monkeypatch):
    """A hub (HF_ENDPOINT) whose commit URL carries the token, in its query or its userinfo: printed masked."""
    from tests.test_export import HubStandIn

    point, written = hub_env
    hub = HubStandIn()
    point(hub.url)
    hub.url = hub.url.replace("http://", f"http://me:{TOKEN}@")  # what its replies' URLs are built from
    outcome = _push_bounded(written, 30)
    hub.server.shutdown()
    assert "error" not in outcome, outcome
    assert outcome["value"].startswith("http://***@127.0.0.1") and TOKEN not in outcome["value"]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(behaviour=BEHAVIOURS)
def test_the_codeforces_client_ends_within_its_timeout_whatever_the_server_sends(tmp_path, monkeypatch, behaviour):
    """`e1 elo fetch`'s client: each answer read whole within --timeout and a size cap, or one DataError."""
    import urllib.request

    from e1.errors import DataError
    from e1.report.elo import FetchConfig, fetch_contests

    monkeypatch.setattr("e1.report.elo.MAX_ANSWER_BYTES", 8 << 20)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # never a proxy for 127.0.0.1
    server = Hub(behaviour)
    config = FetchConfig(base_url=server.url + "/api", retries=0, timeout_s=DEADLINE_S, min_interval_s=0)
    started = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as failed:
            fetch_contests([1971], tmp_path / "cf", config=config, opener=direct, sleep=lambda s: None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.stop()
    assert time.monotonic() - started < 2 * DEADLINE_S + 1.5 and "\n" not in str(failed.value) and peak < 64 << 20
