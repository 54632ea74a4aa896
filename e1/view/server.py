"""The `e1 view` web app: Starlette routes over :mod:`e1.view.tables`, served by uvicorn.

    serve(ViewConfig(paths=(Path("runs/sweep"),), port=8765))   # http://127.0.0.1:8765/

JSON under ``/api/``; the page is ``static/index.html`` with its script, and Plotly's own
``plotly.min.js`` from the installed ``plotly`` package (no network at run time). On a loopback
address nobody logs in (requests must name a loopback Host, so a web page elsewhere cannot
reach the app through DNS rebinding); any other address needs ``--token``: open the printed
URL once (``/?token=...``) and the browser keeps a cookie for this port.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from e1.errors import ConfigError
from e1.numeric import Number, check_numbers
from e1.view.runs import Run, find_runs

STATIC = Path(__file__).parent / "static"
NEEDED = ("starlette", "uvicorn", "plotly")
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def check_installed() -> None:
    """One line naming what to install when the optional web dependencies are missing."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"e1 view needs {', '.join(missing)}",
            hint=f"pip install -e '.[view]' in the e1 checkout, or pip install {' '.join(missing)}",
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


VIEW_NUMBERS = {"port": Number(int, min=0, max=65535, hint="0 picks any free port")}


@dataclass(frozen=True)
class ViewConfig:
    paths: tuple[Path, ...]
    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (the URL printed names it)
    token: str | None = None  # required off loopback; asked for on every request when set

    def __post_init__(self):
        if not self.paths:
            raise ConfigError("no run directory given", hint="e1 view RUN_DIR [RUN_DIR ...]")
        check_numbers(self, VIEW_NUMBERS, {"port": "--port"})
        if self.token is not None and len(self.token) < 8:
            raise ConfigError("--token is too short", hint="use 8 characters or more, e.g. $(openssl rand -hex 16)")
        if not is_loopback(self.host) and not self.token:
            raise ConfigError(
                f"--host {self.host} is reachable from other machines: pass --token TOKEN",
                hint="or keep the default --host 127.0.0.1 and tunnel: ssh -L 8765:127.0.0.1:8765 HOST",
            )


class Guard:
    """ASGI middleware: a loopback Host header when serving on loopback; the token when one is set
    (``?token=`` once sets a cookie for this port; scripts may send ``Authorization: Bearer``)."""

    def __init__(self, app, token: str | None, hosts: set[str] | None, port: int):
        self.app, self.token, self.hosts, self.cookie = app, token, hosts, f"e1_view_{port}"

    def _ok(self, given: str | None) -> bool:
        return bool(given) and secrets.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        from starlette.responses import PlainTextResponse, RedirectResponse

        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if self.hosts is not None and urlsplit("//" + headers.get("host", "")).hostname not in self.hosts:
            return await PlainTextResponse("e1 view answers only to a loopback Host", 400)(scope, receive, send)
        if self.token:
            given = parse_qs(scope.get("query_string", b"").decode()).get("token", [None])[0]
            cookie = SimpleCookie(headers.get("cookie", "")).get(self.cookie)
            bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
            if scope["path"] == "/" and self._ok(given):
                response = RedirectResponse("/", 303)
                response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict")
                return await response(scope, receive, send)
            if not (self._ok(cookie.value if cookie else None) or self._ok(bearer)):
                message = "e1 view: open the URL that e1 view printed (it ends in ?token=...)"
                return await PlainTextResponse(message, 401)(scope, receive, send)
        await self.app(scope, receive, send)


def build_app(runs: list[Run], token: str | None = None, hosts: set[str] | None = None, port: int = 0):
    """The ASGI app over ``runs`` (see :mod:`e1.view.routes` for what each route returns)."""
    from starlette.applications import Starlette

    from e1.view.routes import routes

    return Guard(Starlette(routes=routes(runs)), token, hosts, port)


def open_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the app starts: a busy port is one clear line, and port 0 works."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as err:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror}", hint="pick another --port") from err
    sock.listen(128)
    return sock


def url_of(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def bundle_runs(paths: list[Path], out: Path) -> list[Path]:
    """The runs under ``paths`` as a static folder ``out`` (see :mod:`e1.view.bundle`); returns the files written."""
    check_installed()
    from e1.view.bundle import write_bundle

    return write_bundle(find_runs(list(paths)), out)


def serve(config: ViewConfig, announce=print) -> None:
    """Find the runs, bind, print the URL, serve until Ctrl-C."""
    check_installed()
    import uvicorn

    runs = find_runs(list(config.paths))
    sock = open_socket(config.host, config.port)
    port = sock.getsockname()[1]
    hosts = LOOPBACK_NAMES | {config.host.strip("[]")} if is_loopback(config.host) else None
    app = build_app(runs, config.token, hosts, port)
    kinds = ", ".join(
        f"{sum(r.kind == k for r in runs)} {k}" for k in ("sweep", "eval", "train") if any(r.kind == k for r in runs)
    )
    announce(f"e1 view: {len(runs)} run{'s' * (len(runs) != 1)} ({kinds}) at {url_of(config.host, port, config.token)}")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
