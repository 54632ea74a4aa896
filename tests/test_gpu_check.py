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
    gpu_check.merge(
        tmp_path, "vllm", {"e1 elastic / plain per token": {"value": 1.0123, "unit": "x", "goal": "<= 1.01"}}
    )
    gpu_check.merge(tmp_path, "train", {"zero3: peak memory (GPU)": {"value": 38.5, "unit": "GiB", "goal": "< 40"}})
    gpu_check.merge(
        tmp_path, "vllm", {"e1 elastic / plain per token": {"value": 1.005, "unit": "x", "goal": "<= 1.01"}}
    )
    lines = gpu_check.table(tmp_path).splitlines()
    assert len(lines) == 3  # header, the newer vllm row (a part's rerun replaces its rows), train
    assert "1.005" in lines[1] and "vllm" in lines[1] and "38.500" in lines[2] and "< 40" in lines[2]
    assert json.loads((tmp_path / "results.json").read_text()).keys() == {"vllm", "train"}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "--strategies", "zero4"], "unknown strategies ['zero4']"),
        (["engine"], "no model in"),
        (["table"], "no results in"),
    ],
)
def test_bad_input_is_one_line(tmp_path, argv, says):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *argv, "--out", str(tmp_path / "gc")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and says in result.stderr
    assert "Traceback" not in result.stderr


def test_a_child_past_its_time_is_cut_with_its_process_group(gpu_check, tmp_path):
    """The time guard: a benchmark that runs too long ends in Cut within the guard, and the process it
    started (vLLM's engine process would hold the GPU) ends with it."""
    import os
    import time

    pid_file = tmp_path / "grandchild"
    script = tmp_path / "slow.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\nprint('  ran plain vLLM: 2.000s, 100 tokens', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    with pytest.raises(gpu_check.Cut) as cut:
        gpu_check.run_json([str(script)], tmp_path / "slow.log", timeout=3)
    assert time.monotonic() - started < 40
    assert gpu_check.ran_lines(cut.value.log) == {"plain vLLM": (2.0, 100)}
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild outlived the cut")


def test_ran_lines_keeps_each_run_s_best_per_token(gpu_check, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "noise\n  ran plain vLLM: 4.000s, 100 tokens\n  ran e1 soft: 3.000s, 60 tokens\n"
        "  ran plain vLLM: 3.000s, 100 tokens\n  ran e1 soft: 9.000s, 90 tokens\n"
    )
    assert gpu_check.ran_lines(log) == {"plain vLLM": (3.0, 100), "e1 soft": (3.0, 60)}


def test_a_call_out_of_time_records_every_part_it_could_not_run(gpu_check, tmp_path):
    """call2 with no time left: each of its parts gets a 'not run' row in results.json, results.jsonl and
    table.md (a cut call still reports), and nothing is started."""
    gpu_check.main(["call2", "--tiny", "--out", str(tmp_path), "--budget", "5", "--model", str(tmp_path / "none")])
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results) == [part for part, _ in gpu_check.CALLS["call2"]]
    assert all("not run" in next(iter(rows)) for rows in results.values())
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(results) and all(json.loads(line)["part"] in results for line in lines)
    assert (tmp_path / "table.md").read_text().count("\n") == 2 + len(results)


def test_v2_row_says_why_it_is_skipped(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "V2_MODULE", tmp_path / "absent.py")
    rows = gpu_check.part_v2(tmp_path, tmp_path, True, 10)
    assert list(rows) == ["V1 vs V2: skipped (no e1/engine/vllm/v2_processor.py in this checkout)"]
