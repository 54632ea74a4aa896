"""Weight sync into a colocated vLLM on a GPU, checked after one GRPO step that really moves the
weights, and where the step's memory goes (the GPU counterpart of ``tests/test_train_vllm.py``).

    python benchmarks/check_weight_sync.py --model deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --data problems.jsonl
    torchrun --nproc_per_node 1 benchmarks/check_weight_sync.py --model ... --data ... --deepspeed zero3

One step of 16 prompts x 4 samples at t=512, s=256 with a reward that alternates 0, 1 inside every
group (so the gradient is never zero), then vLLM's log-probs of a fixed sequence against the trained
transformers policy's. Prints the largest difference before and after the step (after must stay
within --tolerance; bf16 kernels differ in rounding), how far the step moved them, each phase's
seconds and CUDA peak, and the bytes of each kind the rank holds (e1.grpo.memory). Exit 1 on failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.test_train_vllm import alternating, policy_log_probs, vllm_log_probs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="training problems (a registry name or a .jsonl)")
    parser.add_argument("--deepspeed", default=None)
    parser.add_argument("--tolerance", type=float, default=0.05, help="max |log-prob difference| after the sync")
    args = parser.parse_args()
    from e1.grpo.config_file import build_config
    from e1.grpo.trainer import Trainer

    config = build_config(
        model=args.model,
        data=args.data,
        out=tempfile.mkdtemp(prefix="e1-sync-"),
        think=512,
        solve=256,
        steps=1,
        prompts_per_step=16,
        samples_per_prompt=4,
        mini_batch_prompts=16,
        micro_batch=8,
        lr=1e-5,
        kl_coef=0.001,
        save_every=1,
        backend="vllm",
        dtype="bfloat16",
        max_model_len=2048,
        deepspeed=args.deepspeed,
    )
    trainer = Trainer.create(config, reward=alternating)
    probe = trainer.prompt_ids[0] + trainer.tokenizer.encode(" First, add the two numbers: 2 + 3 = 5.")
    with trainer.strategy.full_weights() as policy:
        start = policy_log_probs(policy, probe)
    before = max(abs(a - b) for a, b in zip(vllm_log_probs(trainer.engine, probe), start))
    with trainer.scorer:
        row = trainer.step()
    with trainer.strategy.full_weights() as policy:
        trained = policy_log_probs(policy, probe)
    after = max(abs(a - b) for a, b in zip(vllm_log_probs(trainer.engine, probe), trained))
    moved = max(abs(a - b) for a, b in zip(trained, start))
    trainer.strategy.finish()
    if trainer.strategy.rank:
        return 0
    print(
        f"vLLM vs policy, max |d log p|: before the step {before:.4f}, after {after:.4f}; the step moved them {moved:.4f}"
    )
    for key in sorted(row):
        if key.endswith(("_s", "_bytes")):
            print(
                f"  {key:>24}: {row[key] / 2**30:8.2f} GiB"
                if key.endswith("_bytes")
                else f"  {key:>24}: {row[key]:8.2f} s"
            )
    ok = after <= args.tolerance < moved and row["grad_norm"] > 0
    print("OK" if ok else "FAILED: vLLM does not decode with the trained weights (or the step did not move them)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
