"""Supervised fine-tuning (``--algo sft``) on the data's ``completion`` column: token-mean
cross-entropy of the completion (thinking, ``</think>``, solution, EOS) given the prompt, one
optimizer step per training step. It shares the trainer's data order, update and checkpoints.

    targets = sft_targets(problems, tokenizer, config)   # e1.grpo.problems: per problem, completion ids + EOS
    row = sft_step(trainer)                               # the update's metrics
"""

from __future__ import annotations

import math

import torch

from e1.grpo.batches import Batcher, MicroBatch
from e1.grpo.core import log_probs_and_entropy


def sft_step(trainer) -> dict:
    """One SFT step of ``trainer`` (an :class:`e1.grpo.trainer.Trainer`): update, then sync."""
    config = trainer.config
    indices = trainer.next_problems(config.prompts_per_step)[trainer.strategy.rank :: trainer.strategy.world]
    with trainer.phase("update"):
        batch = [
            sft_micro_batch(trainer.batcher, trainer.targets, indices[m : m + config.micro_batch])
            for m in range(0, len(indices), config.micro_batch)
        ]
        update = trainer.update(
            [batch], lambda mb, normalizer: sft_loss(trainer.completion_logits(trainer.model, mb), mb, normalizer)
        )
    with trainer.phase("sync"):
        trainer.rollouts.sync(trainer.strategy)
    return update


def sft_loss(logits: torch.Tensor, mb: MicroBatch, normalizer: float) -> tuple[torch.Tensor, dict]:
    """Cross-entropy of the completion tokens, summed and divided by the mini-batch's token count.
    logits: [B, C, V] predicting ``mb.completion_ids``."""
    log_probs, entropy = log_probs_and_entropy(logits, mb.completion_ids, entropy_grad=False)  # [B, C]
    mask = mb.mask.float()  # [B, C]
    loss = -(log_probs * mask).sum() / normalizer
    tokens = mask.sum().clamp(min=1)
    return loss, {"entropy": float((entropy.detach() * mask).sum() / tokens), "kl": math.nan, "clip_fraction": math.nan}


def sft_micro_batch(batcher: Batcher, targets: list[list[int]], indices: list[int]) -> MicroBatch:
    """Prompts and their reference completions (``targets``) as a micro-batch of single rows."""
    from torch.nn.utils.rnn import pad_sequence

    pad, device = batcher.pad_id, batcher.device
    prompts = [torch.tensor(batcher.prompt_ids[i]) for i in indices]
    outputs = [torch.tensor(targets[i]) for i in indices]
    completion_mask = pad_sequence([torch.ones_like(t) for t in outputs], batch_first=True)  # [B, C]
    return MicroBatch(
        list(range(len(indices))),
        1,
        pad_sequence(prompts, batch_first=True, padding_value=pad, padding_side="left").to(device),  # [B, P]
        pad_sequence([torch.ones_like(p) for p in prompts], batch_first=True, padding_side="left").to(device),
        pad_sequence(outputs, batch_first=True, padding_value=pad).to(device),  # [B, C]
        completion_mask.to(device),
        completion_mask.bool().to(device),
        torch.zeros(len(indices), device=device),
    )
