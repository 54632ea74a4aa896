"""Tab completion of option values (e1/cli/completion.py), through the completion entry the shell
scripts in completions/ call: ``_E1_COMPLETE=complete_bash COMP_WORDS=... COMP_CWORD=... e1``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from e1.cli.completion import data_files, mode_names
from e1.data import benchmark_names

HEAVY = ("torch", "transformers", "vllm", "pandas", "datasets")


def complete(line: str) -> list[str]:
    """What bash is offered for the last word of ``line`` (a trailing space: a new, empty word)."""
    words = line.split() + ([""] if line.endswith(" ") else [])
    env = {**os.environ, "_E1_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    result = subprocess.run([sys.executable, "-m", "e1"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize(
    "line, offered",
    [
        ("e1 eval --backend ", ["auto", "hf", "vllm", "openai", "gemini", "anthropic"]),
        ("e1 sweep --backend g", ["gemini"]),
        ("e1 sweep-budgets --backend g", ["gemini"]),  # the design card's name for e1 sweep
        ("e1 train --backend ", ["auto", "hf", "vllm"]),  # training takes no API backend
        ("e1 eval --dtype ", ["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]),
        ("e1 serve --dtype f", ["float32", "fp32", "float16", "fp16"]),
        ("e1 train --dtype ", ["float32", "bfloat16", "float16"]),
        ("e1 eval --sandbox ", ["auto", "unshare", "bwrap", "none"]),
        ("e1 train --sandbox b", ["bwrap"]),
        ("e1 train --algo ", ["grpo", "sft"]),
        ("e1 export runs/eval --format l", ["lm-eval", "lighteval"]),
    ],
)
def test_a_closed_set_offers_its_values(line, offered):
    assert complete(line) == offered


def test_modes_are_offered_from_the_mode_registry():
    assert complete("e1 eval --mode ") == list(mode_names())
    assert complete("e1 serve --mode e") == ["elastic", "early-exit"]
    assert complete("e1 sweep --modes ") == list(mode_names())
    assert complete("e1 sweep --modes elastic,soft:strength=8,tr") == ["elastic,soft:strength=8,truncate"]


def test_datasets_are_the_benchmarks_and_the_local_data_files(tmp_path):
    for name in ("problems.jsonl", "table.parquet", "notes.txt", ".hidden.jsonl"):
        (tmp_path / name).write_text("")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "extra.csv").write_text("")
    assert complete("e1 eval --datasets ") == [*benchmark_names(), "more/", "problems.jsonl", "table.parquet"]
    assert complete("e1 sweep --datasets aime,math5") == ["aime,math500"]
    assert complete("e1 eval --datasets aime,more/") == ["aime,more/extra.csv"]
    assert complete("e1 eval --datasets p") == ["problems.jsonl"]
    assert complete("e1 train --data dig") == ["digits", "digits-train"]


def test_data_files_are_found_as_typed(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.json").write_text("")
    assert data_files(f"{tmp_path}/d/") == [f"{tmp_path}/d/a.json"]  # absolute stays absolute
    assert data_files("d/a") == ["d/a.json"]
    assert data_files("nowhere/") == []  # no such folder: nothing, and no error


def test_completion_imports_no_heavy_library():
    code = (
        "import atexit, os, sys\n"
        f"atexit.register(lambda: print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules]))\n"
        "os.environ.update(_E1_COMPLETE='complete_bash', COMP_WORDS='e1 eval --datasets ', COMP_CWORD='3')\n"
        "from e1.cli.app import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "aime" in out and "HEAVY []" in out, out
