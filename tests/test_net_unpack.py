"""A compressed reply is bounded as it unpacks: e1's one bounded client (:func:`e1.engine.bounded_client`)
counts the unpacked bytes against :data:`e1.engine.api.replies.MAX_REPLY_BYTES`, so a gzip bomb (a few
hundred KiB that unpack to hundreds of MiB) is cut at the cap, never held; an honest gzip or deflate
reply reads as sent; an encoding e1 did not ask for is refused. Stand-in servers on 127.0.0.1 only.
"""

from __future__ import annotations

import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.engine.api.replies import MAX_REPLY_BYTES, RequestError


def _packed(body: bytes, encoding: str, times: int = 1) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    return b"".join(
        [packer.compress(body) for _ in range(1)]
        + [packer.compress(b" " * 2**20) for _ in range(times)]
        + [packer.flush()]
    )


class Server:
    """Answers every POST with ``payload`` sent as ``encoding``; each answer ends within a second."""

    def __init__(self, payload: bytes, encoding: str):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-encoding", encoding)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _call(url: str) -> dict:
    import openai

    from e1.engine.api.client import Caller
    from e1.engine.api.replies import bounded_client

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, http_client=bounded_client(10.0))
    return Caller(client, deadline_s=10.0).call("completions", {"model": "m", "prompt": "p", "max_tokens": 4})


REPLY = b'{"id":"x","choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"completion_tokens":1}}'


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(encoding=st.sampled_from(["gzip", "deflate"]), mib=st.integers(MAX_REPLY_BYTES // 2**20 + 1, 64))
def test_a_compressed_reply_past_the_cap_is_cut_as_it_unpacks(encoding, mib):
    import tracemalloc

    import openai  # noqa: F401  (imported before memory is traced)

    from e1.engine.api import client  # noqa: F401

    bomb = _packed(b'{"id":"x","choices":[{"index":0,"text":"', encoding, times=mib)
    assert len(bomb) < MAX_REPLY_BYTES // 8  # small on the wire: only its unpacked size is past the cap
    tracemalloc.start()
    try:
        with Server(bomb, encoding) as server, pytest.raises(RequestError, match="larger than"):
            _call(server.url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_REPLY_BYTES


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
def test_an_honest_compressed_reply_reads_as_sent(encoding):
    payload = REPLY if encoding == "identity" else _packed(REPLY, encoding, times=0)
    with Server(payload, encoding) as server:
        reply = _call(server.url)
    assert reply.choices[0].text == "ok"


def test_an_encoding_e1_did_not_ask_for_is_refused():
    with Server(b"\x00" * 64, "br") as server, pytest.raises(RequestError, match="br"):
        _call(server.url)


def _header_drip(every_s: float, for_s: float):
    """A server on 127.0.0.1 that sends its status line, then one byte of a header every ``every_s``
    (each read waits less than any per-read timeout) for ``for_s`` seconds; it stops by itself."""
    import socket
    import time

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.settimeout(for_s + 5)

    def serve():
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nx-drip: ")
                end = time.monotonic() + for_s
                while time.monotonic() < end:
                    conn.sendall(b"x")
                    time.sleep(every_s)
            except OSError:  # e1 hung up
                pass
        sock.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(every_s=st.sampled_from([0.05, 0.2, 0.5]), deadline_s=st.sampled_from([0.8, 1.5]))
def test_a_reply_whose_headers_drip_ends_within_the_deadline(every_s, deadline_s):
    import time

    from e1.engine.api.replies import bounded_client

    url = _header_drip(every_s, for_s=deadline_s * 5)
    started = time.monotonic()
    with bounded_client(deadline_s) as client, pytest.raises(Exception) as caught:
        client.post(url + "/completions", json={})
    took = time.monotonic() - started
    assert "Timeout" in type(caught.value).__name__ and took < deadline_s + 0.5, took


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(every_s=st.sampled_from([0.05, 0.3]), timeout_s=st.sampled_from([0.8, 1.5]))
def test_the_codeforces_client_ends_within_its_timeout_when_the_headers_drip(tmp_path_factory, every_s, timeout_s):
    import time
    import urllib.request

    from e1.errors import DataError
    from e1.report.elo import FetchConfig, fetch_contests

    url = _header_drip(every_s, for_s=timeout_s * 5)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # never a proxy for 127.0.0.1
    config = FetchConfig(base_url=url + "/api", retries=0, timeout_s=timeout_s, min_interval_s=0)
    started = time.monotonic()
    with pytest.raises(DataError) as caught:
        fetch_contests([1971], tmp_path_factory.mktemp("cf"), config=config, opener=direct, sleep=lambda s: None)
    assert time.monotonic() - started < timeout_s + 0.5 and "\n" not in str(caught.value)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    answer=st.one_of(
        st.integers(3_000, 50_000).map(lambda d: b"[" * d + b"]" * d),
        st.integers(4_400, 9_000).map(lambda n: b'{"status": "OK", "result": ' + b"7" * n + b"}"),
    )
)
def test_a_codeforces_answer_past_what_json_reads_is_one_line(tmp_path_factory, answer):
    import io

    from e1.errors import DataError
    from e1.report.elo import FetchConfig, fetch_contests

    class Answer(io.BytesIO):
        headers: dict = {}

    config = FetchConfig(base_url="http://127.0.0.1:9/api", retries=0, timeout_s=2, min_interval_s=0)
    with pytest.raises(DataError) as caught:
        fetch_contests(
            [1971],
            tmp_path_factory.mktemp("cf"),
            config=config,
            opener=lambda request, timeout: Answer(answer),
            sleep=lambda s: None,
        )
    assert "\n" not in str(caught.value) and "JSON" in str(caught.value)
