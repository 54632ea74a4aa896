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

    config = small(
        tiny_model_dir, write_problems(tmp_path / "problems.jsonl"), tmp_path / "run", save_every=100, kl_coef=0.001
    )
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
    (root / "zero3.json").write_text(
        json.dumps({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    )
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/e1/torch_extensions")),
    }
    script = Path(__file__).with_name("zero_memory.py")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        str(script),
        str(model),
        str(root),
    ]
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


@given(
    prompts=st.sampled_from([2, 4, 8, 16, 32]),
    samples=st.integers(2, 16),
    think=st.integers(1, 8192),
    solve=st.integers(1, 4096),
    prompt=st.integers(0, 4096),
    context=st.one_of(st.none(), st.integers(64, 32768)),
    dtype=st.sampled_from(["float32", "bfloat16"]),
)
@settings(max_examples=100, deadline=None)
def test_the_kv_cache_holds_a_step_of_rollouts_and_one_whole_context(
    prompts, samples, think, solve, prompt, context, dtype
):
    from types import SimpleNamespace

    from e1.grpo.config import TrainConfig
    from e1.grpo.config_file import build_config
    from e1.grpo.rollout import kv_cache_bytes

    model = SimpleNamespace(**QWEN_1_5B)
    config = build_config(
        model="m",
        data="d",
        think=think,
        solve=solve,
        prompts_per_step=prompts,
        samples_per_prompt=samples,
        mini_batch_prompts=prompts,
        dtype=dtype,
        max_model_len=context,
    )
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


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory):
    """tests/zero_reference.py over two gloo ranks: the KL reference under ZeRO-3 (persistence
    threshold 0: every weight partitioned), without and with ``ref_offload``. Rows by (offload, rank)."""
    pytest.importorskip("deepspeed", reason="pip install -e .[deepspeed]")
    from e1.models.tiny import build_tiny_model
    from tests.test_deepspeed import free_port

    root = tmp_path_factory.mktemp("reference")
    model = build_tiny_model(root / "model", hidden_size=128, intermediate_size=256, layers=2, heads=4, kv_heads=2)
    (root / "zero3.json").write_text(
        json.dumps({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    )
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/e1/torch_extensions")),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        str(Path(__file__).with_name("zero_reference.py")),
        str(model),
        str(root),
    ]
    result = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    rows = [json.loads(line) for path in sorted(root.glob("rows-*.jsonl")) for line in path.read_text().splitlines()]
    return {(row["offload"], row["rank"]): row for row in rows}


@pytest.mark.slow
@pytest.mark.parametrize("offload", [False, True])
def test_zero3_reference_is_partitioned_like_the_policy(reference_runs, offload):
    """Invariant: under ZeRO-3 each rank holds 1/W of the reference's weights, none of them whole
    outside a forward, and the accounting counts exactly that share (fp32: 4 bytes a weight)."""
    for rank in (0, 1):
        row = reference_runs[(offload, rank)]
        n, world = row["numel"], row["world"]
        assert world == 2 and n % (2 * world) == 0  # shards without padding: the counts below are exact
        assert row["full"] == n and row["local"] == n // world and row["whole"] == 0
        assert row["reference_bytes"] == 4 * row["local"] + row["buffer_bytes"]  # + rotary inv_freq
        assert not row["trainable"]


@pytest.mark.slow
@pytest.mark.parametrize("offload", [False, True])
def test_zero3_reference_is_built_partitioned(reference_runs, offload):
    """Invariant: the reference leaves its loader already partitioned (built under zero.Init):
    every weight a DeepSpeed parameter, none held whole, no partition over its 1/W share. A model
    loaded whole and wrapped later would pass through the accelerator whole at DeepSpeed's engine
    setup (its ``module.to(device)``). A model loaded after it loads whole again (``numel``)."""
    for rank in (0, 1):
        row = reference_runs[(offload, rank)]
        built = row["built"]
        assert built["ds_ids"] and built["largest_held"] == 0
        assert 0 < built["largest_partition"] <= built["largest_share"]
        assert row["numel"] == row["full"]  # the whole model loaded after it: zero3_loading was cleared


@pytest.mark.parametrize("stage", [0, 1, 2, 3, None])
@pytest.mark.parametrize("raises", [False, True])
def test_zero3_loading_is_registered_only_while_open(stage, raises):
    """transformers sees ZeRO-3 exactly inside ``zero3_loading`` (and only for a stage-3 config),
    and not after it, even when the load inside fails."""
    from transformers.integrations import deepspeed_config, is_deepspeed_zero3_enabled

    from e1.grpo.parallel import zero3_loading

    config = {"zero_optimization": {"stage": stage}} if stage is not None else {}
    try:
        with zero3_loading(config):
            assert is_deepspeed_zero3_enabled() == (stage == 3) and deepspeed_config() is config
            if raises:
                raise KeyError("load failed")
    except KeyError:
        assert raises
    assert not is_deepspeed_zero3_enabled() and deepspeed_config() is None


@pytest.mark.slow
@pytest.mark.parametrize("offload", [False, True])
def test_zero3_reference_log_probs_equal_the_whole_models(reference_runs, offload):
    """Each rank's own micro-batches (whole groups and split ones) score the same under the
    partitioned reference as under the model loaded whole."""
    for rank in (0, 1):
        assert reference_runs[(offload, rank)]["max_diff"] <= 1e-5


@pytest.mark.slow
def test_ref_offload_keeps_the_partition_in_cpu_memory(reference_runs):
    """DeepSpeed runs the reference with its parameter offload to the CPU exactly when asked.
    On a CPU-only machine the accelerator is the CPU too, so "off the accelerator" is only
    visible on a GPU, where the same rows must show the partitions' device as cpu."""
    for rank in (0, 1):
        assert reference_runs[(True, rank)]["offload_device"] == "cpu"
        assert reference_runs[(True, rank)]["devices"] == ["cpu"]
        assert reference_runs[(False, rank)]["offload_device"] is None


@given(
    stage=st.one_of(st.none(), st.integers(0, 3)),
    preset=st.booleans(),
    offload=st.booleans(),
    extra=st.dictionaries(
        st.sampled_from(["overlap_comm", "reduce_bucket_size", "offload_optimizer"]),
        st.one_of(st.booleans(), st.integers(1, 10**9)),
    ),
)
@settings(max_examples=40, deadline=None)
def test_ref_offload_is_accepted_exactly_under_zero3(tmp_path_factory, stage, preset, offload, extra):
    """The one gate (TrainConfig): ``ref_offload`` with a preset or a JSON file of any stage, or
    with no DeepSpeed at all, is refused with one line unless the run is ZeRO-3."""
    pytest.importorskip("deepspeed", reason="pip install -e .[deepspeed]")
    from e1.errors import ConfigError
    from e1.grpo.config import TrainConfig

    if stage is None:
        spec = None
    elif preset and stage > 0:
        spec = f"zero{stage}"
    else:
        spec = str(tmp_path_factory.mktemp("ds") / "ds.json")
        Path(spec).write_text(json.dumps({"zero_optimization": {"stage": stage, **extra}}))
    if offload and stage != 3:
        with pytest.raises(ConfigError, match="ref_offload needs ZeRO-3"):
            TrainConfig(model="m", data="d", deepspeed=spec, ref_offload=offload)
    else:
        assert TrainConfig(model="m", data="d", deepspeed=spec, ref_offload=offload).ref_offload == offload


@given(
    policy=st.fixed_dictionaries(
        {
            "zero_optimization": st.fixed_dictionaries(
                {"stage": st.integers(0, 3)},
                optional={
                    "overlap_comm": st.booleans(),
                    "offload_optimizer": st.just({"device": "cpu"}),
                    "stage3_param_persistence_threshold": st.integers(0, 10**6),
                },
            )
        },
        optional={
            "optimizer": st.just({"type": "AdamW"}),
            "gradient_clipping": st.floats(0.1, 10),
            "bf16": st.just({"enabled": True}),
            "train_micro_batch_size_per_gpu": st.integers(1, 8),
        },
    ),
    offload=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_the_reference_config_is_inference_only_zero3(policy, offload):
    """Whatever the policy's config, the reference's has no optimizer to build, partitions at
    stage 3, offloads its parameters exactly when asked, and keeps every other key of the policy's."""
    from e1.grpo.parallel import reference_config

    ref = reference_config(policy, offload)
    zero = ref["zero_optimization"]
    assert zero["stage"] == 3 and "offload_optimizer" not in zero
    assert ("offload_param" in zero) == offload and (not offload or zero["offload_param"]["device"] == "cpu")
    assert "optimizer" not in ref and "gradient_clipping" not in ref
    kept = {k: v for k, v in policy.items() if k not in ("optimizer", "gradient_clipping", "zero_optimization")}
    assert {k: v for k, v in ref.items() if k != "zero_optimization"} == kept
    for key, value in policy["zero_optimization"].items():
        assert key in ("stage", "offload_optimizer") or zero[key] == value


def saved_tensor_bytes(model_step) -> tuple[int, object]:
    """Bytes of the distinct storages autograd keeps for the backward while ``model_step()`` runs
    (those a checkpointed layer recomputes are never kept), and its result."""
    import torch

    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = model_step()
    return sum(seen.values()), result


@pytest.mark.parametrize("micro_batch", [4, 2])  # whole groups (a shared prompt forward) and split ones
def test_activation_checkpointing_gives_the_same_gradients_and_keeps_less(tiny_model_dir, tmp_path, micro_batch):
    """The update under activation checkpointing: the same loss and gradients as without (it only
    recomputes), fewer bytes kept for the backward, and every layer as it was afterwards (the
    rollout engine decodes with the same module, with its KV cache)."""
    import torch

    from e1.grpo.batches import (
        activation_checkpointing,
        checkpointed_layers,
        recomputing,
    )
    from e1.grpo.trainer import Trainer
    from tests.test_train import planned_step

    config = small(
        tiny_model_dir,
        write_problems(tmp_path / "problems.jsonl"),
        tmp_path / "run",
        kl_coef=0.0,
        micro_batch=micro_batch,
        save_every=100,
    )
    trainer = Trainer.create(config, reward=contains_char)
    mb = planned_step(trainer)[2][0][0]
    layers = checkpointed_layers(trainer.policy)
    assert layers and not recomputing(trainer.policy)
    results = {}
    for enabled in (False, True):
        trainer.policy.zero_grad(set_to_none=True)
        with activation_checkpointing(trainer.policy, enabled):
            assert recomputing(trainer.policy) == enabled
            kept, (loss, _) = saved_tensor_bytes(lambda: trainer.policy_objective(mb, float(mb.mask.sum())))
            loss.backward()
        results[enabled] = kept, float(loss.detach()), [p.grad.clone() for p in trainer.policy.parameters()]
        assert not recomputing(trainer.policy) and not any(layer.training for layer in layers)
    (plain_kept, plain_loss, plain_grads), (kept, loss, grads) = results[False], results[True]
    assert loss == pytest.approx(plain_loss, abs=1e-6)
    for grad, plain in zip(grads, plain_grads):
        torch.testing.assert_close(grad, plain, rtol=1e-4, atol=1e-6)
    assert kept < plain_kept
    assert trainer.rollouts.generate([0], step=1)  # decoding with the policy module still works


def test_activation_checkpointing_trains_end_to_end(tiny_model_dir, tmp_path):
    import pandas as pd

    from e1.grpo.trainer import train

    config = small(
        tiny_model_dir,
        write_problems(tmp_path / "problems.jsonl"),
        tmp_path / "run",
        steps=2,
        kl_coef=0.001,
        activation_checkpointing=True,
    )

    metrics = pd.read_parquet(train(config, reward=contains_char) / "metrics.parquet")
    assert len(metrics) == 2 and metrics["loss"].notna().all() and (metrics["grad_norm"] > 0).all()
