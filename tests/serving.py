"""`e1 serve` started for a test module: one helper, so every server test starts it the same way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(
    model_dir: str, log: Path, *args: str, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """``e1 serve --model MODEL_DIR ... ARGS`` (float32, a 256-token context, 1 GiB of KV cache) on a
    loopback port until the block ends; yields its URL once ``/health`` answers (within 300 s).
    It is stopped with SIGTERM, which must end it cleanly (exit 0); its output goes to ``log``; ``env``: more
    environment for it."""
    port = port or free_port()
    command = [
        sys.executable,
        "-m",
        "e1",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        *args,
    ]
    with running(command, port, log, clean_exit=True, env=env) as url:
        yield url


@contextmanager
def running(
    command: list[str], port: int, log: Path, clean_exit: bool = False, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``command`` (a server on ``port``) until the block ends; yields its URL once ``/health``
    answers (within 300 s); stopped with SIGTERM (``clean_exit``: which must end it with exit 0)."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 300
    try:
        while True:
            assert process.poll() is None, f"the server died:\n{log.read_text()[-3000:]}"
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the server did not start:\n{log.read_text()[-3000:]}"
            time.sleep(1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0 or not clean_exit, log.read_text()[-3000:]


def chatty_server(tmp_path_factory, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """For a fixture (``yield from``): ``e1 serve ARGS`` on the chatty tiny model (tests/fakes.py), skipped
    without vLLM or openai; yields (url, model dir). Modules that need no ARGS share one (conftest's
    ``e1_serve``): each start costs about 25 s here, most of it three processes importing vLLM."""
    import pytest

    pytest.importorskip("vllm")
    pytest.importorskip("openai")
    from tests.fakes import build_chatty_model

    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    with running_server(path, tmp_path_factory.mktemp("serve") / "server.log", *args, env=env) as url:
        yield url, path
