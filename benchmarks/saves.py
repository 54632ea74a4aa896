"""Checkpoint cost per save: a resumable save (model folder + optimizer state + trainer state) vs a
weights-only one (the model folder alone: what ``--resume-every`` leaves the steps between), side
by side in one run on the same model and optimizer state.

    python benchmarks/saves.py [--hidden 512 --layers 8 --dtype float32 --repeats 3]
    torchrun --nproc_per_node 1 benchmarks/saves.py --deepspeed zero3 [...]   # DeepSpeed's sharded state

Prints seconds (best of --repeats), bytes written per save and the ratios (weights-only / resumable).
Expected bytes per weight: one device, AdamW: fp32 4 of 12, bf16 2 of 6 (moments in the weights'
dtype); ZeRO: the fp32 master copy and moments add 12 (ZeRO-1/2 also repeat the 16-bit weights).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from e1.grpo.checkpoint import TrainerState, save_checkpoint
from e1.grpo.config_file import build_config
from e1.grpo.parallel import launch, parallel_strategy
from e1.models.tiny import build_tiny_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--deepspeed", default=None, help="zero1 | zero2 | zero3 (run under torchrun)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(tempfile.mkdtemp(prefix="e1-saves-"))
    model_dir = build_tiny_model(
        root / "model",
        vocab_size=2048,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        layers=args.layers,
        heads=max(1, args.hidden // 64),
        kv_heads=max(1, args.hidden // 256),
    )
    config = build_config(
        model=str(model_dir),
        data="d",
        out=root / "run",
        dtype=args.dtype,
        deepspeed=args.deepspeed,
        prompts_per_step=2,
        mini_batch_prompts=2,
        samples_per_prompt=2,
        micro_batch=4,
        device="cpu",
    )
    rank, world, device = launch(config)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(device)
    strategy = parallel_strategy(config, model, rank, world)
    ids = torch.arange(16).reshape(2, 8)  # [B, L]
    strategy.zero_grad()
    strategy.backward(strategy.model(ids, labels=ids).loss)  # one update: the optimizer state exists
    strategy.step()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    steps = iter(range(1, 10**6))

    def save(resumable: bool):
        return lambda: save_checkpoint(config, TrainerState(step=next(steps)), strategy, tokenizer, resumable=resumable)

    best = interleaved_best(args.repeats, {"resumable": save(True), "weights-only": save(False)})
    if rank == 0:
        weights = sum(p.numel() for p in model.parameters()) if args.deepspeed != "zero3" else None
        print(f"model: {weights or 'ZeRO-3'} weights, {args.dtype}, {args.deepspeed or 'one device'}, world {world}")
        sizes = {name: folder_bytes(path) for name, (_, path) in best.items()}
        for name, (seconds, _) in best.items():
            print(f"{name:>13}: {seconds:7.3f} s  {sizes[name] / 2**20:9.1f} MiB")
        print(
            f"weights-only / resumable: time {best['weights-only'][0] / best['resumable'][0]:.2f}x, "
            f"bytes {sizes['weights-only'] / sizes['resumable']:.2f}x"
        )
    strategy.finish()
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
