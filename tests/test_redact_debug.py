"""What ``E1_DEBUG=1`` prints masks what the one-line error masks, and an ``--api-url``'s userinfo
credentials are secrets wherever a server echoes them (as sent, percent-decoded, or as the Basic-auth
base64 httpx sends for them). Before, a 401 body quoting the key (or the URL's password) reached the
traceback's last line in full: only e1's own line was redacted.
"""

from __future__ import annotations

import base64
import traceback
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

KEYS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=12, max_size=40)
PASSWORDS = st.text("abcdefghijklmnopqrstuvwxyz0123456789@:/#?%!$&'()*+,;= ", min_size=8, max_size=24)


@settings(max_examples=30, deadline=None)
@given(key=KEYS, wrapped=st.booleans())
def test_a_debug_traceback_never_shows_a_key_a_server_echoed(key, wrapped):
    import e1.cli.app as cli
    from e1.errors import ModelError

    def app(prog_name):
        server = RuntimeError(f"Error code: 401 - {{'error': 'invalid key {key}'}}")
        if not wrapped:
            raise server
        try:
            raise server
        except RuntimeError as err:
            raise ModelError("the server refused e1's key") from err

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MY_LLM_CREDENTIAL", "x")  # (no key-like name: only registration masks it)
        patch.setattr("e1.errors._registered", set())
        patch.setenv("E1_DEBUG", "1")
        patch.setattr(cli, "app", app)
        patch.setattr("sys.argv", ["e1", "eval"])
        from e1.errors import register_secret

        register_secret(key)
        with pytest.raises(Exception) as caught:
            cli.main()
    printed = "".join(traceback.format_exception(caught.value))
    assert key not in printed and "invalid key ***" in printed


@settings(max_examples=40, deadline=None)
@given(
    user=st.text("abcdefghij", min_size=1, max_size=6),
    password=PASSWORDS,
    form=st.sampled_from(["password", "pair", "basic", "decoded"]),
)
def test_an_api_urls_userinfo_is_masked_however_a_server_echoes_it(user, password, form):
    from e1.engine.api.openai_engine import ApiSettings
    from e1.errors import ConfigError, redact

    url = f"http://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:9/v1"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("e1.errors._registered", set())
        with pytest.raises(ConfigError):  # refused (e1.errors.server_url), its credentials still secrets
            ApiSettings(url)
        pair = f"{user}:{password}"
        echoed = {
            "password": quote(password, safe=""),
            "pair": f"{user}:{quote(password, safe='')}",
            "basic": base64.b64encode(pair.encode()).decode(),
            "decoded": pair,
        }[form]
        line = redact(f"401: credentials {echoed} refused")
    assert echoed not in line, line
