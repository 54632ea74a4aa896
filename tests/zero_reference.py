"""Run by ``tests/test_train_memory.py`` under torchrun: the KL reference model under ZeRO-3, as
:meth:`e1.grpo.parallel.ZeRO.reference` builds it, with and without ``ref_offload``. Every rank
writes one JSON line per setting to SPEC_DIR/rows-RANK.jsonl: the weights it holds of the reference (``local``: its
partitions' elements; ``full``: DeepSpeed's ``ds_numel`` of every weight; ``whole``: elements held
outside a partition), :func:`e1.grpo.memory.account`'s ``reference`` bytes, its partitions' device types and DeepSpeed's parameter offload device,
and the largest difference between the partitioned reference's log-probs and those of the same
model loaded whole, on this rank's own micro-batches (whole groups, and groups split); ``built``:
the reference as it left ``load``, before DeepSpeed's engine wrapped it (each weight's ``ds_id``,
the most elements any weight held whole, and the largest partition vs the largest 1/W share).

    python -m torch.distributed.run --nproc_per_node 2 tests/zero_reference.py MODEL_DIR SPEC_DIR
"""

from __future__ import annotations

import json
import sys


def micro_batches(rank: int, vocab: int):
    """Two micro-batches that differ per rank: one of whole groups (prompt forwarded once), one not."""
    import torch

    from e1.grpo.batches import MicroBatch

    generator = torch.Generator().manual_seed(rank)
    made = []
    for group_size in (2, 1):
        prompts = 4 // group_size
        prompt_ids = torch.randint(3, vocab, (prompts, 5), generator=generator)  # [G, P]
        prompt_mask = torch.ones_like(prompt_ids)
        prompt_mask[0, :2] = 0  # left padding
        completion_ids = torch.randint(3, vocab, (4, 6), generator=generator)  # [B, C]
        completion_mask = torch.ones_like(completion_ids)
        completion_mask[-1, 4:] = 0  # right padding
        made.append(
            MicroBatch(
                list(range(4)),
                group_size,
                prompt_ids,
                prompt_mask,
                completion_ids,
                completion_mask,
                completion_mask.bool(),
                torch.zeros(4),
            )
        )
    return made


def log_probs(model, batches):
    import torch

    from e1.grpo.batches import completion_logits
    from e1.grpo.core import token_log_probs

    with torch.no_grad():
        return [token_log_probs(completion_logits(model, mb), mb.completion_ids) for mb in batches]  # [B, C] each


def main(model_dir: str, spec_dir: str) -> None:
    from e1.engine import load_model
    from e1.grpo.config_file import build_config
    from e1.grpo.memory import account
    from e1.grpo.parallel import ZeRO, launch

    for offload in (False, True):
        config = build_config(
            model=model_dir,
            data="d",
            deepspeed=f"{spec_dir}/zero3.json",
            prompts_per_step=2,
            mini_batch_prompts=2,
            samples_per_prompt=2,
            micro_batch=2,
            device="cpu",
            ref_offload=offload,
            out=f"{spec_dir}/out-ref",
        )
        rank, world, _ = launch(config)
        strategy = ZeRO(load_model(model_dir, "float32", "cpu"), config, rank, world)
        built = {}

        def load(where: str, built: dict = built, world: int = world):
            """The reference as ``strategy.reference`` builds it, seen before DeepSpeed wraps it."""
            model = load_model(model_dir, "float32", where)
            params = list(model.parameters())
            built.update(
                ds_ids=all(hasattr(p, "ds_id") for p in params),
                largest_held=max(p.data.numel() for p in params),  # 0: no weight whole
                largest_partition=max((p.ds_tensor.numel() for p in params if hasattr(p, "ds_tensor")), default=0),
                largest_share=max(-(-getattr(p, "ds_numel", p.numel()) // world) for p in params),
            )
            return model

        reference = strategy.reference(load)
        whole = load_model(model_dir, "float32", "cpu")
        batches = micro_batches(rank, whole.config.vocab_size)
        sharded, plain = log_probs(reference, batches), log_probs(whole, batches)
        params = list(reference.parameters())
        offload_device = getattr(reference.optimizer, "offload_device", None)  # DeepSpeedZeRoOffload's
        row = json.dumps(
            {
                "offload": offload,
                "rank": rank,
                "world": world,
                "numel": sum(p.numel() for p in whole.parameters()),
                "full": sum(p.ds_numel for p in params),
                "local": sum(p.ds_tensor.numel() for p in params),
                "whole": sum(p.data.numel() for p in params),
                "buffer_bytes": sum(b.numel() * b.element_size() for b in reference.buffers()),
                "reference_bytes": account(strategy, reference).reference,
                "devices": sorted({p.ds_tensor.device.type for p in params if not p.ds_persist}),
                "offload_device": getattr(offload_device, "value", offload_device),  # DeepSpeed's own setting
                "max_diff": max(float((a - b).abs().max()) for a, b in zip(sharded, plain)),
                "trainable": any(p.requires_grad for p in params),
                "built": built,
            }
        )
        with open(f"{spec_dir}/rows-{rank}.jsonl", "a") as rows:  # a file per rank: two ranks' prints can interleave
            rows.write(row + "\n")
        strategy.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:])
