"""Where one GPU's memory goes in GRPO under ZeRO-3 at the 1.5B shape, estimated on a CPU, and
what each memory option of ``e1 train`` takes off it.

    python benchmarks/grpo_memory.py          # about 3 minutes on 2 cores
    python benchmarks/grpo_memory.py --micro-batch 4 --completion 768 --prompt 48

Two measurements, each scaled to the shape of ``benchmarks/gpu_check.py``'s GRPO rows (Qwen2-1.5B:
1.54e9 weights, 28 layers, vocabulary 151,936; micro-batches of 8 sequences, 512 + 256 tokens):

1. **State** (bytes a weight): one ZeRO-3 update of a tiny model on one gloo rank, run by e1's own
   :class:`~e1.grpo.parallel.ZeRO`, with the reference made by ``ZeRO.reference`` and a rollout
   copy as ``e1.grpo.rollout`` loads one, counted by :func:`e1.grpo.memory.account` and divided
   by the weight count: it scales exactly with the weights.
2. **Activations** (bytes a token): the storages autograd keeps for the backward of one
   micro-batch's GRPO loss (the update's forward), at Qwen2-1.5B's width with 1 and 2 layers and
   two completion lengths, with and without ``activation_checkpointing``; the difference gives
   the bytes per token per layer and per token of the logits, scaled to 28 layers and the step's
   tokens. The backward adds transients on top: one recomputed layer under checkpointing, and
   the logits' gradient (``B x C x V``); both are added.

A single GPU is a world of one: ZeRO-3 then partitions nothing, so only dtype, offloading and
activations change the figure. On one GPU the rows are a lower bound of ``nvidia-smi``'s peak
(the caching allocator's fragmentation and CUDA's context, about 0.5 GiB, come on top).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

QWEN_1_5B = {
    "weights": 1_543_714_304,
    "layers": 28,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "heads": 12,
    "kv_heads": 2,
    "vocab": 151_936,
}
GIB = 2**30


def state_worker(root: str) -> None:
    """Under torchrun (one rank): each dtype's bytes a weight by kind (e1.grpo.memory's kinds)."""
    import torch

    from e1.engine import load_model
    from e1.grpo.config_file import build_config
    from e1.grpo.memory import account
    from e1.grpo.parallel import ZeRO, launch

    model_dir = f"{root}/model"
    for dtype in ("float32", "bfloat16"):
        config = build_config(
            model=model_dir,
            data="d",
            deepspeed=f"{root}/zero3.json",
            prompts_per_step=2,
            mini_batch_prompts=2,
            samples_per_prompt=2,
            micro_batch=4,
            device="cpu",
            dtype=dtype,
            out=f"{root}/out",
        )
        rank, world, _ = launch(config)
        strategy = ZeRO(load_model(model_dir, dtype, "cpu"), config, rank, world)
        ids = torch.arange(8).reshape(2, 4)  # [B, L]
        strategy.backward(strategy.model(ids, labels=ids).loss)  # the mini-batch's last micro-batch: steps
        reference = strategy.reference(lambda where, dtype=dtype: load_model(model_dir, dtype, where))
        rollout = load_model(model_dir, dtype, "cpu")  # ZeRO-3's transformers rollouts decode with a plain copy
        weights = sum(p.ds_numel for p in strategy.policy.parameters())
        usage = account(strategy, reference, rollout).columns()
        print(json.dumps({"dtype": dtype, "per_weight": {k: v / weights for k, v in usage.items()}}), flush=True)


def measure_state(root: Path) -> dict[str, dict[str, float]]:
    from e1.models.tiny import build_tiny_model

    build_tiny_model(root / "model", hidden_size=128, intermediate_size=256, layers=2, heads=4, kv_heads=2)
    (root / "zero3.json").write_text(
        json.dumps({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    )
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/e1/torch_extensions")),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=1",
        f"--master_port={free_port()}",
        __file__,
        "--state-worker",
        str(root),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=900)
    if result.returncode:
        raise SystemExit(result.stdout[-2000:] + result.stderr[-4000:])
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {row["dtype"]: row["per_weight"] for row in rows}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kept_bytes(
    layers: int, dtype: str, rows: int, prompt: int, completion: int, checkpointing: bool, group: int = 2
) -> int:
    """Bytes autograd keeps for the backward of one micro-batch's GRPO loss at Qwen2-1.5B's width."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from e1.grpo.batches import MicroBatch, activation_checkpointing, completion_logits
    from e1.grpo.core import log_probs_and_entropy, policy_loss
    from e1.grpo.loss_config import GRPOLossConfig

    shape = QWEN_1_5B
    torch.manual_seed(0)
    model = (
        Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=shape["vocab"],
                hidden_size=shape["hidden_size"],
                intermediate_size=shape["intermediate_size"],
                num_hidden_layers=layers,
                num_attention_heads=shape["heads"],
                num_key_value_heads=shape["kv_heads"],
                tie_word_embeddings=True,
            )
        )
        .to(getattr(torch, dtype))
        .eval()
    )
    ids = torch.randint(0, shape["vocab"], (rows, completion))  # [B, C]
    mask = torch.ones_like(ids)
    mb = MicroBatch(
        list(range(rows)),
        group,
        torch.randint(0, shape["vocab"], (rows // group, prompt)),
        torch.ones(rows // group, prompt, dtype=torch.long),
        ids,
        mask,
        mask.bool(),
        torch.ones(rows),
    )
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with activation_checkpointing(model, checkpointing), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = completion_logits(model, mb)  # [B, C, V]
        log_probs, entropy = log_probs_and_entropy(logits, mb.completion_ids)  # [B, C]
        policy_loss(
            log_probs,
            log_probs.detach(),
            mb.advantages,
            mb.mask,
            GRPOLossConfig(kl_coef=0.001),
            log_probs.detach(),
            entropy,
            float(mask.sum()),
        )
    return sum(size for ptr, size in seen.items() if ptr not in params)  # weights are counted as state


def activation_model(dtype: str, checkpointing: bool, prompt: int) -> dict[str, float]:
    """Bytes a token per layer and per token outside the layers (logits), from four small forwards."""
    rows, short, long = 2, 64, 128
    one_short, two_short, one_long = (
        kept_bytes(layers, dtype, rows, prompt, width, checkpointing)
        for layers, width in ((1, short), (2, short), (1, long))
    )
    per_layer = (two_short - one_short) / (rows * short)  # a token, a layer
    head = (one_long - one_short) / (rows * (long - short)) - per_layer  # a token, outside the layers
    return {"per_layer_token": per_layer, "head_token": head}


def estimate(
    state: dict,
    activations: dict,
    dtype: str,
    checkpointing: bool,
    ref_offload: bool,
    optimizer_offload: bool,
    micro_batch: int,
    completion: int,
) -> dict[str, float]:
    """GiB of each part on the one GPU at the 1.5B shape."""
    shape, per_weight = QWEN_1_5B, state[dtype]
    n, tokens = shape["weights"], micro_batch * completion
    size = 2 if dtype == "bfloat16" else 4
    part = {
        "weights": per_weight["params_bytes"] * n,
        "optimizer state": 0 if optimizer_offload else (per_weight["master_bytes"] + per_weight["optimizer_bytes"]) * n,
        "gradients": (0 if optimizer_offload else per_weight["buffers_bytes"] * n) + per_weight["grads_bytes"] * n,
        "reference": 0 if ref_offload else per_weight["reference_bytes"] * n,
        "rollout copy": per_weight["rollout_bytes"] * n,
        "activations": activations["per_layer_token"] * shape["layers"] * tokens + activations["head_token"] * tokens,
        # the backward's transients: the logits' gradient, and under checkpointing one recomputed layer
        "backward": micro_batch * completion * shape["vocab"] * size,
    }
    return {k: v / GIB for k, v in part.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-worker", help=argparse.SUPPRESS)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences a forward (e1 train's default)")
    parser.add_argument("--completion", type=int, default=768, help="completion tokens (gpu_check: t=512 + s=256)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens at the small shape")
    args = parser.parse_args(argv)
    if args.state_worker:
        state_worker(args.state_worker)
        return
    with tempfile.TemporaryDirectory() as root:
        state = measure_state(Path(root))
    for dtype, per_weight in state.items():
        shown = ", ".join(f"{k[:-6]} {v:.2f}" for k, v in per_weight.items() if v)
        print(f"state, bytes a weight ({dtype}, ZeRO-3 on one rank, measured): {shown}")
    acts = {}
    for dtype in ("float32", "bfloat16"):
        for checkpointing in (False, True):
            acts[dtype, checkpointing] = activation_model(dtype, checkpointing, args.prompt)
            a = acts[dtype, checkpointing]
            print(
                f"activations kept ({dtype}, checkpointing {'on' if checkpointing else 'off'}): "
                f"{a['per_layer_token'] / 1024:.1f} KiB a token a layer, {a['head_token'] / 1024:.1f} KiB a token of logits"
            )
    rows = [
        ("gpu_check's zero3 row as run (float32)", "float32", False, False, False),
        ("--dtype bfloat16", "bfloat16", False, False, False),
        ("+ --activation-checkpointing", "bfloat16", True, False, False),
        ("+ --ref-offload", "bfloat16", True, True, False),
        ("+ offload_optimizer (DeepSpeed JSON)", "bfloat16", True, True, True),
    ]
    print(f"\nestimated GPU GiB at the 1.5B shape, micro-batch {args.micro_batch}, {args.completion} completion tokens")
    header = None
    for name, dtype, checkpointing, ref_offload, optimizer_offload in rows:
        parts = estimate(
            state,
            acts[dtype, checkpointing],
            dtype,
            checkpointing,
            ref_offload,
            optimizer_offload,
            args.micro_batch,
            args.completion,
        )
        if checkpointing:  # one layer's activations alive again while it is recomputed
            plain = acts[dtype, False]["per_layer_token"] * args.micro_batch * args.completion / GIB
            parts["backward"] += plain
        if header is None:
            header = f"{'configuration':40} " + " ".join(f"{k:>12}" for k in parts) + f" {'total':>8}"
            print(header)
        print(f"{name:40} " + " ".join(f"{v:12.1f}" for v in parts.values()) + f" {sum(parts.values()):8.1f}")
    print("measured on an H200 (gpu_check.py, float32, none of the options): 73.6 GiB")


if __name__ == "__main__":
    main()
