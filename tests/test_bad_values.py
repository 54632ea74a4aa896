"""Specific lines where a specific line is due: a data file's value nested 5,000 deep or holding a lone
surrogate, and task ``code`` on a row whose answer is no test list, are refused in one line naming the
file, row and field, as the dataset loads: before any request is sent or model loaded.

The gates: :func:`e1.data.json_values.check_value` (every local file's record, through
:func:`e1.data.records.read_records`), :func:`e1.rewards.check_tasks` (each row's answer against
its task's reward), and the reply gate for a server's reply (:func:`e1.engine.api.replies.accept`).
"""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.data.json_values import MAX_DEPTH
from e1.errors import DataError, E1Error, RewardError

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)


def _nested(depth: int, leaf) -> str:
    """The JSON text of ``leaf`` inside ``depth`` lists and objects (as text: json.dumps recurses)."""
    opening = "".join("[" if level % 2 else '{"k": ' for level in range(depth))
    return opening + json.dumps(leaf) + "".join("]" if level % 2 else "}" for level in reversed(range(depth)))


@settings(max_examples=40, deadline=None)
@given(
    depth=st.one_of(st.integers(0, 80), st.just(5000)),
    field=st.sampled_from(["problem", "answer", "meta"]),
    suffix=st.sampled_from([".jsonl", ".json"]),
    surrogate=st.one_of(st.none(), SURROGATES),
    at=st.integers(0, 20),
    in_key=st.booleans(),
)
def test_a_deep_value_or_a_lone_surrogate_in_a_data_file_is_one_line_naming_the_row_and_field(
    tmp_path_factory, depth, field, suffix, surrogate, at, in_key
):
    from e1.data.records import read_records

    text = "x" * at
    leaf = text if surrogate is None else text[: at // 2] + surrogate + text[at // 2 :]
    value = {leaf: 1} if in_key and surrogate is not None else leaf
    # ensure_ascii: a lone surrogate is written as its \\u escape, as valid JSON allows (the last of a key wins)
    row = f'{{"problem": "What is 1 + 1?", "answer": "2", "{field}": {_nested(depth, value)}}}'
    path = tmp_path_factory.mktemp("data") / f"probs{suffix}"
    path.write_text(row + "\n" if suffix == ".jsonl" else f"[{row}]")
    deep, bad_text = depth + (1 if in_key and surrogate is not None else 0) > MAX_DEPTH, surrogate is not None
    try:
        read_records(path)
    except DataError as err:
        line = str(err)
        assert "\n" not in line and str(path) in line
        assert deep or bad_text, line
        if not deep:  # the surrogate's field is named
            assert "lone surrogate" in line and f"field {field}" in line.replace("'", "")
            assert ("line 1" if suffix == ".jsonl" else "row 1") in line
        return
    assert not deep and not bad_text


ANSWERS = st.one_of(
    st.integers(),
    st.text(max_size=20),
    st.just("[]"),
    st.just('{"kind": "stdio"}'),
    st.just('[{"kind": "stdio", "input": "1", "output": "1"}]'),
    st.lists(
        st.fixed_dictionaries({"kind": st.just("stdio"), "input": st.text(max_size=3), "output": st.text(max_size=3)}),
        max_size=2,
    ).map(json.dumps),
)


@settings(max_examples=60, deadline=None)
@given(answer=ANSWERS)
def test_a_code_row_whose_answer_is_no_test_list_is_refused_as_the_dataset_loads(answer):
    import pandas as pd

    import e1.rewards  # noqa: F401  (registers the rewards)
    from e1.rewards import check_tasks
    from e1.rewards.code import parse_tests

    frame = pd.DataFrame({"id": ["p0", "c1"], "task": ["math", "code"], "answer": ["2", answer]})
    try:
        parse_tests(answer)
        readable = True
    except RewardError:
        readable = False
    try:
        check_tasks(frame, "--datasets probs")
    except RewardError as err:
        assert not readable and "\n" not in str(err) and "problem 'c1' (task code)" in str(err)
        return
    assert readable


@pytest.mark.parametrize(
    "row",
    [
        {"id": "c0", "problem": "write f", "answer": "5", "task": "code"},
        '{{"id": "d0", "problem": "x", "answer": {}}}'.format(_nested(5000, "2")),
        {"id": "s0", "problem": "x" + chr(0xD800), "answer": "2"},
    ],
)
def test_each_is_refused_before_any_request_is_sent(tmp_path, monkeypatch, capsys, row):
    from e1.cli.app import main
    from tests.test_api_backend import MODEL, StandIn

    data = tmp_path / "probs.jsonl"
    data.write_text((row if isinstance(row, str) else json.dumps(row)) + "\n")
    server = StandIn().start()
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "e1",
            "eval",
            "--backend",
            "openai",
            "--api-url",
            server.url,
            "--model",
            MODEL,
            "--mode",
            "none",
            "--think",
            "8",
            "--solve",
            "8",
            "--datasets",
            str(data),
            "--out",
            str(tmp_path / "run"),
        ],
    )
    try:
        with pytest.raises(SystemExit) as exit_:
            main()
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "please report" not in err and "probs" in err
    assert server.requests == []  # refused before anything was sent


def test_a_reply_nested_deep_or_holding_a_lone_surrogate_is_one_specific_line():
    from e1.engine.api.replies import Limits, Reply, RequestError, accept

    for raw, expected in [
        (b'{"choices": [{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", "nested deeper"),
        ({"choices": [{"text": "a" + chr(0xDC00)}]}, "lone surrogate"),
    ]:
        with pytest.raises(RequestError, match=expected):
            accept(Reply, raw, Limits())
    assert isinstance(RequestError("x"), E1Error)
