"""Memory accounting of a training rank (:mod:`e1.grpo.memory`): the bytes of each kind, derived
by hand from the parameter count N (fp32: 4 bytes a weight; AdamW: two moments of 4 bytes and one
4-byte step counter per tensor it steps), on one device and under real DeepSpeed ZeRO-2/3 over two
gloo ranks, where each rank must hold its share only."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.grpo.memory import KINDS, Usage
from tests.test_train import contains_char, small, write_problems


@given(st.lists(st.integers(0, 2**40), min_size=len(KINDS), max_size=len(KINDS)))
@settings(max_examples=50, deadline=None)
def test_columns_name_every_kind_and_sum_to_the_total(values):
    usage = Usage(**dict(zip(KINDS, values)))
    assert usage.columns() == {f"{kind}_bytes": value for kind, value in zip(KINDS, values)}
    assert usage.total == sum(values)


def test_one_device_step_accounts_weights_moments_and_reference(tiny_model_dir, tmp_path):
    from e1.grpo.trainer import Trainer

    config = small(tiny_model_dir, write_problems(tmp_path / "problems.jsonl"), tmp_path / "run", save_every=100,
                   kl_coef=0.001)
    trainer = Trainer.create(config, reward=contains_char)
    with trainer.scorer:
        row = trainer.step()
    weights = list(trainer.policy.parameters())  # tied embeddings once
    n = sum(p.numel() for p in weights)
    reference = 4 * n + sum(b.numel() * b.element_size() for b in trainer.ref_model.buffers())  # + rotary inv_freq
    assert row["params_bytes"] == 4 * n
    assert row["optimizer_bytes"] == 8 * n + 4 * len(weights)  # exp_avg, exp_avg_sq; a float32 step per tensor
    assert row["master_bytes"] == 0  # torch's AdamW steps the weights themselves
    assert row["grads_bytes"] == 0  # set to None after the update
    assert row["reference_bytes"] == reference and row["rollout_bytes"] == 0  # rollouts decode with the policy
    assert row["gathered_bytes"] == row["buffers_bytes"] == 0
    assert all(math.isnan(row[f"{phase}_peak_bytes"]) for phase in ("rollout", "update", "sync"))  # no CUDA here


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    """tests/zero_memory.py over two gloo ranks: one update under ZeRO-2 and ZeRO-3, then a
    weights-only and a resumable save. ZeRO-3 keeps no weight whole outside a gather
    (persistence threshold 0), so every byte is a share. Its rows by stage."""
    pytest.importorskip("deepspeed", reason="pip install -e .[deepspeed]")
    from e1.models.tiny import build_tiny_model
    from tests.test_deepspeed import free_port

    root = tmp_path_factory.mktemp("zero")
    model = build_tiny_model(root / "model", hidden_size=128, intermediate_size=256, layers=2, heads=4, kv_heads=2)
    (root / "zero2.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    (root / "zero3.json").write_text(json.dumps({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}))
    env = os.environ | {"OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": os.environ.get(
        "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/e1/torch_extensions"))}
    script = Path(__file__).with_name("zero_memory.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               str(script), str(model), str(root)]
    result = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {row["stage"]: row for row in rows}


@pytest.mark.slow
def test_zero2_shards_the_optimizer_not_the_weights(zero_runs):
    row = zero_runs["zero2"]
    n, world, after = row["numel"], row["world"], row["after"]
    assert world == 2 and n % (2 * world) == 0  # shards without padding: the bytes below are exact
    assert after["params_bytes"] == 4 * n  # every rank holds every weight
    assert after["master_bytes"] == 4 * n // world  # fp32 master copy of this rank's partition
    assert after["optimizer_bytes"] == 8 * n // world + 4  # its two moments + one step counter (one flat tensor)
    assert after["gathered_bytes"] == row["gathered_inside"] == 0


@pytest.mark.slow
def test_zero3_holds_a_share_and_gathers_only_inside_a_scope(zero_runs):
    """Invariant: under ZeRO-3 no rank holds the whole weights outside a gather scope (after the
    update and the save, which gathers them); inside one it holds all of them."""
    row = zero_runs["zero3"]
    n, world, after = row["numel"], row["world"], row["after"]
    assert after["params_bytes"] == after["master_bytes"] == 4 * n // world
    assert after["optimizer_bytes"] == 8 * n // world + 4
    assert after["buffers_bytes"] == pytest.approx(4 * n // world, abs=64)  # its flat fp32 gradient partition
    assert after["gathered_bytes"] == 0
    assert row["gathered_inside"] == 4 * n  # what full_weights materialises, and frees on leaving


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_a_weights_only_save_writes_no_optimizer_state(zero_runs, stage):
    files = zero_runs[stage]["files"]
    assert "model.safetensors" in files["step_1"] and "model.safetensors" in files["step_2"]
    assert not any(f.startswith("deepspeed/") or f == "trainer_state.pt" for f in files["step_1"])
    shards = [f for f in files["step_2"] if f.endswith("optim_states.pt")]
    assert len(shards) == 2 and "trainer_state.pt" in files["step_2"]  # one optimizer shard per rank


QWEN_1_5B = {"num_hidden_layers": 28, "num_key_value_heads": 2, "head_dim": 128, "max_position_embeddings": 131072}


@given(prompts=st.sampled_from([2, 4, 8, 16, 32]), samples=st.integers(2, 16), think=st.integers(1, 8192),
       solve=st.integers(1, 4096), prompt=st.integers(0, 4096), context=st.one_of(st.none(), st.integers(64, 32768)),
       dtype=st.sampled_from(["float32", "bfloat16"]))
@settings(max_examples=100, deadline=None)
def test_the_kv_cache_holds_a_step_of_rollouts_and_one_whole_context(prompts, samples, think, solve, prompt, context, dtype):
    from types import SimpleNamespace

    from e1.grpo.config import TrainConfig, build_config
    from e1.grpo.rollout import kv_cache_bytes

    model = SimpleNamespace(**QWEN_1_5B)
    config = build_config(model="m", data="d", think=think, solve=solve, prompts_per_step=prompts,
                          samples_per_prompt=samples, mini_batch_prompts=prompts, dtype=dtype, max_model_len=context)
    per_token = 2 * 28 * 2 * 128 * (4 if dtype == "float32" else 2)  # keys and values of every layer
    size = kv_cache_bytes(config, model, prompt, world=1)
    assert size % per_token == 0
    tokens = size // per_token
    assert tokens >= prompts * samples * (prompt + think + solve)  # every row of the step at its longest at once
    assert tokens >= (context or 131072)  # vLLM refuses a cache that cannot hold one whole context
    assert tokens <= max(prompts * samples * (prompt + think + solve + 64 + 128), (context or 131072) + 128)  # no more
    assert kv_cache_bytes(config, model, prompt, world=2) <= size  # each rank's engine decodes its half
    for gib, expected in ((0, None), (1.5, 3 * 2**29)):  # 0: vLLM's own sizing from gpu_memory_utilization
        assert kv_cache_bytes(TrainConfig(model="m", data="d", kv_cache_gib=gib), model, prompt, world=1) == expected
    assert kv_cache_bytes(config, SimpleNamespace(), prompt, world=1) is None  # no KV shape known: vLLM decides
