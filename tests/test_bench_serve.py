"""benchmarks/serve.py's report, on stand-in runs: it compares time per token actually generated, so a
model that ends requests early (EOS before the budget) is measured, not refused."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def serve():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_serve", BENCH / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.tuples(st.integers(1, 4000), st.integers(1, 4000), st.integers(1, 4000)),
    secs=st.tuples(st.floats(0.5, 20), st.floats(0.5, 20), st.floats(0.5, 20)),
    raw=st.booleans(),
)
def test_ratios_are_per_token_generated_whatever_the_counts(serve, tokens, secs, raw):
    (budgeted_tokens, plain_tokens, raw_tokens), (budgeted_s, plain_s, raw_s) = tokens, secs
    runs = {"budgeted": (budgeted_s, (1.0, budgeted_tokens)), "plain": (plain_s, (2.0, plain_tokens))}
    serve.interleaved_best = lambda repeats, fns: {name: runs[name] for name in fns}  # the module is this test's own
    args = argparse.Namespace(model=None, hidden=128, layers=2, requests=32, repeats=1, concurrency="32")
    found = serve.report(
        args, 16, 16, 34, lambda c, extra, most: lambda: None, {}, {}, {32: (raw_s, (0.5, raw_tokens))} if raw else {}
    )
    assert found[32]["time per token"] == pytest.approx((budgeted_s / budgeted_tokens) / (plain_s / plain_tokens))
    assert found[32]["latency"] == pytest.approx(0.5)
    if raw:
        assert found[32]["e1 serve / raw vLLM per token"] == pytest.approx(
            (plain_s / plain_tokens) / (raw_s / raw_tokens)
        )
    else:
        assert "e1 serve / raw vLLM per token" not in found[32]
