"""Where a model behind an API is served and how to talk to it: :class:`ApiSettings`, its settings
declared once (:mod:`e1.settings`), so `e1 eval`'s ``--api-url``, ``--concurrency``, ... come from
its fields. Light (no HTTP client, no reply schemas): the command line reads it for --help.

    >>> ApiSettings("http://127.0.0.1:8000/v1", concurrency=4).concurrency
    4
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from e1.engine.backends import API_BACKENDS, BACKENDS
from e1.errors import ConfigError, register_secret, server_url
from e1.numeric import Number
from e1.settings import API, check_settings, declared, flag_of, numbers, setting

API_BACKEND = "openai"
KEY_ENVS = {name: BACKENDS[name].key_env for name in API_BACKENDS}  # each API backend's key variable
BASE_URL_ENVS = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}  # read by the SDKs without --api-url
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # matched whole (fullmatch: `$` passes "NAME\n")


@dataclass(frozen=True)
class ApiSettings:
    """Where the model is served and how to talk to it. ``backend``: ``openai`` (any OpenAI-compatible
    server, ``url`` required) or a hosted vendor (``gemini``, ``anthropic``; ``url`` None: the
    vendor's endpoint). ``api_key_env`` names the environment variable holding the key (None: the
    backend's usual one, :data:`KEY_ENVS`); the key itself is never stored. ``tokenizer`` (a local
    folder or hub id, openai only) builds exact prompts and counts."""

    url: str | None = setting(
        help="--backend openai: the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (--model is "
        "then the served name); gemini, anthropic: another endpoint than the vendor's.",
        panel=API,
        flag="--api-url",
        shown=False,
    )
    api_key_env: str | None = setting(
        None,
        "The environment variable holding the API key, never the key.",
        API,
        shown="OPENAI_API_KEY if set, GEMINI_API_KEY, ANTHROPIC_API_KEY",
    )
    tokenizer: str | None = setting(
        None,
        "--backend openai: the served model's tokenizer (folder or hub id) for exact prompts and counts; "
        "without it prompts are chat messages.",
        API,
        shown=False,
    )
    concurrency: int = setting(
        8, "Requests in flight.", API, number=Number(int, min=1, max=4096, hint="requests in flight at once, e.g. 8")
    )
    request_timeout_s: float = setting(
        600.0,
        "Seconds per request.",
        API,
        flag="--request-timeout",
        number=Number(float, min=0, max=86400, above=True, hint="seconds per request, e.g. 600"),
    )
    max_retries: int = setting(
        5,
        "Retries of a request (429, 5xx, connection errors), with backoff.",
        API,
        number=Number(int, min=0, max=100, hint="retries of a request on 429, 5xx and connection errors"),
    )
    backend: str = API_BACKEND  # which API: --backend, not a setting of its own

    def __post_init__(self):
        if self.backend not in API_BACKENDS:
            from e1.errors import did_you_mean

            raise ConfigError(f"unknown API backend {self.backend!r}", hint=did_you_mean(self.backend, API_BACKENDS))
        if self.tokenizer is not None and self.backend != API_BACKEND:
            raise ConfigError(
                f"--tokenizer is for --backend openai, not {self.backend}", hint="a hosted vendor counts its own tokens"
            )
        if self.url is not None or self.backend == API_BACKEND:  # no credentials in it: the key comes from a variable
            server_url(self.url or "", "--api-url", "http://127.0.0.1:8000/v1")
        elif os.environ.get(BASE_URL_ENVS.get(self.backend, ""), ""):  # the URL the vendor's SDK reads instead
            server_url(os.environ[BASE_URL_ENVS[self.backend]], BASE_URL_ENVS[self.backend], "unset it, or --api-url")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            register_secret(self.api_key_env)  # no name: the key itself, passed by a slip (never printed)
            raise ConfigError(
                f"--api-key-env {self.api_key_env!r} is not an environment variable name",
                hint="name the variable that holds the key, e.g. OPENAI_API_KEY (never the key itself)",
            )
        check_settings(self)

    def api_key(self) -> str:
        """The key, read from its variable at load (never stored, logged or put in an error)."""
        if self.api_key_env is None and self.backend == API_BACKEND:
            return register_secret(os.environ.get(KEY_ENVS[API_BACKEND])) or "none"  # local servers take any key
        variable = self.api_key_env or KEY_ENVS[self.backend]
        key = os.environ.get(variable)
        register_secret(key)  # masked in every message e1 prints (e1.errors.redact)
        if not key:
            if not variable.isupper():  # a name no variable has, not UPPER_CASE: maybe the key itself (an hf_... token)
                register_secret(variable)
            flag = f"--api-key-env {variable}" if self.api_key_env else f"--backend {self.backend} reads {variable}"
            raise ConfigError(f"{flag}: the variable is not set", hint=f"export {variable}=... before running")
        return key


API_NUMBERS = numbers(ApiSettings)  # what each numeric setting may hold (e1.numeric)
API_FLAGS = {name: flag_of(name, how) for name, (_, how) in declared(ApiSettings).items() if name in API_NUMBERS}
