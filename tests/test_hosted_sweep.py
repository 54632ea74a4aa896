"""Hosted backends through e1 eval and e1 sweep: the effort axis plotted at measured thinking
tokens, faults (429 then 200, malformed JSON, a server that dies mid-run), and the API key that
never leaves its environment variable. Stand-ins: tests/hosted_standins.py."""

from __future__ import annotations

import json
import math
import secrets
import threading
from pathlib import Path

import pytest
from starlette.responses import Response

from e1.budget import Budget
from e1.engine.api.openai_engine import ApiSettings
from e1.engine.base import Mode, Sampling
from e1.engine.spec import EngineSpec
from e1.errors import E1Error
from e1.rewards.scoring import ScoringSpec
from tests.hosted_standins import EFFORT_TOKENS, StandIn

pytest.importorskip("google.genai")
pytest.importorskip("anthropic")
NEEDS = (100, 400, 800, 2000)  # thinking each problem needs: minimal 0/4 right, low 1/4, medium 2/4, high 3/4


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "problem": f"Question {i}: this needs {need} tokens of thought.", "answer": "5"}
        for i, need in enumerate(NEEDS)
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def _cli(*args: str):
    from typer.testing import CliRunner

    from e1.cli.app import app

    return CliRunner().invoke(app, list(args))


@pytest.fixture
def gemini():
    server = StandIn("gemini").start()
    yield server
    server.stop()


def test_an_effort_sweep_plots_accuracy_against_measured_thinking_tokens(gemini, tmp_path, monkeypatch):
    import pandas as pd

    key = "AIza" + secrets.token_urlsafe(24)  # a fresh random key: found anywhere, it leaked
    monkeypatch.setenv("E1_TEST_GEMINI_KEY", key)
    out = tmp_path / "sweep"
    result = _cli(
        "sweep",
        "--model",
        "stand-in",
        "--backend",
        "gemini",
        "--api-url",
        gemini.url,
        "--api-key-env",
        "E1_TEST_GEMINI_KEY",
        "--datasets",
        str(_dataset(tmp_path)),
        "--budget-axis",
        "effort",
        "--efforts",
        "minimal,low,medium,high",
        "--n",
        "1",
        "--workers",
        "1",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    curves = pd.read_parquet(out / "curves.parquet")
    assert list(curves["effort"]) == ["minimal", "low", "medium", "high"]
    assert list(curves["mode"]) == [f"none:effort={level}" for level in curves["effort"]]
    assert list(curves["mean_think_tokens"]) == [
        EFFORT_TOKENS[level] for level in curves["effort"]
    ]  # the replies' counts
    assert list(curves["accuracy"]) == [0.0, 0.25, 0.5, 0.75]  # hand-derived from NEEDS
    assert (out / "curves.png").stat().st_size > 0
    areas = pd.read_parquet(out / "areas.parquet")  # one curve through the levels: x = log2 of mean tokens (+ 8 answer)
    x = [math.log2(EFFORT_TOKENS[level] + 8) for level in ("minimal", "low", "medium", "high")]
    y = [0.0, 0.25, 0.5, 0.75]
    trapezoids = sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2 for i in range(3))
    assert list(areas["mode"]) == ["none"] and areas["points"].item() == 4
    assert areas["auc"].item() == pytest.approx(trapezoids / (x[-1] - x[0]))
    samples = pd.read_parquet(out / "samples.parquet")
    assert set(samples["think_budget"]) == {0} and set(samples["solve_budget"]) == {Sampling().max_tokens}
    levels = {body["generationConfig"]["thinkingConfig"]["thinking_level"] for body in gemini.requests}
    assert levels == {"MINIMAL", "LOW", "MEDIUM", "HIGH"} and len(gemini.requests) == 16  # 4 levels × 4 problems
    assert gemini.keys == {key}  # sent to the server, and nowhere else:
    _assert_nowhere(key, out, result.output)
    config = json.loads((out / "models" / "stand-in" / "config.json").read_text())
    assert config["api_method"]["methods"]["none:effort=high"].startswith("the vendor's effort level")


def _assert_nowhere(key: str, out: Path, *texts: str) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    for text in texts:
        assert key not in text


def test_the_effort_axis_options_are_checked_before_anything_starts(tmp_path):
    def refused(*args: str) -> str:
        result = _cli("sweep", "--model", "m", "--datasets", "x.jsonl", "--out", str(tmp_path / "r"), *args)
        assert isinstance(result.exception, E1Error), result.output  # one line, not a traceback
        return str(result.exception)

    assert "did you mean 'effort'" in refused("--budget-axis", "efort").lower()
    assert "--efforts needs --budget-axis effort" in refused("--efforts", "low")
    assert "needs --efforts" in refused("--budget-axis", "effort")
    assert "takes no --think" in refused("--budget-axis", "effort", "--efforts", "low", "--think", "1k")
    assert "sets the effort of mode none, not of elastic" in refused(
        "--budget-axis", "effort", "--efforts", "low", "--modes", "elastic"
    )
    assert "needs a hosted reasoning API" in refused("--budget-axis", "effort", "--efforts", "low", "--backend", "hf")
    assert "gemini has no effort level 'xhigh'" in refused(
        "--budget-axis", "effort", "--efforts", "xhigh", "--backend", "gemini", "--api-url", "http://127.0.0.1:9"
    )


# ---- faults, through e1 eval ------------------------------------------------------------------


def _eval(url: str, vendor: str, tmp_path: Path, batch_size: int = 1):
    from e1.eval.run import EvalConfig, evaluate

    config = EvalConfig(
        model="stand-in",
        datasets=(str(_dataset(tmp_path)),),
        budgets=(Budget(0, 4096),),
        modes=(Mode.parse("none:effort=low"),),
        n=1,
        sampling=Sampling(max_tokens=4096),
        out=tmp_path / "run",
        batch_size=batch_size,
        engine=EngineSpec(backend=vendor),
        scoring=ScoringSpec(workers=1),
        api=ApiSettings(url, backend=vendor, max_retries=2, concurrency=2, api_key_env="E1_KEY"),
    )
    return evaluate(config)


def _stored(tmp_path: Path) -> list[str]:
    from e1.store.samples import SampleStore

    return sorted(SampleStore(tmp_path / "run").read()["problem_id"])


def _about(problem: str):
    return lambda body: problem in json.dumps(body)


@pytest.fixture
def key(monkeypatch) -> str:
    value = "sk-" + secrets.token_hex(16)
    monkeypatch.setenv("E1_KEY", value)
    return value


@pytest.mark.parametrize("vendor", ["gemini", "anthropic"])
def test_429_then_200_is_retried(vendor, tmp_path, key):
    server = StandIn(vendor).start()
    limited = []

    def once(vendor, body):  # Question 1's first request: rate limited, with a Retry-After
        if _about("Question 1")(body) and not limited:
            limited.append(body)
            return Response(
                b'{"error": {"code": 429, "message": "quota"}}',
                status_code=429,
                headers={"retry-after": "0"},
                media_type="application/json",
            )
        return None

    server.fault = once
    try:
        samples, _ = _eval(server.url, vendor, tmp_path)
    finally:
        server.stop()
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"] and len(limited) == 1
    assert list(samples["think_tokens"]) == [EFFORT_TOKENS["low"]] * 4
    assert (
        len(server.requests) == 5 and max(server.answered.values()) == 1
    )  # the 429'd request sent twice, answered once


@pytest.mark.parametrize("vendor", ["gemini", "anthropic"])
def test_malformed_json_names_the_sample_and_loses_nothing(vendor, tmp_path, key):
    server = StandIn(vendor).start()
    server.fault = lambda vendor, body: (
        Response(b'{"candidates": [{"content": ', media_type="application/json") if _about("Question 2")(body) else None
    )
    try:
        with pytest.raises(
            E1Error,
            match=r"problem p2 \(none:effort=low, t=0 s=4096\), sample 0 failed: "
            r"the reply is not JSON",
        ) as error:
            _eval(server.url, vendor, tmp_path)
        assert key not in str(error.value) and key not in str(error.value.hint)
        assert _stored(tmp_path) == ["p0", "p1"]  # the samples before it are kept
        server.fault = lambda vendor, body: None
        samples, _ = _eval(server.url, vendor, tmp_path)
    finally:
        server.stop()
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert max(server.answered.values()) == 1  # no answered request was sent again
    _assert_nowhere(key, tmp_path / "run")


def test_a_server_that_dies_mid_run_is_resumed_without_repeating_a_request(tmp_path, key):
    server = StandIn("anthropic").start()

    def dies(vendor, body):  # the last batch: once p2 is answered (its reply journalled), the server goes away
        if _about("Question 3")(body):
            for _ in range(200):
                if any("Question 2" in answered for answered in server.answered):
                    break
                threading.Event().wait(0.05)
            threading.Thread(target=server.stop).start()
            return Response(b"", status_code=503)
        return None

    server.fault = dies
    with pytest.raises(E1Error, match="problem p3"):
        _eval(server.url, "anthropic", tmp_path, batch_size=2)
    assert _stored(tmp_path) == ["p0", "p1"]  # p2 was answered, but its batch (with p3) was not written
    back = StandIn("anthropic", server.port).start()  # the server comes back on the same address
    try:
        samples, _ = _eval(back.url, "anthropic", tmp_path, batch_size=2)
    finally:
        back.stop()
    assert list(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert not any("Question 2" in answered for answered in back.answered)  # p2 came from the journal
    assert sum(server.answered.values()) + sum(back.answered.values()) == 4  # every sample answered exactly once
    assert not (tmp_path / "run" / "api-replies.jsonl").exists()  # the run is complete: the journal is gone
    _assert_nowhere(key, tmp_path / "run")
