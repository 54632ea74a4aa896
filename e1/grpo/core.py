"""The GRPO core: pure functions on tensors, no model, no optimizer, no state.

Which "GRPO" this is, exactly (outcome-reward GRPO as trained in the Elastic Reasoning paper,
with its clipping defect fixed):

- **Advantages.** One scalar reward per completion; each prompt has a group of K samples.
  ``A_i = (r_i - mean(r)) / (std(r) + eps)``, the same value for every token of completion i.
  ``std`` is the *unbiased* sample std (divides by K - 1): the paper's code (verl's
  ``compute_grpo_outcome_advantage``) calls ``torch.std``, whose default is unbiased, and we
  match it so its recipes transfer. ``scale_by_std=False`` keeps only ``r_i - mean(r)``
  (Dr. GRPO). A group whose rewards are all equal gets exactly zero advantage, hence no
  policy gradient — even with a tiny ``eps`` that would otherwise amplify rounding error.
- **Policy loss.** The PPO clipped surrogate per token, ``ratio = exp(logp - logp_old)``,
  ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)``; ``clip_low != clip_high``
  gives DAPO's "clip higher". The paper's code computes this and then optimises the unclipped
  term; here the clipped term is what is optimised.
- **KL.** The k3 estimator of KL(pi || pi_ref) ("low_var_kl" in verl), added to the *loss*
  (not to the reward) with ``kl_coef`` (0.001 in the paper's math recipe). At ``kl_coef=0`` no
  reference model is needed.
- **Entropy.** ``- entropy_coef * H`` (a bonus); off by default.
- **Aggregation.** ``token-mean``: every valid token of the batch weighs the same (the paper's
  code, DAPO). ``seq-mean``: mean over each sequence's valid tokens, then over sequences (the
  GRPO paper's ``1/|o_i|``).
- **Forced tokens.** The end-of-thinking marker inserted by budgeted decoding is either trained
  on like any sampled token (``train``, what the paper does) or left out of loss and KL
  (``mask``: the policy did not choose it, so its ratio says nothing about the policy).

Deliberately absent: value function/GAE, dual-clip, clamping the policy ratio, per-token or
length-shaped rewards, dynamic sampling.

**Gradient accumulation.** ``policy_loss`` divides by its own batch's valid tokens (or
sequences) unless given ``normalizer``. When a mini-batch is split into micro-batches, pass the
mini-batch's count so that the micro-batch losses *sum* to the mini-batch loss::

    normalizer = sum(loss_normalizer(mb.mask, config.aggregation) for mb in micro_batches)
    for mb in micro_batches:
        loss, metrics = policy_loss(..., mb.mask, config, normalizer=normalizer)
        loss.backward()  # no further division by the number of micro-batches

Under data parallelism that averages gradients over W ranks, pass the global count / W.

    >>> import torch
    >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    tensor([ 0.8660, -0.8660, -0.8660,  0.8660])
"""

from __future__ import annotations

import torch

from e1.errors import ConfigError
from e1.grpo.loss_config import AGGREGATIONS, FORCED_TOKENS, GRPOLossConfig, check_choice

# verl's low_var_kl clamps: the log-ratio to [-20, 20] before exp (no overflow), the k3 value to
# [-10, 10] (k3 >= 0, so only the upper bound acts; past it the KL term has no gradient).
K3_LOG_RATIO_BOUND = 20.0
K3_BOUND = 10.0


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-normalised advantages, one per completion, groups contiguous (prompt-major).

    ``rewards`` is ``[num_groups * group_size]`` or ``[num_groups, group_size]``; returns ``[N]``.
    """
    if group_size < 2:
        raise ConfigError(
            f"GRPO needs at least 2 samples per prompt, got {group_size}",
            hint="set samples_per_prompt >= 2 (the paper uses 8)",
        )
    if rewards.numel() % group_size or (rewards.dim() == 2 and rewards.shape[1] != group_size):
        raise ConfigError(
            f"{tuple(rewards.shape)} rewards do not form groups of {group_size}",
            hint="pass all samples of every prompt, prompt-major",
        )
    grouped = rewards.detach().float().reshape(-1, group_size)  # [G, K]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [G, K]
    if scale_by_std:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)  # [G, K]  unbiased std
    constant = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)  # [G, 1]
    return centred.masked_fill(constant, 0.0).reshape(-1)  # [N]


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log p(tokens[b, l])`` under ``logits[b, l]``, in float32.

    Uses ``logit[token] - logsumexp(logits)`` one sequence at a time, so the float32 working copy
    is ``[L, V]``, never a full ``[B, L, V]`` log-softmax. Under autograd each row's copy is kept
    for the backward pass; compute old and reference log-probs under ``torch.no_grad()``.
    """
    rows = []
    for row_logits, row_tokens in zip(logits, tokens):  # [L, V], [L]
        row = row_logits.float()  # [L, V]
        picked = row.gather(-1, row_tokens.long().unsqueeze(-1)).squeeze(-1)  # [L]
        rows.append(picked - torch.logsumexp(row, dim=-1))  # [L]
    return torch.stack(rows)  # [B, L]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution, in float32, one sequence at a time."""
    rows = []
    for row_logits in logits:  # [L, V]
        row = row_logits.float()  # [L, V]
        probs = torch.softmax(row, dim=-1)  # [L, V]
        rows.append(torch.logsumexp(row, dim=-1) - (probs * row).sum(dim=-1))  # [L]
    return torch.stack(rows)  # [B, L]


def log_probs_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_log_probs` and :func:`entropy_from_logits` from one float32 ``logsumexp`` per row.

    The log-probs carry the gradient; the entropy does only with ``entropy_grad`` (the bonus is
    on), else it is a detached metric computed under ``torch.no_grad()``, which keeps its
    ``[L, V]`` softmax out of the autograd graph.
    """
    log_probs, entropies = [], []
    for row_logits, row_tokens in zip(logits, tokens):  # [L, V], [L]
        row = row_logits.float()  # [L, V]
        lse = torch.logsumexp(row, dim=-1)  # [L]
        log_probs.append(row.gather(-1, row_tokens.long().unsqueeze(-1)).squeeze(-1) - lse)  # [L]
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            row, lse = (row, lse) if entropy_grad else (row.detach(), lse.detach())
            probs = torch.exp(row - lse.unsqueeze(-1))  # [L, V]
            entropies.append(lse - (probs * row).sum(dim=-1))  # [L]
    return torch.stack(log_probs), torch.stack(entropies)  # [B, L], [B, L]


def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(ref - lp) - (ref - lp) - 1`` (>= 0).

    Clamped like verl's ``low_var_kl``: log-ratio to [-20, 20], value to [-10, 10].
    """
    log_ratio = (ref_log_probs.float() - log_probs.float()).clamp(-K3_LOG_RATIO_BOUND, K3_LOG_RATIO_BOUND)  # [B, L]
    return (log_ratio.exp() - log_ratio - 1).clamp(-K3_BOUND, K3_BOUND)  # [B, L]


def loss_mask(response_mask: torch.Tensor, forced_mask: torch.Tensor, forced_tokens: str) -> torch.Tensor:
    """Tokens that enter loss and KL: response tokens, minus forced ones with ``"mask"``."""
    check_choice("forced_tokens", forced_tokens, FORCED_TOKENS)
    keep = response_mask.bool()  # [B, L]
    if forced_tokens == "mask":
        keep = keep & ~forced_mask.bool()  # [B, L]
    return keep  # [B, L]


def loss_normalizer(mask: torch.Tensor, aggregation: str) -> float:
    """What :func:`aggregate` divides by: valid tokens (token-mean) or non-empty sequences (seq-mean)."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    valid = mask.bool()  # [B, L]
    if aggregation == "token-mean":
        return float(valid.sum())
    return float(valid.any(dim=-1).sum())


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, aggregation: str, normalizer: float | None = None
) -> torch.Tensor:
    """Reduce per-token ``values`` over valid tokens to a scalar; see the module docstring."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    if normalizer is None:
        normalizer = loss_normalizer(mask, aggregation)
    valid = mask.bool()  # [B, L]
    kept = torch.where(valid, values, 0.0)  # [B, L]
    if aggregation == "token-mean":
        total = kept.sum()  # []
    else:
        total = (kept.sum(dim=-1) / valid.sum(dim=-1).clamp(min=1)).sum()  # []
    return total / max(normalizer, 1.0)  # []


def _masked_mean(values: torch.Tensor, valid: torch.Tensor) -> float:
    return float(torch.where(valid, values, 0.0).sum() / valid.sum().clamp(min=1))


def _check_loss_inputs(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: GRPOLossConfig,
    ref_log_probs: torch.Tensor | None,
    entropy: torch.Tensor | None,
) -> None:
    """ValueError on shapes that do not fit ``[B, L]`` / ``[B]``; ConfigError on a coefficient without its input."""
    if (
        log_probs.shape != old_log_probs.shape
        or log_probs.shape != mask.shape
        or advantages.shape != log_probs.shape[:1]
    ):
        raise ValueError(
            f"shapes do not match: log_probs {tuple(log_probs.shape)}, old {tuple(old_log_probs.shape)}, "
            f"mask {tuple(mask.shape)}, advantages {tuple(advantages.shape)} (want [B, L], [B, L], [B, L], [B])"
        )
    if config.kl_coef > 0 and ref_log_probs is None:
        raise ConfigError("kl_coef > 0 needs reference log-probs", hint="pass ref_log_probs or set kl_coef=0")
    if config.entropy_coef > 0 and entropy is None:
        raise ConfigError("entropy_coef > 0 needs the entropy", hint="pass entropy or set entropy_coef=0")


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: GRPOLossConfig,
    ref_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of one (micro-)batch and its metrics.

    ``log_probs`` ``[B, L]`` carry the gradient; ``old_log_probs``, ``ref_log_probs`` ``[B, L]``
    and ``advantages`` ``[B]`` are constants; ``entropy`` ``[B, L]`` may carry gradient.
    Positions outside ``mask`` are replaced by zeros before any arithmetic, so padding garbage
    (even NaN) changes neither the loss nor the gradient, and their gradient is exactly 0.

    Metrics (floats over this batch's valid tokens, independent of ``normalizer``): ``pg_loss``,
    ``kl`` and ``entropy`` aggregated like the loss, so that without ``normalizer``
    ``loss = pg_loss + kl_coef * kl - entropy_coef * entropy``; ``clip_fraction`` (share of
    tokens whose clipped term is the active one, i.e. whose gradient is zero) and ``ratio_mean``.
    """
    _check_loss_inputs(log_probs, old_log_probs, advantages, mask, config, ref_log_probs, entropy)

    valid = mask.bool()  # [B, L]
    log_probs = torch.where(valid, log_probs.float(), 0.0)  # [B, L]
    old_log_probs = torch.where(valid, old_log_probs.detach().float(), 0.0)  # [B, L]
    adv = advantages.detach().float().unsqueeze(-1)  # [B, 1]

    ratio = torch.exp(log_probs - old_log_probs)  # [B, L]
    unclipped = -adv * ratio  # [B, L]
    clipped = -adv * ratio.clamp(1 - config.clip_low, 1 + config.clip_high)  # [B, L]
    pg = torch.maximum(unclipped, clipped)  # [B, L]  = -min(ratio * A, clip(ratio) * A)
    per_token = pg  # [B, L]

    metrics = {
        "pg_loss": float(aggregate(pg.detach(), valid, config.aggregation)),
        "clip_fraction": _masked_mean((clipped > unclipped).float(), valid),
        "ratio_mean": _masked_mean(ratio.detach(), valid),
    }
    if ref_log_probs is not None:
        ref = torch.where(valid, ref_log_probs.detach().float(), 0.0)  # [B, L]
        kl = kl_k3(log_probs, ref)  # [B, L]
        metrics["kl"] = float(aggregate(kl.detach(), valid, config.aggregation))
        if config.kl_coef > 0:
            per_token = per_token + config.kl_coef * kl  # [B, L]
    if entropy is not None:
        entropy = torch.where(valid, entropy.float(), 0.0)  # [B, L]
        metrics["entropy"] = float(aggregate(entropy.detach(), valid, config.aggregation))
        if config.entropy_coef > 0:
            per_token = per_token - config.entropy_coef * entropy  # [B, L]

    loss = aggregate(per_token, valid, config.aggregation, normalizer)  # []
    return loss, metrics
