"""e1's bounded client honours HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY exactly as httpx's own client
does, and its deadline and size cap hold through a proxy.

Before, the bounded client (a client with a transport of its own) ignored every proxy variable, unlike the
SDKs it replaces: a user behind a proxy could not reach a server, undocumented. The stand-in forward proxy
on 127.0.0.1 answers, drips its status line or body, stays silent, or sends an endless body; the request
ends within its deadline with one error either way, and memory stays bounded.
"""

from __future__ import annotations

import time
import tracemalloc

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.engine.api.replies import bounded_client
from tests.test_net_bounds import BEHAVIOURS, Hub

DEADLINE_S = 1.0
KEY = "sk-proxy-key-Hh5Gg6Ff7Dd8"
VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")
TARGET = "http://api.e1-proxy-test.invalid/v1/models"  # a name only the proxy can reach


@pytest.fixture
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _via(client: httpx.Client, url: str):
    """The proxy (scheme, host, port) a client sends ``url`` through, or None (direct)."""
    transport = client._transport_for_url(httpx.URL(url))
    pool = getattr(transport, "inner", transport)._pool
    proxy = getattr(pool, "_proxy_url", None)
    return None if proxy is None else (proxy.scheme, proxy.host, proxy.port)


HOSTS = st.sampled_from(["api.example.com", "example.com", "127.0.0.1", "localhost", "[::1]", "10.1.2.3", "hub.local"])
NO_PROXY = st.lists(
    st.sampled_from(["example.com", ".example.com", "localhost", "127.0.0.1", "::1", "*", "hub.local", "", " x.org "]),
    max_size=3,
).map(",".join)
PROXIES = st.none() | st.sampled_from(["http://127.0.0.1:3128", "proxy.local:8080", "https://p.example:443"])


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    http=PROXIES,
    https=PROXIES,
    every=PROXIES,
    no_proxy=st.none() | NO_PROXY,
    lower=st.booleans(),
    host=HOSTS,
    scheme=st.sampled_from(["http", "https"]),
)
def test_proxies_are_taken_from_the_environment_exactly_as_httpx_takes_them(
    clean_env, http, https, every, no_proxy, lower, host, scheme
):
    values = {"HTTP_PROXY": http, "HTTPS_PROXY": https, "ALL_PROXY": every, "NO_PROXY": no_proxy}
    for name, value in values.items():
        if value is not None:
            clean_env.setenv(name.lower() if lower else name, value)
    url = f"{scheme}://{host}/v1/models"
    assert _via(bounded_client(5.0), url) == _via(httpx.Client(), url)


class ForwardProxy(Hub):
    """A forward proxy on 127.0.0.1 (a :class:`Hub` whose requests arrive in absolute form) that also
    records each request's headers and answers CONNECT with ``connect``."""

    def __init__(self, behaviour, connect=None):
        self.headers: list[dict] = []

        def recorded(handler):
            self.headers.append(dict(handler.headers))
            (connect if handler.command == "CONNECT" and connect else behaviour)(handler)

        super().__init__(recorded)
        handler = self.server.RequestHandlerClass
        handler.do_CONNECT = handler.do_GET


def answer(handler):
    body = b'{"object": "list", "data": []}'
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def status_drip(handler):
    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}":
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.2)


def test_a_request_goes_through_the_proxy_and_no_proxy_sends_it_direct(clean_env):
    proxy = ForwardProxy(answer)
    try:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        reply = bounded_client(5.0).get(TARGET, headers={"authorization": f"Bearer {KEY}"})
        assert reply.json() == {"object": "list", "data": []}
        assert proxy.requests == [("GET", TARGET)]  # the absolute form a forward proxy is sent
        clean_env.setenv("NO_PROXY", ".e1-proxy-test.invalid")
        with pytest.raises(httpx.ConnectError):  # direct: the name resolves nowhere
            bounded_client(5.0).get(TARGET)
        assert len(proxy.requests) == 1
    finally:
        proxy.stop()


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(behaviour=BEHAVIOURS | st.just(status_drip), secure=st.booleans())
def test_the_deadline_and_the_size_cap_hold_through_a_proxy(clean_env, behaviour, secure):
    """A proxy that drips (its status line or its body), stays silent or never ends its body: the request
    ends within its deadline, with one error, its memory bounded; over https the proxy's CONNECT reply is
    what drips, and the proxy never sees the key (it rides inside the tunnel)."""
    proxy = ForwardProxy(behaviour, connect=behaviour)
    clean_env.setenv("HTTPS_PROXY" if secure else "HTTP_PROXY", proxy.url)
    client = bounded_client(DEADLINE_S, max_bytes=1 << 20)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(httpx.TransportError) as caught:
            client.get(TARGET.replace("http://", "https://") if secure else TARGET, headers={"x-api-key": KEY})
        took = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        proxy.stop()
    assert took < DEADLINE_S + 1.0, (behaviour, took)
    assert peak < 32 << 20 and KEY not in str(caught.value)
    assert proxy.requests  # it went through the proxy
    if secure:
        assert proxy.requests[0][0] == "CONNECT" and all(KEY not in str(h) for h in proxy.headers)


def test_a_proxy_httpx_cannot_use_is_one_line_with_its_password_masked(clean_env):
    from e1.errors import ConfigError

    clean_env.setenv("ALL_PROXY", "ftp://me:proxy-Secret-9876@127.0.0.1:21")
    with pytest.raises(ConfigError) as caught:
        bounded_client(5.0)
    line = str(caught.value)
    assert "proxy-Secret-9876" not in line and "\n" not in line and "ALL_PROXY" in line
