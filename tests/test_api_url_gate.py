"""A credential reaches a server only as the key an environment variable holds, never from a URL.

Before, ``--api-url http://user:pass@host/v1`` was accepted and httpx sent its userinfo as HTTP Basic
auth, in place of the key's ``Authorization: Bearer``. Every server URL a user gives (``--api-url``,
elo's ``--api-url``, ``HF_ENDPOINT``) now passes one gate (``e1/errors.py: server_url``): a URL with
userinfo is refused in one line that never shows the password.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from e1.errors import ConfigError
from tests.serving import free_port

KEY = "sk-gate-key-Qw7Er8Ty9"
ODD = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(list(":@/%#?[]\\ !$&'()*+,;=")),
    max_size=12,
)


class Recorder:
    """A stand-in OpenAI-compatible server on 127.0.0.1 that records every request's Authorization header."""

    def __init__(self):
        self.seen: list[str | None] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.seen.append(self.headers.get("authorization"))
                body = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def recorder():
    server = Recorder()
    yield server
    server.stop()


def _userinfo(user: str, password: str | None, encode: bool) -> str:
    user = quote(user, safe="") if encode else user
    if password is None:
        return f"{user}@"
    return f"{user}:{quote(password, safe='') if encode else password}@"


def _no_password(line: str, password: str | None, rest: str) -> None:
    """``line`` is one line without ``password`` (as given or percent-encoded), where it could be told apart
    (6 characters or more, and not also spelled by the rest of the URL)."""
    assert "\n" not in line
    if password and len(password) >= 6 and password not in rest and quote(password, safe="") not in rest:
        assert password not in line and quote(password, safe="") not in line, line


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    user=ODD,
    password=st.none() | ODD,
    encode=st.booleans(),
    with_info=st.booleans(),
    path=st.sampled_from(["/v1", "/v1@x", "/v1/@me:pw", "/@", "/v1?x=@y", "/v1#@z"]),
)
@example(user="[/", password=None, encode=False, with_info=True, path="/v1")  # a host no client can use
@example(user="\u00a1/", password=None, encode=False, with_info=True, path="/v1")
@example(user=" /", password=None, encode=False, with_info=True, path="/v1")
@example(user="u", password=None, encode=False, with_info=False, path="/v1@x")  # no userinfo: accepted
@example(user="", password="00000<", encode=False, with_info=True, path="/v1")  # '<' ends a URL in text
@example(user="/", password="00000<", encode=False, with_info=True, path="/v1")
@example(user="\u00d7=\u00e1\u00c1000\u00e3/", password="00000<", encode=False, with_info=True, path="/v1")
def test_no_basic_auth_ever_reaches_the_server_from_an_api_url(
    recorder, monkeypatch, user, password, encode, with_info, path
):
    """Generated URLs to a stand-in on 127.0.0.1: refused in one line without the password when they carry userinfo
    (odd characters, percent-encoded or not, '@' in the path too); accepted ones reach it with the key, never Basic."""
    from e1.engine.api.openai_engine import openai_client
    from e1.engine.api.settings import ApiSettings

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    info = _userinfo(user, password, encode) if with_info else ""
    url = f"http://{info}127.0.0.1:{recorder.port}{path}"
    try:
        api = ApiSettings(url, request_timeout_s=10, max_retries=0)
    except ConfigError as err:
        # refused only where the authority is not the plain host: userinfo, or a user name with '/' in it that
        # leaves a host no client can use ("http://[/@…", "http:// /@…", "http://¡/@…": the '@' is the path's)
        assert url.split("/")[2] != f"127.0.0.1:{recorder.port}", url
        _no_password(str(err), password, f"http://127.0.0.1:{recorder.port}{path}")
        return
    before = len(recorder.seen)
    try:
        openai_client(api).models.list()
    except Exception:
        pass  # an odd path the stand-in does not serve: what matters is what arrived
    for header in recorder.seen[before:]:
        assert header == f"Bearer {KEY}", header  # the key, and only the key


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    user=ODD.filter(bool),
    password=st.none() | ODD,
    encode=st.booleans(),
    host=st.sampled_from(["127.0.0.1:8000", "[::1]:8000", "[2001:db8::7]", "api.example.com", "localhost"]),
    scheme=st.sampled_from(["http", "https", "HTTPS"]),
)
@example(user="0", password="0000['", encode=False, host="127.0.0.1:8000", scheme="http")  # urllib cannot read it
@example(
    user="u", password="pw'xyzzy", encode=False, host="api.example.com", scheme="https"
)  # a quote ends a URL in text
def test_every_server_url_gate_refuses_userinfo_in_one_line_without_the_password(user, password, encode, host, scheme):
    """--api-url (openai, gemini, anthropic; the vendors' base-URL variables), elo's --api-url: one gate, one line,
    no password."""
    from e1.engine.api.settings import ApiSettings
    from e1.report.elo import FetchConfig

    raw = not encode and not any(c in "/?#" or c.isspace() for c in user + (password or ""))  # (else no userinfo)
    url = f"{scheme}://{_userinfo(user, password, not raw)}{host}/v1"

    def vendor_env(backend: str, variable: str):  # the base URL a vendor's SDK reads when --api-url is not given
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(variable, url)
            ApiSettings(None, backend=backend)

    for make in (
        lambda: ApiSettings(url),
        lambda: ApiSettings(url, backend="anthropic"),
        lambda: vendor_env("anthropic", "ANTHROPIC_BASE_URL"),
        lambda: vendor_env("gemini", "GOOGLE_GEMINI_BASE_URL"),
        lambda: FetchConfig(base_url=url),
    ):
        with pytest.raises(ConfigError) as caught:
            make()
        _no_password(str(caught.value), password, url.replace(password or "", "", 1))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://[::1]:8443/v1/@x", "HTTP://host/v1?a=@b"])
def test_a_url_without_userinfo_passes_the_gate(url):
    from e1.engine.api.settings import ApiSettings

    assert ApiSettings(url).url == url


def test_a_hub_endpoint_with_userinfo_is_refused_before_any_request(tmp_path, monkeypatch):
    """HF_ENDPOINT=http://me:TOKEN@host: refused in one line by --push, before it talks to the hub."""
    from huggingface_hub import constants

    from e1.report.push import push

    token = "hf_gateTokenAbCdEf123456"
    monkeypatch.setattr(constants, "ENDPOINT", f"http://me:{token}@127.0.0.1:9")
    folder = tmp_path / "run" / ".eval_results"
    folder.mkdir(parents=True)
    (folder / "a.yaml").write_text("x: 1\n")
    with pytest.raises(ConfigError) as caught:
        push([folder / "a.yaml"], "me/model", deadline_s=5)
    assert "HF_ENDPOINT" in str(caught.value) and token not in str(caught.value)


HOSTS = st.sampled_from(["127.0.0.1", "h", "a..b", "", ".", "x" * 64, "bücher.de", "☃.net", "[::1]", "xn--zz", "-a-"])
PORTS = st.sampled_from(["", ":", ":80", ":abc", ":99999", ": 1", ":-1", ":8000"])


@settings(max_examples=120, deadline=None)
@given(scheme=st.sampled_from(["http", "HTTPS"]), host=HOSTS, port=PORTS, path=st.sampled_from(["", "/v1", "?x=1"]))
def test_a_url_the_gate_passes_is_one_httpx_can_reach(scheme, host, port, path):
    """Every URL the gate passes has a host and port httpx reads and a socket can encode (IDNA), so a bad one
    is one ConfigError line at the flag, never an 'InvalidURL ... please report it' at the first request."""
    import httpx

    from e1.errors import server_url

    url = f"{scheme}://{host}{port}{path}"
    try:
        server_url(url, "--api-url", "http://127.0.0.1:8000/v1")
    except ConfigError as err:
        assert "\n" not in str(err) and "--api-url" in str(err)
        return
    parsed = httpx.URL(url)  # no InvalidURL
    assert parsed.host and parsed.host.encode("idna"), url  # a host getaddrinfo takes
