"""Secrets never reach the terminal: every message e1 prints or logs passes one redactor
(:func:`e1.errors.redact`), which masks the keys it knows: key-like environment variables,
``--api-key``-style options, keys e1 read, ``Authorization``-style headers and bearer tokens."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.errors import MASK, E1Error, redact, redact_logs, register_secret

KEYS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+/=*", min_size=8, max_size=64
)
AROUND = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(key=KEYS, before=AROUND, after=AROUND, where=st.sampled_from(["env", "option", "option=", "registered"]))
def test_a_known_key_is_masked_wherever_it_sits_in_a_message(key, before, after, where):
    saved_argv = sys.argv
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())  # a key registered here is masked in this example only
        if where == "env":
            patch.setenv("E1_TEST_PROVIDER_API_KEY", key)
        elif where.startswith("option"):
            patch.setattr(
                sys, "argv", ["e1", "serve", *([f"--api-key={key}"] if where == "option=" else ["--api-key", key])]
            )
        else:
            register_secret(key)
        message = f"{before}Incorrect API key provided: {key}{after}"
        assert key not in redact(message) and MASK in redact(message)
        assert key not in str(E1Error(message, hint=f"try another key than {key}"))
    assert sys.argv is saved_argv


@settings(max_examples=100, deadline=None)
@given(
    key=KEYS.filter(lambda k: k[0].isalnum() and not set(k) & set("*=")),
    header=st.sampled_from(
        [
            "Authorization: Bearer {}",
            "authorization: {}",
            "x-api-key: {}",
            "x-goog-api-key={}",
            "?key={}&alt=json",
            "headers={{'Authorization': 'Bearer {}'}}",
        ]
    ),
)
def test_a_header_carrying_a_key_is_masked_even_when_the_key_is_unknown(key, header):
    assert key not in redact(f"sent {header.format(key)} and failed")


def test_ordinary_text_is_left_alone(monkeypatch):
    text = "the reply counts 900 reasoning tokens of 5 completion tokens; basic arithmetic; max_tokens=50"
    assert redact(text) == text
    monkeypatch.setattr(sys, "argv", ["e1", "eval", "--api-key-env", "E1_TEST_API_KEY"])  # a name, not a key
    unset = "--api-key-env E1_TEST_API_KEY: the variable is not set (export E1_TEST_API_KEY=... before running)"
    assert redact(unset) == unset


def test_log_records_and_progress_lines_are_redacted(monkeypatch, caplog):
    from rich.console import Console

    from e1.report import RichProgress

    key = "sk-live-a1b2c3d4e5f6g7h8"
    monkeypatch.setenv("E1_TEST_API_KEY", key)
    redact_logs()
    with caplog.at_level(logging.WARNING):
        logging.getLogger("httpx").warning("POST %s failed", f"https://x/v1?key={key}")
        logging.getLogger("e1").warning("key %s refused", key)
    assert caplog.records and not any(key in record.getMessage() for record in caplog.records)
    console = Console(record=True, force_terminal=False, width=200)
    progress = RichProgress(console=console, interval_s=0)
    with progress.task(f"asking with {key}", total=1):
        progress.status(f"401: {key}")
        progress.advance()
    shown = console.export_text()
    assert key not in shown and f"401: {MASK}" in shown


def test_a_server_that_echoes_the_key_in_its_401_never_gets_it_printed(monkeypatch, tmp_path, capsys):
    """The CLI's one red line, end to end: the key is sent, the server's message echoes it, e1 masks it."""
    from e1.cli.app import main
    from tests.test_api_backend import MODEL, StandIn, _dataset

    key = "sk-proj-Zq8c1Xb2Vn3Mm4Ll5Kk6"
    server = StandIn().start()
    echoed = json.dumps({"error": {"message": f"Incorrect API key provided: {key}. Header was 'Bearer {key}'"}})
    server.fault = lambda path, body: (401, {}, echoed.encode())
    monkeypatch.setenv("E1_TEST_API_KEY", key)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "e1",
            "eval",
            "--backend",
            "openai",
            "--api-url",
            server.url,
            "--api-key-env",
            "E1_TEST_API_KEY",
            "--model",
            MODEL,
            "--mode",
            "none",
            "--datasets",
            str(_dataset(tmp_path)),
            "--out",
            str(tmp_path / "run"),
        ],
    )
    try:
        with pytest.raises(SystemExit) as exit_:
            main()
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "HTTP 401" in err and "Incorrect API key provided: ***" in err
    assert key not in err and server.keys == {f"Bearer {key}"}  # sent to the server, never printed


# ---- URLs: one rule for every part that can carry a secret -------------------------------------------

URL_SECRETS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/?#%",
    min_size=8,
    max_size=40,
)
PLACES = [
    "https://user:{}@{host}/v1",
    "http://{}@{host}/v1/models",
    "https://{host}/v1?{name}={}",
    "https://{host}/v1/chat?alt=json&{name}={}&b=2",
    "https://{host}/commit/abc#{name}={}",
    "http://u:{}@{host}/api?{name}={}",
]


@settings(max_examples=300, deadline=None)
@given(
    secret=URL_SECRETS,
    place=st.sampled_from(PLACES),
    name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,11}", fullmatch=True),
    host=st.sampled_from(["127.0.0.1:8000", "api.example.com", "hub.local"]),
    around=st.sampled_from(["cannot reach {} (ConnectError)", "Client error '401' for url '{}'", "{}", "url={}\n"]),
)
def test_a_secret_in_any_part_of_a_url_is_never_printed_as_text_or_percent_encoded(secret, place, name, host, around):
    from urllib.parse import quote

    from e1.errors import _registered

    assert not _registered or secret not in _registered  # unknown to e1: the URL rule alone masks it
    encoded = quote(secret, safe="")
    text = around.format(place.replace("{host}", host).replace("{name}", name).replace("{}", encoded))
    shown = redact(text)
    bare = around.format(place.replace("{host}", host).replace("{name}", name).replace("{}", ""))  # all but the secret
    assert encoded in text
    if secret not in bare:  # (a secret that is the host's own text cannot be told from it)
        assert secret not in shown
    if encoded not in bare:
        assert encoded not in shown
    assert host.split(":")[0] in shown  # where it went is still said


def test_an_api_url_with_a_key_in_it_is_in_no_file_and_no_line(tmp_path, capsys, monkeypatch):
    """--api-url https://user:KEY@host/v1: refused in one line that does not carry the key, and no file carries
    it; a URL with ?access_token=KEY2: the connection-error line does not carry it."""
    from e1.cli.app import main
    from tests.test_api_backend import MODEL, StandIn, _dataset

    key, key2 = "sk-userinfo-Zq8c1Xb2Vn3", "tok-query-Mm4Ll5Kk6Jj7"
    server = StandIn().start()
    url = server.url.replace("http://", f"http://user:{key}@")
    args = [
        "e1",
        "eval",
        "--backend",
        "openai",
        "--api-url",
        url,
        "--model",
        MODEL,
        "--mode",
        "none",
        "--think",
        "8",
        "--solve",
        "8",
        "--datasets",
        str(_dataset(tmp_path)),
        "--out",
        str(tmp_path / "run"),
    ]
    monkeypatch.setattr(sys, "argv", args)
    try:
        with pytest.raises(SystemExit):
            main()
    finally:
        server.stop()
    printed = "".join(capsys.readouterr())
    written = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file())
    assert "holds credentials" in printed and not server.requests  # refused before any request
    assert key not in printed and key not in written and "user:" not in written
    down = server.url.replace(str(server.port), "9") + f"?access_token={key2}&sig={key2}"  # nothing listens there
    monkeypatch.setattr(sys, "argv", [*args[:5], down, *args[6:-1], str(tmp_path / "r2")])
    with pytest.raises(SystemExit):
        main()  # nothing listens there: the connection-error line
    err = capsys.readouterr().err
    assert "cannot reach" in err and key not in err and key2 not in err


@settings(max_examples=150, deadline=None)
@given(secret=URL_SECRETS.filter(lambda s: s[0].isalnum()), before=AROUND, after=AROUND, plus=st.booleans())
def test_a_known_secret_is_masked_percent_encoded_too(secret, before, after, plus):
    """A token e1 knows (HF_TOKEN, a key it read) that a server echoes percent-encoded, in a URL or not."""
    from urllib.parse import quote, quote_plus

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())
        register_secret(secret)
        encoded = (quote_plus if plus else quote)(secret, safe="")
        shown = redact(f"{before}echoed {encoded} back{after}")
    if encoded not in before + after:
        assert encoded not in shown
