"""benchmarks/gpu_check.py, the GPU check, on a CPU: its memory probe, its table and its refusals.
The parts themselves are run by hand (`gpu_check.py all --tiny` here, the parts one call each on a GPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peak_memory_sees_a_child_process_tree(gpu_check, monkeypatch):
    """A grandchild that holds 300 MiB for a second is counted (the probe sums the whole tree)."""
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)  # the CPU probe, even where nvidia-smi exists
    hold = "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {hold!r}])"
    with gpu_check.PeakMemory() as peak:
        process = subprocess.Popen([sys.executable, "-c", child])
        peak.watch(process.pid)
        process.wait()
    assert peak.where == "RSS"
    assert 0.29 <= peak.gib < 1.0


def test_table_lists_every_row_a_part_merged(gpu_check, tmp_path):
    gpu_check.merge(tmp_path, "vllm", {"e1 elastic / plain per token": {"value": 1.0123, "unit": "x", "goal": "<= 1.01"}})
    gpu_check.merge(tmp_path, "train", {"zero3: peak memory (GPU)": {"value": 38.5, "unit": "GiB", "goal": "< 40"}})
    gpu_check.merge(tmp_path, "vllm", {"e1 elastic / plain per token": {"value": 1.005, "unit": "x", "goal": "<= 1.01"}})
    lines = gpu_check.table(tmp_path).splitlines()
    assert len(lines) == 3  # header, the newer vllm row (a part's rerun replaces its rows), train
    assert "1.005" in lines[1] and "vllm" in lines[1] and "38.500" in lines[2] and "< 40" in lines[2]
    assert json.loads((tmp_path / "results.json").read_text()).keys() == {"vllm", "train"}


@pytest.mark.parametrize(("argv", "says"), [
    (["train", "--strategies", "zero4"], "unknown strategies ['zero4']"),
    (["engine"], "no model in"),
    (["table"], "no results in"),
])
def test_bad_input_is_one_line(tmp_path, argv, says):
    result = subprocess.run([sys.executable, str(SCRIPT), *argv, "--out", str(tmp_path / "gc")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0 and says in result.stderr
    assert "Traceback" not in result.stderr
