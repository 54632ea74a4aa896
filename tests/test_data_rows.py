"""Malformed source rows, generated in each registered family's schema: every one is either
prepared, skipped and counted (a blank problem or answer), or one DataError line naming the
dataset, the row and the field; never a ValueError, KeyError, ... that asks for a report."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import e1.data
from e1.data import get_benchmark, prepare_benchmark, registry
from e1.data.choice import LETTERS
from e1.errors import DataError

_STDIO_TESTS = json.dumps([{"input": "1\n", "output": "2\n", "testtype": "stdin"}])
_HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": "def f(x):\n    '''Double.'''\n",
    "entry_point": "f",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    "canonical_solution": "    return 2 * x\n",
}

# one valid record per family, as the hub (or the family's load function) hands it over
VALID = {
    "aime": {"id": 60, "problem": "Find x.", "answer": "204", "solution": "...", "url": "u"},
    "aime25": {"problem_idx": 1, "problem": "Find y.", "answer": 70},
    "amc": {"id": 0, "problem": "AMC one", "answer": 342.0, "url": "u"},
    "math500": {
        "problem": "p",
        "solution": "s",
        "answer": "3",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/1.json",
    },
    "minerva": {"question": "Compute the redshift.", "answer": "0.5"},
    "olympiad_bench": {"id": 9, "question": "physics", "final_answer": ["$g$"]},
    "deepscaler": {"problem": "Train one", "answer": "7", "solution": "..."},
    "gsm8k": {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    "gpqa-diamond": {
        "Question": "Which is a lepton?",
        "Correct Answer": "muon",
        "Incorrect Answer 1": "proton",
        "Incorrect Answer 2": "neutron",
        "Incorrect Answer 3": "pion",
        "Record ID": "recA1",
    },
    "mmlu-pro": {
        "question_id": 70,
        "question": "What is 2 + 2?",
        "options": ["3", "4", "5"],
        "answer": "B",
        "answer_index": 1,
        "cot_content": "",
        "category": "math",
        "src": "ori_mmlu-math",
    },
    "codeforces": {
        "problem_id": "1971A",
        "url": "https://codeforces.com/contest/1971/problem/A",
        "title": "Sum",
        "time_limit_ms": 1000,
        "memory_limit_mb": 256,
        "description": "Add.",
        "input": "a b",
        "output": "a+b",
        "interaction": "",
        "examples": [["1 2\n", "3\n"]],
        "note": "",
        "rating": 800,
    },
    "deepcoder": {
        "problem": "Add.",
        "tests": _STDIO_TESTS,
        "metadata": "{}",
        "starter_code": "",
        "_source": "lcbv5",
        "_id": "lcbv5-0",
    },
    "livecodebench": {
        "question_id": "abc301_a",
        "question_content": "Add.",
        "public_test_cases": _STDIO_TESTS,
        "private_test_cases": "",
        "metadata": "{}",
        "starter_code": "",
        "contest_date": "2024-09-01T00:00:00",
        "difficulty": "easy",
        "platform": "atcoder",
        "contest_id": "abc301",
    },
    "taco": {
        "question": "Add.",
        "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]}),
        "starter_code": "",
        "difficulty": "EASY",
        "source": "codeforces",
    },
    "humaneval": _HUMANEVAL,
    "humanevalplus": _HUMANEVAL,
}
GENERATED = {"digits", "digits-train"}  # written by e1 itself, not read from outside


def test_every_registered_family_has_a_valid_record_here():
    assert set(VALID) | GENERATED == set(e1.data.benchmark_names())


_TEST_KEYS = st.sampled_from(["input", "output", "testtype", "type", "fn_name", "func_name", "inputs", "outputs"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10**20)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["[", "{}", "null", "functional", "stdin", "#### ", "A", "Q"])
)
junk = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEST_KEYS | st.text(max_size=4), inner, max_size=4),
    max_leaves=10,
)
field_value = junk | junk.map(json.dumps) | st.lists(st.text(min_size=1, max_size=3), min_size=11, max_size=30)


def _other(record: dict) -> dict:
    """Another valid record of the same family, with its own id."""
    other = dict(record)
    for key in ("id", "problem_idx", "question_id", "unique_id", "Record ID", "task_id", "_id"):
        if key in other:
            other[key] = f"{other[key]}-other"
    if "problem_id" in other:
        other.update(problem_id="2000B", url="https://codeforces.com/contest/2000/problem/B")
    return other


def _prepares_or_names_the_field(name: str, record: dict, monkeypatch, out) -> None:
    valid, benchmark = VALID[name], get_benchmark(name)
    stand_in = replace(benchmark, load=lambda *_: [_other(valid), record])
    monkeypatch.setattr(registry, "_REGISTRY", {**registry._REGISTRY, name: stand_in})  # past the registry's gate
    try:
        prepared = prepare_benchmark(name, out)
    except DataError as err:
        message = str(err)
        assert "\n" not in message
        assert message.startswith(f"{benchmark.source}: row 2: field '"), message
    else:
        assert prepared.rows + prepared.skipped_rows == 2


DROPPED = object()
KINDS_OF_JUNK = [
    DROPPED,
    None,
    True,
    7,
    -1.5,
    float("nan"),
    "",
    " ",
    "x\ny",
    "[",
    "{}",
    "[1]",
    '[{"input": 1}]',
    '{"inputs": 1, "outputs": [2]}',
    [],
    [None],
    [1, "a"],
    [[1]],
    [{}],
    [{"input": [1]}],
    {},
    {"inputs": "x", "fn_name": 3},
    [f"option {n}" for n in range(17)],
]


@pytest.mark.parametrize("name", sorted(VALID))
def test_each_kind_of_junk_in_each_field_is_prepared_or_named(name, monkeypatch, tmp_path):
    for key in VALID[name]:
        for junk_value in KINDS_OF_JUNK:
            record = {k: v for k, v in VALID[name].items() if k != key}
            if junk_value is not DROPPED:
                record[key] = junk_value
            _prepares_or_names_the_field(name, record, monkeypatch, tmp_path / "out")


@pytest.mark.parametrize("name", sorted(VALID))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_malformed_row_is_one_line_naming_dataset_row_and_field(name, data, monkeypatch, tmp_path):
    record = dict(VALID[name])
    key = data.draw(st.sampled_from(sorted(record)), label="field")
    if data.draw(st.booleans(), label="drop it"):
        del record[key]
    else:
        record[key] = data.draw(field_value, label="value")
    _prepares_or_names_the_field(name, record, monkeypatch, tmp_path / "out")


@pytest.mark.parametrize("count", [17, 40])
def test_mmlu_pro_with_more_options_than_letters_names_the_row_and_field(count, monkeypatch, tmp_path):
    record = dict(VALID["mmlu-pro"], options=[f"option {n}" for n in range(count)], answer="B")
    benchmark = replace(get_benchmark("mmlu-pro"), load=lambda *_: [VALID["mmlu-pro"], record])
    monkeypatch.setattr(
        registry, "_REGISTRY", {**registry._REGISTRY, "mmlu-pro": benchmark}
    )  # past the registry's gate
    with pytest.raises(DataError) as info:
        prepare_benchmark("mmlu-pro", tmp_path / "out")
    assert info.value.message == (
        f"TIGER-Lab/MMLU-Pro: row 2: field 'options' holds {count} options, "
        f"more than the {len(LETTERS)} letters A-{LETTERS[-1]}"
    )


def test_mmlu_pro_with_as_many_options_as_letters_prepares(monkeypatch, tmp_path):
    record = dict(
        VALID["mmlu-pro"], question_id=71, options=[f"option {n}" for n in range(len(LETTERS))], answer=LETTERS[-1]
    )
    stand_in = replace(get_benchmark("mmlu-pro"), load=lambda *_: [record])
    monkeypatch.setattr(registry, "_REGISTRY", {**registry._REGISTRY, "mmlu-pro": stand_in})  # past the registry's gate
    assert prepare_benchmark("mmlu-pro", tmp_path / "out").rows == 1


@pytest.mark.parametrize(
    ("date", "outcome"),
    [
        ("2024-09-01T00:00:00", 1),
        ("2024-09-01T00:00:00+09:00", 1),
        ("2023-01-01", 0),
        ("soon", "field 'contest_date' holds 'soon', not a date"),
        (None, "field 'contest_date' holds None, not a date"),
    ],
)
def test_livecodebench_contest_dates_are_read_or_named(date, outcome, tmp_path, monkeypatch):
    folder = tmp_path / "mirror/livecodebench/code_generation_lite"
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text(json.dumps(dict(VALID["livecodebench"], contest_date=date)) + "\n")
    monkeypatch.setenv("E1_HUB_MIRROR", str(tmp_path / "mirror"))
    release_1 = {"release": "v1"}  # test.jsonl alone
    if isinstance(outcome, int) and outcome:
        assert prepare_benchmark("livecodebench", options=release_1).rows == outcome
        return
    with pytest.raises(DataError) as info:
        prepare_benchmark("livecodebench", options=release_1)
    message = info.value.message
    assert ("no problem of release v1" in message) if outcome == 0 else message.endswith(f"'abc301_a': {outcome}")
