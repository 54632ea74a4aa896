"""Run by ``tests/test_train_memory.py`` under torchrun: for ZeRO-2 and ZeRO-3 over a tiny model,
one update, then :func:`e1.grpo.memory.account` after it and inside a full-weights gather, then a
weights-only save (step 1) and a resumable one (step 2) into ``SPEC_DIR/out-STAGE``. Prints one
JSON line per stage from rank 0: ``{"stage", "world", "numel", "after", "gathered_inside", "files"}``
(``files``: each checkpoint's file paths relative to it).

    python -m torch.distributed.run --nproc_per_node 2 tests/zero_memory.py MODEL_DIR SPEC_DIR

``SPEC_DIR`` holds ``zero2.json`` and ``zero3.json`` (DeepSpeed configs: see the test).
"""

from __future__ import annotations

import json
import sys


def main(model_dir: str, spec_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from e1.grpo.checkpoint import TrainerState, save_checkpoint
    from e1.grpo.config_file import build_config
    from e1.grpo.memory import account
    from e1.grpo.parallel import ZeRO, launch

    for stage in ("zero2", "zero3"):
        config = build_config(
            model=model_dir,
            data="d",
            deepspeed=f"{spec_dir}/{stage}.json",
            prompts_per_step=2,
            mini_batch_prompts=2,
            samples_per_prompt=2,
            micro_batch=2,
            lr=1e-2,
            device="cpu",
            out=f"{spec_dir}/out-{stage}",
        )
        rank, world, _ = launch(config)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        numel = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
        strategy = ZeRO(model, config, rank, world)
        ids = torch.arange(8).reshape(2, 4) + rank  # [B, L]
        strategy.backward(strategy.model(ids, labels=ids).loss)  # one micro-batch per rank: the step's last
        after = account(strategy)
        with strategy.full_weights():
            inside = account(strategy).gathered
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        for step in (1, 2):
            save_checkpoint(config, TrainerState(step=step), strategy, tokenizer, resumable=step == 2)
        files = {
            step.name: sorted(str(f.relative_to(step)) for f in step.rglob("*") if f.is_file())
            for step in sorted(config.out.glob("checkpoints/step_*"))
        }
        if rank == 0:
            print(
                json.dumps(
                    {
                        "stage": stage,
                        "world": world,
                        "numel": numel,
                        "after": after.columns(),
                        "gathered_inside": inside,
                        "files": files,
                    }
                ),
                flush=True,
            )
        strategy.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:])
