"""Errors that reach users.

Library code raises an :class:`E1Error` subclass; the CLI turns it into one red line
(``message`` plus ``hint``) and a non-zero exit. ``E1_DEBUG=1`` shows the traceback.

Every message is one printable line (:func:`one_line`) and passes :func:`redact` (an error's message and hint as it is made, the CLI's error
line, log records and progress lines), and so does every URL e1 writes to a file (config.json):
the secrets e1 knows (values of key-like environment variables, of ``--api-key``-style options,
keys registered as read, such as the Hugging Face token from its login file), as they are and
percent-encoded and JSON-escaped, every URL's userinfo and query and fragment values, secret-named fields
(``access_token=``, ``password:``, ``sig=``, ...), ``Authorization``-style headers and bearer
tokens are masked, so a server that echoes a key back never gets it printed.

    >>> redact("cannot reach https://me:sk-abc@host/v1?sig=x1&alt=json#access_token=y")
    'cannot reach https://***@host/v1?sig=***&alt=***#access_token=***'

    >>> register_secret("sk-test-0123456789") and redact("401: bad key sk-test-0123456789")
    '401: bad key ***'

    >>> str(BudgetError("bad think budget '1x'", hint="use 512, 1k, 1.5k"))
    "bad think budget '1x' (use 512, 1k, 1.5k)"
    >>> str(ConfigError("unknown mode 'trunc'", hint=did_you_mean("trunc", ["elastic", "truncate"])))
    "unknown mode 'trunc' (did you mean 'truncate'?)"
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import unicodedata
from collections.abc import Iterable

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter values ("none", "1") are no secrets, and masking them would garble text
# a variable or option named like a secret: OPENAI_API_KEY, HF_TOKEN, --api-key, --hf-token=...
_SECRET_NAME = re.compile(r"(^|[_-])(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)($|[_-])", re.I)
# a header or query field that carries a secret, whatever its value: `Authorization: Bearer x`, `x-api-key=x`, `?key=x`
_SECRET_FIELD = re.compile(
    r"(?i)((?<![\w-])(?:(?:proxy-)?authorization|x-api-key|x-goog-api-key|api[-_]?key|token)|[?&]key)"
    r"([\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token)\s+)?([^\s\"',;&]+)"
)
# a secret-named field in any text (query, form, log line): `access_token=x`, `password: x`, `sig=x`, `client_secret=x`
_SECRET_VALUE = re.compile(
    r"(?i)((?<![\w-])(?:[\w-]*[_-])?(?:access[_-]?token|refresh[_-]?token|id[_-]?token|auth|"
    r"password|passwd|pwd|secret|sig|signature|credentials?|session[_-]?id)(?![\w-]))"
    r"([\"']?\s*[:=]\s*[\"']?)([^\s\"',;&]+)"
)
# a URL in text: its userinfo, and the values of its query and fragment, are masked whatever their names
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s\"'<>]*)")
_BEARER = re.compile(rf"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=-]{{{MIN_SECRET_CHARS},}})")
_NAMING = ("-env", "-file", "-path", "-dir")  # --api-key-env NAME names where a key is, and is no secret
_registered: set[str] = set()


def one_line(text: str) -> str:
    """``text`` as one printable line: each control or other unprintable character (a newline, a raw
    byte a library quoted from a damaged file) becomes a space. Every error message passes here."""
    return "".join(char if char.isprintable() else " " for char in text).strip()


class E1Error(Exception):
    """Base class: a message saying what is wrong and a hint saying how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        message, hint = one_line(redact(message)), None if hint is None else one_line(redact(hint))
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class BudgetError(E1Error):
    """A think/solve budget that cannot be parsed or is out of range."""


class ConfigError(E1Error):
    """Options or a config file that do not fit together."""


class DataError(E1Error):
    """A dataset that is unknown, missing, empty or malformed."""


class ModelError(E1Error):
    """A model or tokenizer that cannot be loaded or used."""


class MarkerError(ModelError):
    """Think markers that the tokenizer does not have."""


class ResultsError(E1Error):
    """A results directory that cannot be written or resumed."""


class RewardError(E1Error):
    """A reward that cannot be computed (unknown task, bad tests)."""


def did_you_mean(name: str, candidates: Iterable[str], listing: str = "choose one of") -> str:
    """The hint for an unknown ``name``: the closest candidates, else every candidate after ``listing``.

    >>> did_you_mean("token_mean", ["token-mean", "seq-mean"])
    "did you mean 'token-mean'?"
    >>> did_you_mean("xyz", ["train", "mask"], listing="known choices:")
    'known choices: train, mask'
    """
    names = [str(candidate) for candidate in candidates]
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"{listing} {', '.join(names)}"


def register_secret(value: str | None) -> str | None:
    """Remember ``value`` (a key e1 read) as a secret :func:`redact` masks; returns it unchanged."""
    if value and len(value) >= MIN_SECRET_CHARS:
        _registered.add(value)
    return value


def known_secrets() -> set[str]:
    """The secret values e1 knows now: registered keys, key-like environment variables, and the
    values of key-like options on the command line (``--api-key VALUE``, ``--api-key=VALUE``)."""
    found = set(_registered)
    found.update(value for name, value in os.environ.items() if _SECRET_NAME.search(name))
    argv = sys.argv[1:]
    for at, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name.startswith("-") and _SECRET_NAME.search(name.lstrip("-")) and not name.endswith(_NAMING):
            found.add(value if equals else argv[at + 1] if at + 1 < len(argv) else "")
    # a value read with spaces or a newline around it (an env file, `$(cat key)`) is echoed back without them
    return {form for value in found for form in (value, value.strip()) if len(form) >= MIN_SECRET_CHARS}


def redact(text: str) -> str:
    """``text`` with every secret e1 knows masked (see the module's docstring).

    >>> redact("Authorization: Bearer abcdefgh12345 and x-api-key=zzz")
    'Authorization: Bearer *** and x-api-key=***'
    """
    text = str(text)
    secrets = {form for secret in known_secrets() for form in _forms(secret)}
    for secret in sorted(secrets, key=len, reverse=True):
        while secret in text:  # a key holding the mask's characters cannot reappear around it
            text = text.replace(secret, MASK)
    text = _URL.sub(lambda m: m.group(1) + _url_rest(m.group(2)), text)
    text = _SECRET_VALUE.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _SECRET_FIELD.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) + " " if m.group(3) else "") + MASK, text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)


def _forms(secret: str) -> set[str]:
    """How a server or a library may spell ``secret`` back: as it is, percent-encoded, and JSON-escaped (a reply
    body quoted raw: ``\\"``, ``\\uXXXX``, and the ``\\/`` some encoders write for '/')."""
    import json
    from urllib.parse import quote, quote_plus

    escaped = {json.dumps(secret, ensure_ascii=only_ascii)[1:-1] for only_ascii in (True, False)}
    return (
        {secret, quote(secret, safe=""), quote_plus(secret)} | escaped | {form.replace("/", "\\/") for form in escaped}
    )


def redact_chain(err: BaseException) -> BaseException:
    """``err`` and every exception it came from (``__cause__``, ``__context__``) or holds (an exception group's)
    with their text arguments and notes (``add_note``) passed through :func:`redact`, so an ``E1_DEBUG=1``
    traceback's lines (a library's error quoting a server's reply that echoes a key) mask what the one-line
    error masks."""
    seen: set[int] = set()
    waiting = [err]
    while waiting:
        each = waiting.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        try:
            each.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in each.args)
            if isinstance(getattr(each, "__notes__", None), list):
                each.__notes__ = [redact(note) if isinstance(note, str) else note for note in each.__notes__]
        except (AttributeError, TypeError):  # an exception whose args are read-only
            pass
        waiting += [each.__cause__ or each.__context__, *getattr(each, "exceptions", ())]
    return err


def register_url(url: str | None) -> str | None:
    """Remember the credentials in ``url`` (an ``--api-url`` like ``https://me:pw@host``, a proxy) as secrets: its
    userinfo's password, ``user:password`` and its Basic-auth base64, as they are and percent-decoded, and the values
    of its query and fragment (``?key=...``: text stops a URL at a quote or a space, which such a value may hold), so
    a line that quotes the URL, or a server that echoes what it was sent, gets none of them printed; returns ``url``."""
    import base64
    from urllib.parse import unquote, urlsplit

    url = url or ""
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
    except ValueError:  # a host urllib cannot read ("[" outside an IPv6 address): the userinfo read as httpx would
        head = re.match(r"(?is)[a-z][a-z0-9+.-]*://([^/?#]*)@", url)
        username, _, password = head.group(1).partition(":") if head else ("", "", None)
        password = password if head and ":" in head.group(1) else None
    if password is not None or username:
        for user, secret in {
            (username or "", password or ""),
            (unquote(username or ""), unquote(password or "")),
        }:
            pair = f"{user}:{secret}"
            for value in (secret, pair, base64.b64encode(pair.encode()).decode()):
                register_secret(value)
    tail = re.split(r"[?#]", url, maxsplit=1)[1:]
    for value in re.findall(r"=([^&#;]*)", tail[0] if tail else ""):
        for form in (value, unquote(value)):
            register_secret(form)
    return url


def server_url(
    url: str, flag: str, example: str, key: str = "put the key in a variable, pass --api-key-env NAME"
) -> str:
    """The one gate of every server URL a user gives e1 (``--api-url``, elo's ``--api-url``, :func:`hub_endpoint`):
    an http(s) URL with a host and no userinfo, else one :class:`ConfigError` line (the URL redacted). A URL's
    userinfo would reach the server as HTTP Basic auth (httpx sends it, in place of the key's header), so a
    credential reaches a server only as the key an environment variable holds (``--api-key-env``).

    >>> server_url("http://127.0.0.1:8000/v1@x", "--api-url", "http://127.0.0.1:8000/v1")
    'http://127.0.0.1:8000/v1@x'
    >>> server_url("http://me:pw@host/v1", "--api-url", "http://host/v1")
    Traceback (most recent call last):
    e1.errors.ConfigError: --api-url http://***@host/v1 holds credentials (user:password@), which e1 never sends (put the key in a variable, pass --api-key-env NAME; the URL without user:password@, e.g. http://host/v1)
    """
    from urllib.parse import urlsplit

    register_url(url)  # masked in any line that quotes it, the traceback's too (even where the URL is refused)
    head = re.match(r"(?i)https?://([^/?#\s]+)", url)
    if head is None or not url.isprintable():
        raise ConfigError(f"{flag} {shown_url(url)!r} is not an http(s) URL", hint=f"e.g. {example}")
    try:
        seen = urlsplit(url)
        userinfo = seen.username is not None or seen.password is not None
    except ValueError:  # an IPv6 host urllib cannot read: refused as no URL
        raise ConfigError(f"{flag} {shown_url(url)} is not an http(s) URL", hint=f"e.g. {example}") from None
    if userinfo or "@" in head.group(1):  # an "@" before the path: userinfo to httpx and urllib alike
        raise ConfigError(
            f"{flag} {shown_url(url)} holds credentials (user:password@), which e1 never sends",
            hint=f"{key}; the URL without user:password@, e.g. {example}",
        )
    if not _reachable(url):
        raise ConfigError(f"{flag} {shown_url(url)} has no host and port a client can use", hint=f"e.g. {example}")
    return url


def hub_endpoint(url: str | None = None) -> None:
    """``HF_ENDPOINT`` (or ``url``, the endpoint huggingface_hub read from it) through :func:`server_url`: the hub's
    libraries read it wherever e1 reaches the hub (a model or tokenizer by hub id, a benchmark's dataset, ``--push``),
    so the CLI passes it here as it starts, and ``--push`` again for a caller of the library."""
    url = os.environ.get("HF_ENDPOINT", "") if url is None else url
    if url:
        server_url(url, "HF_ENDPOINT", "https://huggingface.co", "the token comes from HF_TOKEN or hf auth login")


def shown_url(url: str) -> str:
    """``url`` as a line quotes a URL e1 was given: read as one URL whatever characters it holds (text stops a URL at a
    quote or a '<', and a refused URL may hold them), everything before its last '@' masked (a password holding a '/',
    '?' or '#' is no userinfo to a parser, but was meant as one; an '@' look-alike, such as a full-width '＠', counts:
    urllib reads it as one), then every secret e1 knows.

    >>> shown_url("http://me:pw<x@host/v1?key=1")
    'http://***@host/v1?key=***'
    >>> shown_url(":pw#x@host"), shown_url("http://me:pw\uff20host/v1")
    ('***@host', 'http://***\uff20host/v1')
    """
    head, userinfo, rest = _written(url)
    return redact(head + _url_rest(rest if userinfo is None else MASK + rest))


def _written(url: str) -> tuple[str, str | None, str]:
    """``url`` split as its writer meant it: the scheme and ``://`` (or ""), the userinfo (everything before the last
    '@' or '@' look-alike; None without one), and the rest from that '@' on."""
    scheme = re.match(r"[^:/?#@\s]*://", url)
    head = scheme.group(0) if scheme else ""
    rest = url[len(head) :]
    ats = [at for at, char in enumerate(rest) if "@" in unicodedata.normalize("NFKC", char)]
    return (head, rest[: ats[-1]], rest[ats[-1] :]) if ats else (head, None, rest)


def userinfo_masked(text: str, url: str) -> str:
    """``text`` (a library's message about ``url``, which may quote a piece of it: "Invalid port: 'pw'") with what
    ``url``'s writer meant as its password, and each piece of it a parser may read alone, masked however short, as
    written and percent-encoded.

    >>> userinfo_masked("Invalid port: 'pw'", "http://me:pw#x@host:1")
    "Invalid port: '***'"
    """
    from urllib.parse import quote

    userinfo = _written(url)[1]
    if not userinfo:
        return text
    password = userinfo.partition(":")[2]  # (the user name is no secret, and a short one would garble the text)
    pieces = {password, *re.split(r"[:/?#]", password)} - {""}
    for piece in sorted(pieces | {quote(piece, safe="") for piece in pieces}, key=len, reverse=True):
        text = text.replace(piece, MASK)
    return text


def _reachable(url: str) -> bool:
    """Whether httpx (the client every request goes through) reads a host and port in ``url`` that a socket
    can look up (IDNA-encodable: no empty or over-long label)."""
    import httpx

    try:
        host = httpx.URL(url).host
        host.encode("idna")
    except (httpx.InvalidURL, UnicodeError):
        return False
    return bool(host)


def _url_rest(rest: str) -> str:
    """A URL after its scheme, userinfo and every query and fragment value masked (names kept)."""
    before = re.split(r"[?#]", rest, maxsplit=1)[0]
    if "@" in before:  # userinfo, even one holding an unencoded "/" (a path's "@" masks a little more)
        rest = MASK + "@" + rest[before.rindex("@") + 1 :]
    if "?" not in rest and "#" not in rest:
        return rest
    head, tail = re.split(r"(?=[?#])", rest, maxsplit=1)
    return head + re.sub(r"([?#&;][^=&#;]*=)[^&#;]*", lambda m: m.group(1) + MASK, tail)


def redact_logs() -> None:
    """Pass every log record and warning (e1's, and every library's) through :func:`redact` as it is made."""
    import logging
    import warnings

    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def redacted_record(*args, **kwargs):
        record = make_record(*args, **kwargs)
        record.msg, record.args = redact(record.getMessage()), ()
        return record

    redacted_record.redacts = True
    logging.setLogRecordFactory(redacted_record)
    format_warning = warnings.formatwarning
    warnings.formatwarning = lambda *args, **kwargs: redact(format_warning(*args, **kwargs))
