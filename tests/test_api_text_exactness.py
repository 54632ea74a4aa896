"""A run on a plain server whose replies carry no token ids says it is not token-exact: in config.json
(``api_method.token_exact``, ``exactness``) and in one warning line as the engine loads, never silently.

Without ids e1 splits thinking from the solution at the end marker's text and counts from ``usage``, so a
marker the model spells out ends thinking too, and the stored ids are re-tokenised. Before, the record was
written but nothing was said while the run ran (``e1 sweep`` and a library caller never said it at all).
The stand-in on 127.0.0.1 (``tests/test_api_backend.py``) returns generated texts without ids, its body
sent in chunks that split the marker, with marker-like text inside the solution.
"""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.api.openai_engine import ApiSettings, OpenAIEngine
from e1.engine.base import Mode, Sampling
from tests.test_api_backend import END, MODEL, StandIn, _eval, stand_in, tokenizer_dir  # noqa: F401  (fixtures)

PIECES = st.sampled_from([" a", " b", "</thi", "nk>", "<think>", " </", "think", ">", " \\boxed{5}", " 7"])
TEXTS = st.lists(PIECES, max_size=6).map("".join)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "token-exact" in r.getMessage()]


def _chunked(text: str, cuts: list[int], tokens: int):
    """A one-call reply whose body goes out in chunks cut at ``cuts`` (inside the marker, too)."""
    raw = json.dumps(
        {
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "stop_reason": None}],
            "usage": {"prompt_tokens": 9, "completion_tokens": tokens},
        }
    ).encode()
    at = raw.index(json.dumps(text)[1:-1].encode()) if text else 0
    bounds = sorted({0, len(raw), *(min(len(raw), at + c) for c in cuts)})

    def write(handler):
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        for start, end in zip(bounds, bounds[1:]):
            handler.wfile.write(b"%x\r\n%s\r\n" % (end - start, raw[start:end]))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")

    return write


@pytest.mark.parametrize("server", ["text only", "ids in, none out", "ids in and out"])
def test_a_run_without_reply_ids_says_so_in_one_warning_line(stand_in, tokenizer_dir, caplog, server):  # noqa: F811
    from e1.engine.hf.hf_engine import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    if server != "text only":
        stand_in.decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
    if server == "ids in and out":
        stand_in.token_ids = lambda choice, body: tokenizer.encode(choice["text"], add_special_tokens=False)
    with caplog.at_level(logging.WARNING):
        engine = OpenAIEngine.load(MODEL, ApiSettings(stand_in.url, tokenizer=tokenizer_dir), [Mode("none")])
    exact = engine.describe()["token_exact"]
    assert exact == (server == "ids in and out")
    lines = _warnings(caplog)
    assert len(lines) == (0 if exact else 1) and all("\n" not in line for line in lines)
    if lines:
        assert "NOT token-exact" in lines[0] and "end marker's text" in lines[0] and "127.0.0.1" in lines[0]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(think=TEXTS, solution=TEXTS, marker=st.booleans(), cuts=st.lists(st.integers(0, 60), max_size=4))
def test_a_text_reply_is_split_at_the_first_marker_text_and_its_counts_are_the_replys(
    stand_in,  # noqa: F811
    tokenizer_dir,  # noqa: F811
    caplog,
    think,
    solution,
    marker,
    cuts,
):
    """Generated texts (marker pieces, marker-like text in the solution), the body chunked inside the marker:
    the row is split at the first marker text (what config.json's exactness says), its counts add up to the
    reply's usage, and the load said, in one line, that the run is not token-exact."""
    think = think.replace(END, "")
    text = think + (END + solution if marker else "")
    tokens = 40
    stand_in.fault = lambda path, body: (
        _chunked(text, cuts, tokens) if body.get("prompt") == "q" and not body.get("stop") else None
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        engine = OpenAIEngine.load(MODEL, ApiSettings(stand_in.url, tokenizer=tokenizer_dir), [Mode("none")])
    assert len(_warnings(caplog)) == 1 and not engine.describe()["token_exact"]
    row = engine.generate(["q"], Budget(8, 8), Mode("none"), Sampling(temperature=0, max_tokens=tokens))[0]
    first, found, rest = text.partition(END)
    assert row.closed == bool(found)
    assert row.think_tokens + row.solve_tokens == tokens  # the reply's usage, all of it
    # texts decoded as the local engines decode them: special tokens (a '<think>' in the solution) dropped
    tokens_of = engine.tokenizer.encode
    decode = lambda t: engine.tokenizer.decode(tokens_of(t, add_special_tokens=False), skip_special_tokens=True)  # noqa: E731
    assert row.solution_text == decode(rest)


def test_an_eval_on_a_text_only_server_records_it_and_warns_once(stand_in, tokenizer_dir, tmp_path, caplog):  # noqa: F811
    with caplog.at_level(logging.WARNING):
        _eval(stand_in.url, tokenizer_dir, tmp_path)
    record = json.loads((tmp_path / "run" / "config.json").read_text())["api_method"]
    assert record["token_exact"] is False and "end marker's text" in record["exactness"]
    assert len(_warnings(caplog)) == 1
