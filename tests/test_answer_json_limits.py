"""A code row's answer that is JSON past what Python reads (nested past its recursion limit, an integer
past its digit limit), and a .csv field past the csv module's 128 KiB, are one specific line as the
dataset loads (:func:`e1.rewards.check_tasks` through ``parse_tests``; :func:`e1.data.preparation.read_records`),
never the "please report it" line of an unexpected error.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.errors import DataError, RewardError

DEEP = st.integers(3_000, 60_000).map(lambda depth: "[" * depth + "]" * depth)
HUGE_INT = st.integers(4_400, 20_000).map(
    lambda digits: json.dumps([{"kind": "call", "fn": "f", "args": [], "expected": 0}]).replace(
        "0}", "7" * digits + "}"
    )
)


@settings(max_examples=10, deadline=None)
@given(answer=st.one_of(DEEP, HUGE_INT))
def test_a_code_answer_past_what_json_reads_is_one_line_as_the_dataset_loads(answer):
    import pandas as pd

    import e1.rewards  # noqa: F401  (registers the rewards)
    from e1.rewards import check_tasks

    frame = pd.DataFrame({"id": ["c1"], "task": ["code"], "answer": [answer]})
    with pytest.raises(RewardError) as caught:
        check_tasks(frame, "--datasets probs")
    assert "\n" not in str(caught.value) and "problem 'c1' (task code)" in str(caught.value)


@settings(max_examples=5, deadline=None)
@given(kib=st.integers(129, 600), column=st.sampled_from(["problem", "answer"]))
def test_a_csv_field_past_the_csv_limit_is_one_line_naming_the_file(tmp_path_factory, kib, column):
    from e1.data.preparation import read_records

    path = tmp_path_factory.mktemp("csv") / "probs.csv"
    row = {"problem": "p", "answer": "1", column: "x" * (kib * 1024)}
    path.write_text("problem,answer\n" + f"{row['problem']},{row['answer']}\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_records(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value) and "128 KiB" in str(caught.value)
