"""Red-team tests of the secret gates (``e1/errors.py``): every server URL a user gives passes ``server_url``, a
URL e1 quotes is shown by ``shown_url``, a proxy's error line masks what its writer meant as credentials.

What they found (each failed before its fix): an '@' look-alike (a full-width '＠', which urllib reads as '@')
left a refused URL's password printed; ``HF_ENDPOINT`` passed the gate only for ``--push`` (a tokenizer or
dataset read by hub id sent its userinfo, and transformers' "couldn't connect to 'http://me:pw<x@…'" line printed
it); a proxy's line quoted the proxy as text and httpx's "Invalid port: 'pw'" as is; an accepted URL's query
value holding a quote or a space was printed from there on in "cannot reach URL" lines.
"""

from __future__ import annotations

import sys
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from e1.errors import ConfigError

ATS = ["@", "\uff20", "\ufe6b"]  # '@' and the look-alikes NFKC reads as '@'
ODD = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
    | st.sampled_from(list(":/%#?[]\\ !$&'\"()*+,;=<>`{}|^~\t") + ATS),
    max_size=12,
)
PASSWORDS = ODD.filter(lambda p: len(p.strip()) >= 6)
HOSTS = ["127.0.0.1:8000", "[::1]:8000", "api.example.com", "", "[", "\u00a1", "h\uff20x"]
PATHS = ["", "/v1", "/v1?x=1", "/v1#f", "/v1@x", "?q='@'"]


def _clean(line: str, password: str, fixed: str) -> None:
    """``line`` is one line without ``password`` (as written or percent-encoded), where it can be told apart: not
    also spelled by what the line says anyway (``fixed``: the URL without its password, the flag, the example)."""
    assert "\n" not in line
    for form in {password, quote(password, safe="")}:
        if form not in fixed and form.strip() == form:
            assert form not in line, line


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head=st.sampled_from(
        [
            "",
            "http://",
            "https://",
            "HTTP://",
            "http:/",
            "http:",
            "ftp://",
            "http:// ",
            "//",
            "x y://",
            'x"y://',
            "http:\\\\",
        ]
    ),
    user=ODD,
    password=PASSWORDS,
    at=st.sampled_from(ATS),
    host=st.sampled_from(HOSTS),
    path=st.sampled_from(PATHS),
)
@example(head="http://", user="me", password="hunter2secret", at="\uff20", host="api.example.com", path="/v1")
@example(head="http://", user="", password="00000<", at="\ufe6b", host="127.0.0.1:8000", path="")
@example(head="http://", user="", password="00000<", at="@", host="127.0.0.1:8000", path="/v1")  # '<' ends text URLs
@example(head="", user="me", password='pw"<>xy', at="@", host="api.example.com", path="/v1")
@example(head="http://", user="", password="00000#", at="@", host="127.0.0.1:8000", path="")  # no userinfo to a parser
@example(head="", user="", password="00000#", at="@", host="127.0.0.1:8000", path="")
@example(head="http://", user="0", password="00000/", at="@", host="127.0.0.1:8000", path="")  # host "0": passes
def test_the_gate_refuses_userinfo_in_one_line_without_the_password_and_passes_no_userinfo(
    head, user, password, at, host, path
):
    """Any string: the gate either refuses it in one line without what was written as its password (whatever the
    '@' or look-alike, quotes, '<', spaces, IPv6 brackets, no scheme, odd schemes), or passes a URL in which neither
    urllib nor httpx (the client of every request) reads userinfo, so no Basic auth is ever sent."""
    from urllib.parse import urlsplit

    import httpx

    from e1.errors import server_url

    url = f"{head}{user}:{password}{at}{host}{path}"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("e1.errors._registered", set())  # what an earlier example registered masks nothing here
            server_url(url, "--api-url", "http://127.0.0.1:8000/v1")
    except ConfigError as err:
        _clean(str(err), password, f"{head}{user}:{at}{host}{path} --api-url http://127.0.0.1:8000/v1")
        return
    parts = urlsplit(url)
    assert parts.username is None and parts.password is None, url
    assert httpx.URL(url).userinfo == b"", url
    if at == "@":  # passed with a plain '@': only where a '/', '?' or '#' ends the authority before it
        assert any(c in "/?#" for c in user + password), url


def _eval_args(url: str, tmp_path) -> list[str]:
    data = tmp_path / "d.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    return [
        *("e1", "eval", "--backend", "openai", "--api-url", url, "--model", "m", "--mode", "none"),
        *("--think", "8", "--solve", "8", "--datasets", str(data), "--out", str(tmp_path / "run")),
    ]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    password=PASSWORDS.filter(lambda p: "\x00" not in p),
    at=st.sampled_from(ATS),
    where=st.sampled_from(["eval", "elo", "HF_ENDPOINT"]),
)
@example(password="hunter2<x", at="@", where="HF_ENDPOINT")
@example(password="hunter2secret", at="\uff20", where="eval")
def test_every_server_url_the_cli_takes_is_refused_in_one_line_without_its_password(
    tmp_path, capsys, password, at, where
):
    """`e1 eval --api-url`, `e1 elo fetch --api-url` and HF_ENDPOINT (read by the hub's libraries for any hub id,
    not only by --push) as a user gives them: one line on stderr naming the flag, no password, no request."""
    from e1.cli.app import main
    from e1.errors import server_url

    url = f"http://me:{password}{at}127.0.0.1:9/v1"
    try:  # passed only where a '/', '?' or '#' ends the authority first ("me:00?0@…": host me, port 00), so no
        server_url(url, "--api-url", "http://127.0.0.1:8000/v1")  # parser reads userinfo (the first test's concern)
        return
    except ConfigError:
        pass
    args = {
        "eval": _eval_args(url, tmp_path),
        "elo": ["e1", "elo", "fetch", "--contests", "1971", "--out", str(tmp_path / "cf"), "--api-url", url],
        "HF_ENDPOINT": ["e1", "data", "prepare", "gsm8k"],
    }[where]
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exited:
        patch.setattr("e1.errors._registered", set())  # what an earlier example registered masks nothing here
        patch.setenv("HF_ENDPOINT", url if where == "HF_ENDPOINT" else "")
        patch.setattr(sys, "argv", args)
        main()
    err = capsys.readouterr().err
    assert exited.value.code != 0 and err.count("\n") == 1, err
    assert ("--api-url" if where != "HF_ENDPOINT" else "HF_ENDPOINT") in err, err
    assert "holds credentials" not in err or where != "HF_ENDPOINT" or "HF_TOKEN" in err, err  # ("token: X" masked)
    _clean(err.strip(), password, f"http://me:{at}127.0.0.1:9/v1 {' '.join(arg for arg in args if arg != url)}")


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "ftp", "socks9"]),
    password=PASSWORDS,
    host=st.sampled_from(["proxy:3128", "proxy:1", "[::1", "[::1]:8080", "p\uff20x:1"]),
)
@example(scheme="http", password="hunter2#x", host="proxy:1")  # httpx: "Invalid port: 'hunter2'"
@example(scheme="http", password="secretpw/x", host="proxy:1")
@example(scheme="ftp", password="pw<xyzz", host="proxy:3128")  # '<' ends a URL in text
def test_a_proxy_e1_cannot_use_is_one_line_without_its_password(scheme, password, host):
    """HTTPS_PROXY with credentials (the proxy's own, which e1 sends it): a proxy httpx refuses is one line that
    shows neither the password nor a piece of it httpx quoted."""
    from e1.engine.api.replies import bounded_client

    proxy = f"{scheme}://me:{password}@{host}"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("e1.errors._registered", set())  # what an earlier example registered masks nothing here
            patch.setenv("HTTPS_PROXY", proxy)
            bounded_client(5.0).close()
    except ConfigError as err:
        line = str(err)
        _clean(line, password, f"{scheme}://me:@{host} HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY")
        for piece in password.replace("?", "#").replace("/", "#").split("#"):  # what httpx may quote alone
            if len(piece) >= 6 and piece not in f"{scheme}://me:@{host} HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY":
                assert piece not in line, line


@settings(max_examples=40, deadline=None)
@given(
    value=st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), min_size=8, max_size=24).filter(
        lambda v: not set(v) & set("&#;") and v.strip() == v
    ),
    name=st.sampled_from(["key", "x", "api-version", "sig"]),
    where=st.sampled_from(["?", "#"]),
)
@example(value='ab"cdSECRETQRS', name="x", where="?")
@example(value="ab cdSECRETQRS", name="x", where="?")
def test_an_accepted_urls_query_value_is_never_printed_whatever_it_holds(value, name, where):
    """An accepted URL's query or fragment value (a key passed as ``?key=``) holding a quote, '<' or a space, which
    end a URL in text: every line that quotes the URL (a connection error, a mode it cannot run, config.json's url)
    masks all of it."""
    from e1.errors import E1Error, redact, server_url

    url = f"http://127.0.0.1:9/v1{where}{name}={value}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())  # what an earlier example registered masks nothing here
        try:
            server_url(url, "--api-url", "http://127.0.0.1:8000/v1")
        except ConfigError:
            return  # (not an accepted URL: the refusal is the other tests' concern)
        lines = [str(E1Error(f"cannot reach {url}: Connection error.")), redact(url), redact(f"'{url}'")]
    if value not in f"http://127.0.0.1:9/v1{where}{name}= cannot reach Connection error.":
        assert not any(value in line for line in lines), lines


@settings(max_examples=80, deadline=None)
@given(
    key=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs")), min_size=8, max_size=24).filter(
        lambda k: "*" not in k
    ),
    ensure_ascii=st.booleans(),
    slash=st.booleans(),
)
@example(key="sk-abc/def+ghi=jk", ensure_ascii=True, slash=True)  # the '\/' a PHP-style encoder writes
@example(key='sk-quote"d\\key', ensure_ascii=True, slash=False)
@example(key="sk-caf\u00e9-key-1", ensure_ascii=True, slash=False)
def test_a_key_a_server_echoes_json_escaped_in_a_raw_body_is_masked(key, ensure_ascii, slash):
    """OPENAI_API_KEY echoed in a reply body quoted raw (not valid JSON, so no SDK decoded it): JSON-escaped
    ('\\"', '\\uXXXX', '\\/'), it is masked in e1's line as it is when echoed plain."""
    import json

    from e1.errors import E1Error

    body = json.dumps({"error": f"invalid key {key}"}, ensure_ascii=ensure_ascii)
    body = body.replace("/", "\\/") if slash else body
    echoed = body[len('{"error": "invalid key ') : -2]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())
        patch.setenv("OPENAI_API_KEY", key)
        line = str(E1Error(f"the server refused e1's key: 401 {body[:-1]}"))  # cut: no longer JSON
    assert echoed not in line and key not in line, line


@pytest.mark.skipif(sys.version_info < (3, 11), reason="notes and exception groups are Python 3.11's")
@pytest.mark.parametrize("how", ["note", "group", "note-in-cause"])
def test_a_debug_traceback_masks_a_key_in_a_note_or_an_exception_group(monkeypatch, how):
    """E1_DEBUG=1 prints an exception's notes (``add_note``) and every exception of a group (asyncio's TaskGroup
    raises one): a key a server echoed there is masked as in the one-line error."""
    import traceback

    import e1.cli.app as cli

    key = "sk-debug-note-Zx9Yw8Vu7"

    def app(prog_name):
        echoed = RuntimeError(f"401: invalid key {key}")
        if how == "group":
            raise ExceptionGroup("unhandled errors in a TaskGroup", [echoed])  # noqa: F821 (Python 3.11's)
        noted = ValueError("the server refused the request")
        noted.add_note(f"its reply: {{'error': 'invalid key {key}'}}")
        if how == "note":
            raise noted
        try:
            raise noted
        except ValueError as err:
            raise RuntimeError("request failed") from err

    monkeypatch.setenv("E1_TEST_API_KEY", key)
    monkeypatch.setenv("E1_DEBUG", "1")
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr("sys.argv", ["e1", "eval"])
    with pytest.raises(BaseException) as caught:
        cli.main()
    printed = "".join(traceback.format_exception(caught.value))
    assert key not in printed and "invalid key ***" in printed, printed


@settings(max_examples=40, deadline=None)
@given(
    key=st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=8, max_size=30),
    before=st.text(" \t\n\r", max_size=3),
    after=st.text(" \t\n\r", min_size=1, max_size=3),
    where=st.sampled_from(["OPENAI_API_KEY", "registered"]),
)
def test_a_key_read_with_whitespace_around_it_is_masked_as_a_server_echoes_it(key, before, after, where):
    """OPENAI_API_KEY (or a key e1 read) with a newline or spaces around it, as an env file or `$(cat key)` leaves
    it: a server echoes the key without them, and that is masked too."""
    from e1.errors import E1Error, register_secret

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())
        if where == "registered":
            register_secret(f"{before}{key}{after}")
        else:
            patch.setenv(where, f"{before}{key}{after}")
        line = str(E1Error(f"401: invalid key {key} given"))
    assert key not in line, line


def test_an_unexpected_errors_line_masks_a_secret_holding_a_run_of_spaces(monkeypatch, capsys):
    """A proxy's password (or any registered secret) holding two spaces, quoted by a library's error that is no
    E1Error: the one line joins runs of spaces, and masks the secret before it does."""
    import e1.cli.app as cli
    from e1.errors import register_secret

    secret = "correct  horse\nbattery"

    def app(prog_name):
        raise RuntimeError(f"proxy refused credentials {secret}")

    register_secret(secret)
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr("sys.argv", ["e1", "eval"])
    with pytest.raises(SystemExit):
        cli.main()
    err = capsys.readouterr().err
    assert "horse" not in err and "***" in err, err


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    prefix=st.sampled_from(["sk-proj-", "hf_", "AIza", "sk-ant-api03-", ""]),
    body=st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=12, max_size=30).filter(
        lambda b: any(c.islower() or c == "-" for c in b)
    ),
)
@example(prefix="hf_", body="AbCdEfGhIjKlMnOp123")  # a valid variable name, which no variable has
@example(prefix="sk-proj-", body="Abc123def456ghi")
def test_a_key_passed_in_place_of_its_variables_name_is_never_printed(tmp_path, capsys, prefix, body):
    """`--api-key-env sk-proj-...` or `--api-key-env hf_...` (the key itself, by a slip the hint warns of): one
    line that names the flag and not the key, and no file holds it."""
    from e1.cli.app import main

    key = prefix + body
    args = _eval_args("http://127.0.0.1:9/v1", tmp_path)
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr("e1.errors._registered", set())
        patch.delenv(key, raising=False)
        patch.setattr(sys, "argv", [*args[:6], "--api-key-env", key, *args[6:]])
        main()
    err = capsys.readouterr().err
    written = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file())
    assert "--api-key-env" in err.strip().splitlines()[-1], err  # the error line (after a "loading m ..." status)
    assert key not in err and key not in written, err
