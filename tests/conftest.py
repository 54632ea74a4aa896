"""Shared fixtures: every test runs inside its own tmp_path, offline, with its own caches."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# tests/modes/ holds modes that tests load on purpose (E1_MODES); importing them while collecting
# (--doctest-modules) would register them in every test's registry
collect_ignore = ["modes"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Keep each test's files, caches and hub access inside tmp_path (and offline)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("E1_DATA_DIR", str(tmp_path / "e1-data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("E1_DEBUG", raising=False)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):  # stand-ins on 127.0.0.1: reached directly
        monkeypatch.delenv(proxy, raising=False)  # (e1's clients honour them, as httpx does)
        monkeypatch.delenv(proxy.lower(), raising=False)
    monkeypatch.setattr("e1.errors._registered", set())  # API keys a test's run read are masked in that test only
    cores = os.sched_getaffinity(0)
    yield
    if os.sched_getaffinity(0) != cores:  # vLLM's CPU worker binds the thread that loads it to one core: the
        os.sched_setaffinity(0, cores)  # tests after it (and the processes they start) get every core back


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen2 with a BPE tokenizer trained on the spot; its template opens <think>."""
    from e1.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def e1_serve(tmp_path_factory):
    """(url, model dir): `e1 serve` with no options on the chatty tiny model, shared by every module that needs
    no other. It loads tests/modes/halfway.py as a user's mode file (E1_MODES) for tests/test_toy_mode.py: the
    built-in modes serve as they would without it."""
    from e1.engine.modes.mode import PLUGINS_ENV
    from tests.serving import chatty_server

    yield from chatty_server(tmp_path_factory, env={PLUGINS_ENV: str(Path(__file__).parent / "modes" / "halfway.py")})


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir):
    from e1.engine.hf.hf_engine import HFEngine

    return HFEngine.load(str(tiny_model_dir), batch_size=64)


@pytest.fixture
def problems_file(tmp_path):
    """Five toy problems in a .jsonl (ids q0..q4; answers alternate 3 and 2)."""
    path = tmp_path / "toy.jsonl"
    rows = [
        {"id": f"q{i}", "problem": f"What is {i} + {i}?" + " x" * i, "answer": "2" if i % 2 else "3"} for i in range(5)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
