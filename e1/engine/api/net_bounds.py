"""The socket-level bounds of e1's one bounded client (:func:`e1.engine.api.replies.bounded_client`): every
wait of a request ends by its deadline (its status line and headers too), and a compressed body is
counted as it unpacks (a gzip bomb stops at the size cap, never held whole).

Proxies: the client honours ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` exactly as an
``httpx.Client`` of its own does (``trust_env``: httpx 0.28/0.29, ``httpx/_utils.py: get_environment_proxies``,
read here rather than copied), since the SDKs e1 replaces do and a user behind a proxy has no other way out;
every proxy's connection runs through the same deadline-bound sockets and its replies through the same cap."""

from __future__ import annotations

import functools
import importlib
import threading
import time
import zlib

UNPACK = {
    "identity": lambda: None,
    "": lambda: None,
    "gzip": lambda: zlib.decompressobj(31),
    "x-gzip": lambda: zlib.decompressobj(31),
    "deflate": lambda: zlib.decompressobj(47),
}  # 47: a zlib or gzip header, as servers send "deflate"


def unpacking(httpx, request, response) -> tuple[list, object]:
    """A reply's headers as its body will be read (unpacked: no encoding, no length) and its unpacker (None: as sent)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in UNPACK:
        response.close()
        raise httpx.DecodingError(f"the reply is encoded {encoding!r}, not as asked (gzip, deflate)", request=request)
    unpack = UNPACK[encoding]()
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if unpack is None or k.lower() not in ("content-encoding", "content-length")
    ]
    return headers, unpack


def unpacked(unpack, data: bytes, room: int):
    """The pieces ``data`` unpacks to, none past ``room + 1`` bytes in all (a bomb never unpacks whole)."""
    while data:
        piece = unpack.decompress(data, max(1, room + 1))
        room -= len(piece)
        yield piece
        if room < 0:
            return
        data = unpack.unconsumed_tail


DEADLINE = threading.local()  # .at: the deadline of the request this thread is reading


@functools.cache
def deadline_backend() -> type:
    """An ``httpcore`` network backend whose every connect, read and write waits at most until the
    deadline of the request its thread reads (a per-read timeout alone lets a server drip its status
    line and headers a byte at a time for hours: each read gets the whole deadline again)."""
    import httpcore

    def left(timeout: float | None) -> float | None:
        at = getattr(DEADLINE, "at", None)
        if at is None:
            return timeout
        if at - time.monotonic() <= 0:
            raise httpcore.ReadTimeout("the reply was not complete within its deadline")
        return at - time.monotonic() if timeout is None else min(timeout, at - time.monotonic())

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner):
            self.inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self.inner.read(max_bytes, left(timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.inner.write(buffer, left(timeout))

        def close(self) -> None:
            self.inner.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return Stream(self.inner.start_tls(ssl_context, server_hostname, left(timeout)))

        def get_extra_info(self, info: str):
            return self.inner.get_extra_info(info)

    class Backend(httpcore.NetworkBackend):
        def __init__(self, inner):
            self.inner = inner

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return Stream(self.inner.connect_tcp(host, port, left(timeout), local_address, socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return Stream(self.inner.connect_unix_socket(path, left(timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            self.inner.sleep(seconds)

    return Backend


def bound_sockets(transport) -> None:
    """Make every socket wait of an ``httpx.HTTPTransport``'s connections end by :data:`DEADLINE` (its thread's)."""
    pool = transport._pool
    pool._network_backend = deadline_backend()(pool._network_backend)


def env_proxies(httpx) -> dict[str, str | None]:
    """The proxies an ``httpx`` (or a fork's) client of its own would take from the environment: URL
    pattern to proxy URL, None for a host ``NO_PROXY`` names (``{}``: none, or ``NO_PROXY=*``)."""
    return importlib.import_module(f"{httpx.__name__}._utils").get_environment_proxies()


def proxy_transport(httpx, proxy: str | None):
    """An ``httpx.HTTPTransport`` (through ``proxy``, where one is given), or one line naming what is wrong
    with a proxy the environment gives (its credentials masked)."""
    from e1.errors import register_url

    if proxy is None:
        return httpx.HTTPTransport()
    register_url(proxy)  # a proxy's user:password@ is its own credential: masked in every line
    try:
        return httpx.HTTPTransport(proxy=proxy)
    except (ValueError, ImportError, TypeError, httpx.InvalidURL) as err:
        raise proxy_error(err, proxy) from None


def proxy_error(err: Exception, proxy: str | None = None):
    """The one line for proxy variables httpx cannot use (the proxy quoted as :func:`e1.errors.shown_url` shows it)."""
    from e1.errors import ConfigError, shown_url, userinfo_masked

    which = f"the proxy {shown_url(proxy)}" if proxy else "the proxy variables"
    reason = userinfo_masked(str(err), proxy) if proxy else str(err)  # httpx quotes a piece: "Invalid port: 'pw'"
    return ConfigError(
        f"{which} (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) cannot be used: {reason}",
        hint="give an http:// or https:// proxy, unset the variable, or name the host in NO_PROXY",
    )
