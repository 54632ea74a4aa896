"""GSM8K, GPQA-Diamond and MMLU-Pro: hub loaders run offline through local mirrors in each hub
repository's layout and schema; multiple-choice rows, their seeded shuffle, prompt and reward."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import e1.data
from e1.data import load_dataset, prepare, schema
from e1.data.choice import LETTERS, choice_row, shuffle_order, shuffle_seed
from e1.data.prompts import prompt_content
from e1.rewards import reward_for
from e1.rewards.choice import chosen_letter

GPQA_README = """---
configs:
- config_name: gpqa_diamond
  data_files:
  - split: train
    path: gpqa_diamond.csv
---
# GPQA
"""
GSM8K_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
# GSM8K
"""
GPQA_ROWS = [
    {
        "Pre-Revision Question": "q",
        "Question": "Which particle is a lepton?",
        "Correct Answer": "muon",
        "Incorrect Answer 1": "proton",
        "Incorrect Answer 2": "neutron",
        "Incorrect Answer 3": "pion",
        "Record ID": "recA1",
        "High-level domain": "Physics",
    },
    {
        "Pre-Revision Question": "q",
        "Question": "What is the pH of pure water at 25 C?",
        "Correct Answer": "7",
        "Incorrect Answer 1": "0",
        "Incorrect Answer 2": "14",
        "Incorrect Answer 3": "1",
        "Record ID": "recB2",
        "High-level domain": "Chemistry",
    },
]


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "mirror"
    gpqa = root / "Idavidrein/gpqa"
    gpqa.mkdir(parents=True)
    (gpqa / "README.md").write_text(GPQA_README)
    pd.DataFrame(GPQA_ROWS).to_csv(gpqa / "gpqa_diamond.csv", index=False)
    gsm8k = root / "openai/gsm8k"
    (gsm8k / "main").mkdir(parents=True)
    (gsm8k / "README.md").write_text(GSM8K_README)
    pd.DataFrame(
        {
            "question": ["Tom has 3 apples and buys 4. How many?", "A farm has 1,200 cows; half leave."],
            "answer": ["3 + 4 = <<3+4=7>>7\n#### 7", "1200 / 2 = <<1200/2=600>>600\n#### 600"],
        }
    ).to_parquet(gsm8k / "main/test-00000-of-00001.parquet", index=False)
    pd.DataFrame({"question": ["train q"], "answer": ["#### 1"]}).to_parquet(
        gsm8k / "main/train-00000-of-00001.parquet"
    )
    mmlu = root / "TIGER-Lab/MMLU-Pro/data"
    mmlu.mkdir(parents=True)
    pd.DataFrame(
        {
            "question_id": [70, 71],
            "question": ["Typical advertising regulatory bodies suggest ...", "What is 2 + 2?"],
            "options": [["Safe", "Unsafe", "Both", "Neither", "E", "F", "G", "H", "I", "J"], ["3", "4", "5"]],
            "answer": ["I", "B"],
            "answer_index": [8, 1],
            "cot_content": ["", ""],
            "category": ["business", "math"],
            "src": ["ori_mmlu-business", "ori_mmlu-math"],
        }
    ).to_parquet(mmlu / "test-00000-of-00001.parquet", index=False)
    monkeypatch.setenv("E1_HUB_MIRROR", str(root))
    return root


def test_gsm8k_answers_are_the_number_after_the_four_hashes(mirror, tmp_path):
    frame = pd.read_parquet(prepare(["gsm8k"], tmp_path / "out")[0])
    assert frame["answer"].tolist() == ["7", "600"]  # "1,200"-style separators go; the solution text does not stay
    assert set(frame["task"]) == {"math"} and frame["id"].tolist() == ["gsm8k-0", "gsm8k-1"]


def test_gpqa_options_are_shuffled_by_a_recorded_seed_and_the_letter_follows_the_answer(mirror, tmp_path):
    frame = pd.read_parquet(prepare(["gpqa-diamond"], tmp_path / "out")[0])
    assert list(frame.columns) == [*schema.COLUMNS, "choices", "shuffle_seed"]
    for row, source in zip(frame.itertuples(), GPQA_ROWS):
        choices = json.loads(row.choices)
        assert sorted(choices) == sorted(
            source[k] for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
        )
        assert choices[LETTERS.index(row.answer)] == source["Correct Answer"]
        assert row.shuffle_seed == shuffle_seed("gpqa-diamond", source["Record ID"])  # recorded, re-derivable
        assert f"{row.answer}) {source['Correct Answer']}" in row.problem and row.task == "choice"
    again = pd.read_parquet(prepare(["gpqa-diamond"], tmp_path / "again")[0])
    assert again.equals(frame)  # the same order on every preparation


def test_mmlu_pro_keeps_the_dataset_order_and_its_letter(mirror, tmp_path):
    frame = pd.read_parquet(prepare(["mmlu-pro"], tmp_path / "out")[0])
    assert frame["answer"].tolist() == ["I", "B"] and frame["id"].tolist() == ["70", "71"]
    assert json.loads(frame["choices"][1]) == ["3", "4", "5"] and frame["shuffle_seed"].tolist() == [-1, -1]
    assert "J) J" in frame["problem"][0] and "C) 5" in frame["problem"][1]


def test_a_choice_row_prompts_for_a_boxed_letter_and_is_scored_by_it(mirror, tmp_path):
    prepare(["mmlu-pro"], tmp_path / "data")
    frame = load_dataset("mmlu-pro", tmp_path / "data")
    prompt = prompt_content(frame.iloc[1].to_dict())
    assert prompt.startswith("What is 2 + 2?\n\nA) 3\nB) 4\nC) 5") and prompt.endswith("within \\boxed{}.")
    reward = reward_for("choice")
    scored = reward(["<think>4 is B</think> \\boxed{B}", "<think>x</think> \\boxed{4}", "<think>B"], ["B", "B", "B"])
    assert [s.reward for s in scored] == [1.0, 0.0, 0.0] and scored[0].extracted == "B"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=12).filter(str.strip), min_size=2, max_size=10, unique_by=str.strip),
    st.data(),
)
def test_a_shuffled_row_always_letters_the_correct_option(options, data):
    correct = data.draw(st.integers(0, len(options) - 1))
    seed = data.draw(st.one_of(st.none(), st.integers(0, 2**63 - 1)))
    row = choice_row("Q?", options, correct, seed)
    shown = json.loads(row["choices"])
    assert shown[LETTERS.index(row["answer"])] == options[correct].strip()
    assert sorted(shown) == sorted(o.strip() for o in options)
    if seed is not None:
        assert sorted(shuffle_order(len(options), seed)) == list(range(len(options)))


@pytest.mark.parametrize(
    ("solution", "letter"),
    [
        ("\\boxed{C}", "C"),
        ("\\boxed{(c)}", "C"),
        ("\\boxed{\\text{D}}", "D"),
        ("\\boxed{B) 42}", "B"),
        ("The answer is (A).", "A"),
        ("Answer: D", "D"),
        ("Answer: d", None),
        ("Answer: (d)", "D"),
        ("\\boxed{42}", None),
        ("I think B looks right", None),
        ("\\boxed{A} then \\boxed{B}", "B"),
        ("", None),
    ],
)
def test_the_chosen_letter_is_read_from_a_box_or_a_stated_answer_only(solution, letter):
    assert chosen_letter(solution) == letter


def test_the_new_benchmarks_are_registered_with_their_tasks():
    tasks = {b.name: b.task for b in e1.data.benchmarks()}
    assert (tasks["gsm8k"], tasks["gpqa-diamond"], tasks["mmlu-pro"]) == ("math", "choice", "choice")
