"""What the update trains together: a step's completions as mini-batches of micro-batches, and the
forwards that give each completion token's logits.

    batcher = Batcher(prompt_ids, pad_id, config, world=1, device=torch.device("cpu"))
    batches = batcher.plan(indices, completions, advantages, step)   # [mini-batch][micro-batch]
    logits = completion_logits(model, batches[0][0])                 # [B, C, V]

Every forward scores completion tokens only: the logits cover the completion targets (never the
prompt's), and when a micro-batch holds whole groups (``micro_batch`` a multiple of
``samples_per_prompt``) each prompt is forwarded once and its KV cache expanded to its group's
samples (:func:`shared_prompt_logits`); the same numbers as the full sequences, within float
rounding (tested). Mini-batches come in an order drawn from (seed, step), so a resumed run
draws exactly what it would have.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from e1.engine import Completion, derive_seed
from e1.grpo.config import TrainConfig
from e1.grpo.core import loss_mask
from e1.grpo.problems import Instructed, prompt_of


@dataclass
class MicroBatch:
    """Sequences trained together: ``rows`` index the step's completions. Prompts are stored once
    per ``group_size`` consecutive rows (a whole group, or 1 when the micro-batch splits groups)."""

    rows: list[int]
    group_size: int  # consecutive rows sharing one prompt row
    prompt_ids: torch.Tensor  # [B / group_size, P]  left-padded
    prompt_mask: torch.Tensor  # [B / group_size, P]
    completion_ids: torch.Tensor  # [B, C]  right-padded
    completion_mask: torch.Tensor  # [B, C]  real completion tokens
    mask: torch.Tensor  # [B, C]  completion tokens that enter loss and KL
    advantages: torch.Tensor  # [B]
    old_log_probs: torch.Tensor | None = None  # [B, C]  None: the update's own, detached (first mini-batch)
    ref_log_probs: torch.Tensor | None = None  # [B, C]


@dataclass(frozen=True)
class Batcher:
    """Cuts a step's completions into mini-batches (``mini_batch_prompts / world`` problems each,
    this rank's share) of micro-batches (``micro_batch`` sequences), on ``device``."""

    prompt_ids: list[list[int]]  # per problem, tokenized once
    pad_id: int
    config: TrainConfig
    world: int
    device: torch.device
    instruct: Instructed | None = None  # a length reward's prompts (L1), else the prompt_ids

    def plan(
        self, indices: list[int], completions: list[Completion], advantages: torch.Tensor, step: int
    ) -> list[list[MicroBatch]]:
        """Mini-batches (lists of micro-batches) in an order drawn from (seed, step)."""
        config, k = self.config, self.config.samples_per_prompt
        generator = torch.Generator().manual_seed(derive_seed(config.seed, "minibatch", step))
        order = torch.randperm(len(indices), generator=generator).tolist()
        prompts = config.mini_batch_prompts // self.world  # per rank
        batches = []
        for start in range(0, len(order), prompts):
            rows = [p * k + j for p in order[start : start + prompts] for j in range(k)]
            batches.append(
                [
                    self.micro_batch(rows[m : m + config.micro_batch], indices, completions, advantages, step)
                    for m in range(0, len(rows), config.micro_batch)
                ]
            )
        return batches

    def micro_batch(
        self, rows: list[int], indices: list[int], completions: list[Completion], advantages: torch.Tensor, step: int
    ) -> MicroBatch:
        """Left-padded prompts (one per whole group) and right-padded completions of ``rows``, with the loss mask."""
        from torch.nn.utils.rnn import pad_sequence

        pad, k = self.pad_id, self.config.samples_per_prompt
        whole_groups = len(rows) % k == 0 and all(r % k == 0 for r in rows[::k])  # plan() keeps groups contiguous
        group_size = k if whole_groups else 1
        prompts = [
            torch.tensor(
                prompt_of(self.prompt_ids, self.instruct, self.config, step, indices[completions[r].prompt_index])
            )
            for r in rows[::group_size]
        ]
        outputs = [torch.tensor(completions[r].token_ids, dtype=torch.long) for r in rows]
        forced = [torch.tensor(completions[r].forced_mask, dtype=torch.bool) for r in rows]
        prompt_ids = pad_sequence(prompts, batch_first=True, padding_value=pad, padding_side="left")  # [G, P]
        prompt_mask = pad_sequence(
            [torch.ones_like(p) for p in prompts], batch_first=True, padding_side="left"
        )  # [G, P]
        completion_ids = pad_sequence(outputs, batch_first=True, padding_value=pad)  # [B, C]
        completion_mask = pad_sequence([torch.ones_like(o) for o in outputs], batch_first=True)  # [B, C]
        forced_mask = pad_sequence(forced, batch_first=True)  # [B, C]
        mask = loss_mask(completion_mask.bool(), forced_mask, self.config.forced_tokens)  # [B, C]
        device = self.device
        return MicroBatch(
            rows,
            group_size,
            prompt_ids.to(device),
            prompt_mask.to(device),
            completion_ids.to(device),
            completion_mask.to(device),
            mask.to(device),
            advantages[rows].to(device),
        )


def completion_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """Logits that predict each completion token, ``[B, C, V]``: each prompt forwarded once when
    the micro-batch holds whole groups, else (and while layers recompute: they keep no KV cache
    to share) full sequences."""
    if mb.group_size > 1 and not recomputing(model):
        return shared_prompt_logits(model, mb)
    return full_sequence_logits(model, mb)


def checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """``model``'s decoder layers that transformers can checkpoint (``GradientCheckpointingLayer``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def recomputing(model: torch.nn.Module) -> bool:
    """Whether ``model``'s layers are inside :func:`activation_checkpointing` now."""
    return any(layer.gradient_checkpointing and layer.training for layer in checkpointed_layers(model))


@contextmanager
def activation_checkpointing(model: torch.nn.Module, enabled: bool = True):
    """Inside, each decoder layer of ``model`` keeps only its input for the backward and recomputes
    the rest there (torch's non-reentrant checkpoint): a layer's activations, not all of them, are
    alive at once, for about a third more update compute. Transformers checkpoints a layer only
    when that layer's ``training`` flag is set, so exactly those flags are set here, not their
    submodules': dropout stays off, and forwards outside (rollouts, log-probs) are untouched."""
    from functools import partial

    from torch.utils.checkpoint import checkpoint

    layers = checkpointed_layers(model) if enabled else []
    saved = [
        (layer.gradient_checkpointing, layer.training, layer.__dict__.get("_gradient_checkpointing_func"))
        for layer in layers
    ]
    for layer in layers:
        layer.gradient_checkpointing, layer.training = True, True
        layer._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)
    try:
        yield
    finally:
        for layer, (flag, training, func) in zip(layers, saved):
            layer.gradient_checkpointing, layer.training = flag, training
            if func is None:
                layer.__dict__.pop("_gradient_checkpointing_func", None)
            else:
                layer._gradient_checkpointing_func = func


def full_sequence_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """``[B, C, V]`` logits predicting the completion tokens, from prompt + completion in one forward."""
    k, width = mb.group_size, mb.completion_ids.shape[1]
    input_ids = torch.cat([mb.prompt_ids.repeat_interleave(k, 0), mb.completion_ids], dim=1)  # [B, P+C]
    attention = torch.cat([mb.prompt_mask.repeat_interleave(k, 0), mb.completion_mask], dim=1)  # [B, P+C]
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P+C]  left padding shifts nothing
    # position P-1+c predicts completion token c: keep the last C+1 positions' logits, drop the very last
    logits = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False, logits_to_keep=width + 1
    ).logits  # [B, C+1, V]
    return logits[:, :-1]  # [B, C, V]


def shared_prompt_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """:func:`full_sequence_logits` with each prompt forwarded once per group: the prompt's KV cache
    (which carries the gradient) is expanded to its ``group_size`` samples by indexing, then only the
    completion tokens are forwarded, positions continuing from the prompt."""
    from transformers import DynamicCache

    from e1.engine import cache_keyword

    k, width = mb.group_size, mb.completion_ids.shape[1]
    keyword = cache_keyword(model)
    prompt_positions = (mb.prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [G, P]
    cache = DynamicCache()
    first = model(
        input_ids=mb.prompt_ids,
        attention_mask=mb.prompt_mask,
        position_ids=prompt_positions,
        **{keyword: cache},
        use_cache=True,
        logits_to_keep=1,
    ).logits  # [G, 1, V]
    first = first.repeat_interleave(k, 0)  # [B, 1, V]  the prompt's last token predicts completion token 0
    if width == 1:
        return first  # [B, 1, V]
    cache.batch_select_indices(
        torch.arange(len(mb.prompt_ids), device=first.device).repeat_interleave(k)
    )  # G -> B rows
    attention = torch.cat([mb.prompt_mask.repeat_interleave(k, 0), mb.completion_mask[:, :-1]], dim=1)  # [B, P+C-1]
    start = mb.prompt_mask.sum(-1).repeat_interleave(k).unsqueeze(-1)  # [B, 1]
    positions = start + torch.arange(width - 1, device=start.device)  # [B, C-1]
    rest = model(
        input_ids=mb.completion_ids[:, :-1],
        attention_mask=attention,
        position_ids=positions,
        **{keyword: cache},
        use_cache=True,
    ).logits  # [B, C-1, V]  the last token predicts nothing
    return torch.cat([first, rest], dim=1)  # [B, C, V]


def epoch_order(size: int, seed: int, epoch: int) -> list[int]:
    """The order of the problems in data epoch ``epoch``."""
    generator = torch.Generator().manual_seed(derive_seed(seed, "epoch", epoch))
    return torch.randperm(size, generator=generator).tolist()
