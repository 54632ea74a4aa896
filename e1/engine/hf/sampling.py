"""Token sampling on a batch of logits (greedy, temperature, top-k, top-p).

A sample is drawn by inverting the CDF: one uniform number per row, located in the row's
cumulative probabilities by binary search. That is exact sampling from the same distribution
as ``torch.multinomial``, which draws one exponential variate per vocabulary entry instead
(on the CPU ~10x slower at a 512-token vocabulary, ~4x at 150k).

Where the uniform numbers come from is what makes results independent of batching: the uniform
for a sample's ``i``-th token is a counter-based hash of (its seed, ``i``) (:func:`row_uniforms`,
splitmix64; the seeds come from :mod:`e1.engine.seeds`). No generator state is shared between rows,
so a sample draws the same tokens whatever batch it is decoded in, whatever rows finish beside it.
"""

from __future__ import annotations

import numpy as np
import torch

from e1.engine.base import Sampling

_GOLDEN = 0x9E3779B97F4A7C15


def row_uniforms(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """One uniform in [0, 1) per row, a pure function of (seed, counter): splitmix64 of
    ``seed + (counter + 1) * golden``, top 53 bits. seeds, counters: [B] uint64 -> [B] float64."""
    z = seeds + (counters + np.uint64(1)) * np.uint64(_GOLDEN)  # uint64 arithmetic wraps, as intended
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def draw_tokens(logits: torch.Tensor, states: list, seeds: np.ndarray, sampling: Sampling) -> list[int]:
    """Each row's next id as e1 draws it, before the row's :class:`~e1.engine.row_state.RowState` decides
    what is appended (a forced id overrides it in ``accept``): soft's bias added to the end marker's first
    logit (``RowState.end_bias``, in place), then :func:`sample_tokens` at the row's own uniform, a function
    of its seed and its token count. The transformers engine's decode loop and the ``model.generate``
    logits processor (e1.integrations) both draw here. logits: [B, V], seeds: [B] uint64 -> B ids."""
    uniforms = None
    if not sampling.greedy:  # each row's own stream: its seed and how many tokens it has
        counters = np.fromiter((len(state.tokens) for state in states), np.uint64, len(states))
        uniforms = torch.from_numpy(row_uniforms(seeds, counters))  # [B]
    add_end_bias(logits, states)
    return sample_tokens(logits, sampling, uniforms).tolist()


def add_end_bias(logits: torch.Tensor, states: list) -> None:
    """Soft's bias added to the end marker's first logit, each row its own (RowState.end_bias), before
    sampling, as vLLM's logits processor adds it. logits: [B, V], changed in place."""
    biases = [state.end_bias() for state in states]
    if not any(biases):
        return
    column = states[0].markers.end_ids[0]
    logits[:, column] += torch.tensor(biases, dtype=logits.dtype, device=logits.device)  # [B]


def sample_tokens(logits: torch.Tensor, sampling: Sampling, uniforms: torch.Tensor | None) -> torch.Tensor:
    """Pick one token per row, row b by inverting its CDF at ``uniforms[b]`` (unused when greedy).
    logits: [B, V], uniforms: [B] in [0, 1) -> [B]."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    logits = logits.float() / sampling.temperature  # [B, V]
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        logits = _top_p(logits, sampling.top_p)
    return sample_from(logits.softmax(dim=-1), uniforms)


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask all but the smallest set of most likely tokens whose probability reaches top_p. [B, V] -> [B, V]."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [B, V]
    probs = sorted_logits.softmax(dim=-1)
    # drop a token when the tokens ranked above it already reach top_p (the first always stays)
    drop = probs.cumsum(dim=-1) - probs >= top_p  # [B, V]
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))  # drop, back in vocabulary order


def sample_from(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One index per row, drawn with probability ``probs`` (each row sums to ~1) by inverting the
    CDF at ``uniforms`` (uniform in [0, 1), one per row). [B, V], [B] -> [B].

    Token i is picked when u falls in [cdf[i-1], cdf[i]); a token of probability 0 has an empty
    interval, so it is never picked. u stays strictly below the row's total, even after rounding.
    The sum runs in float64: in float32 its rounding (~6e-8 per step) would misstate the
    probability of every rare token of a large vocabulary."""
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # [B, V]
    total = cdf[:, -1:]  # [B, 1]
    uniform = uniforms.to(device=probs.device, dtype=cdf.dtype).reshape(total.shape)  # [B, 1]
    u = torch.minimum(uniform * total, total.nextafter(torch.zeros_like(total)))  # [B, 1], in [0, total)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)  # [B]
