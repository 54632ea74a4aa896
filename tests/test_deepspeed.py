"""ZeRO data-parallel training on CPU (gloo): world size 1 for zero2 and zero3, two processes by torchrun.

Each run is a subprocess (``torchrun``), so DeepSpeed's process group never leaks into other tests.
The first run on a machine compiles DeepSpeed's small shm op with g++ (~50 s); it is cached in
``~/.cache/e1/torch_extensions``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e1.errors import ConfigError
from e1.grpo.config import TrainConfig

pytest.importorskip("deepspeed", reason="pip install -e .[deepspeed]")  # CI installs the extra: never skipped there

TRAIN = {
    "think": 4,
    "solve": 4,
    "steps": 2,
    "prompts_per_step": 4,
    "samples_per_prompt": 2,
    "mini_batch_prompts": 2,
    "micro_batch": 2,
    "lr": 1e-2,
    "temperature": 1.0,
    "save_every": 1,
    "kl_coef": 0.001,
    "seed": 0,
}


def write_problems(path: Path, count: int = 8) -> Path:
    path.write_text(
        "".join(json.dumps({"problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(count))
    )
    return path


def free_port() -> int:
    """A free TCP port (torchrun's --master_port=0 hung here)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(processes: int, tmp_path: Path, model: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    data = write_problems(tmp_path / "problems.jsonl")
    options = [f"--{k.replace('_', '-')}={v}" for k, v in TRAIN.items()]
    env = os.environ | {
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/e1/torch_extensions")),
        "OMP_NUM_THREADS": "1",
        "E1_DEBUG": "1",
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={processes}",
        f"--master_port={free_port()}",
        "-m",
        "e1",
        "train",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        out,
        *options,
        *extra,
    ]
    result = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result


def check_run(run: Path, steps: int = 2) -> None:
    import pandas as pd

    from e1.engine.hf.hf_engine import HFEngine

    metrics = pd.read_parquet(run / "metrics.parquet")
    assert list(metrics["step"]) == list(range(1, steps + 1))
    assert metrics["loss"].notna().all() and (metrics["grad_norm"] > 0).all()
    final = run / "checkpoints" / f"step_{steps}"
    assert (final / "deepspeed").is_dir()
    engine = HFEngine.load(str(final))  # the HF folder loads as is
    assert sum(p.numel() for p in engine.model.parameters()) > 0


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_one_process(stage, tiny_model_dir, tmp_path):
    """One rank sees the same rollouts as the plain loop, so ZeRO must reproduce its metrics."""
    import pandas as pd

    from e1.grpo.trainer import train

    torchrun(1, tmp_path, tiny_model_dir, "run", "--deepspeed", stage)
    check_run(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["world_size"] == 1
    train(
        TrainConfig(model=str(tiny_model_dir), data=str(tmp_path / "problems.jsonl"), out=tmp_path / "plain", **TRAIN)
    )
    ds, plain = (
        pd.read_parquet(tmp_path / "run" / "metrics.parquet"),
        pd.read_parquet(tmp_path / "plain" / "metrics.parquet"),
    )
    for column in ("reward_mean", "loss", "grad_norm", "kl", "mean_think_tokens"):
        assert ds[column].tolist() == pytest.approx(plain[column].tolist(), rel=1e-4, abs=1e-6), column


@pytest.mark.slow
def test_two_processes_zero3_then_resume(tiny_model_dir, tmp_path):
    """Both ranks finish; rank 0 wrote the run; a resumed third step starts from the saved weights."""
    import torch
    from safetensors.torch import load_file

    torchrun(2, tmp_path, tiny_model_dir, "run", "--deepspeed", "zero3")
    run = tmp_path / "run"
    check_run(run)
    assert json.loads((run / "config.json").read_text())["world_size"] == 2
    saved = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(saved[k], initial[k]) for k in saved)  # training moved the weights
    torchrun(2, tmp_path, tiny_model_dir, "run", "--deepspeed", "zero3", "--steps=3", "--resume")
    check_run(run, steps=3)


def test_world_size_must_divide_the_step(tiny_model_dir, tmp_path):
    from e1.grpo.parallel import check_divisible

    config = TrainConfig(model="m", data="d", **TRAIN | {"prompts_per_step": 3, "mini_batch_prompts": 3})
    with pytest.raises(ConfigError, match="not divisible by the world size"):
        check_divisible(config, 2)


def test_presets_and_e1_keys_win(tmp_path):
    from e1.grpo.parallel import deepspeed_config

    config = TrainConfig(model="m", data="d", **TRAIN | {"deepspeed": "zero3", "grad_clip": 0.5})
    ds = deepspeed_config("zero3", config, world_size=2, micro_batches=3)
    assert ds["zero_optimization"] == {"stage": 3} and ds["gradient_clipping"] == 0.5
    assert ds["train_batch_size"] == 2 * 3 * 2  # micro_batch x accumulation x ranks
    (tmp_path / "ds.json").write_text(
        '{"zero_optimization": {"stage": 2, "overlap_comm": true}, "gradient_clipping": 9}'
    )
    ds = deepspeed_config(str(tmp_path / "ds.json"), config, world_size=1, micro_batches=1)
    assert ds["zero_optimization"]["overlap_comm"] and ds["gradient_clipping"] == 0.5
    with pytest.raises(ConfigError, match="unknown deepspeed"):
        TrainConfig(model="m", data="d", deepspeed="zero4")
