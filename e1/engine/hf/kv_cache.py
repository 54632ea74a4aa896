"""The KV cache of the transformers backend: buffers that double when full, and a key length
that changes only at bucket boundaries.

    cache = growing_cache(max_length=prompt_width + max_new_tokens)
    model(input_ids=step, attention_mask=mask[:, :key_bucket(length)], cache=cache, ...)

Invariant: after the prefill (which attends over exactly its ``W`` keys: transformers sizes the
first forward's mask by the prompt), a forward that brings the cache to ``length`` keys attends
over exactly ``key_bucket(length)`` key columns; the columns past ``length`` hold
zeros, which the caller's mask hides (and a causal mask hides them too). A decode that grows
from ``W`` to ``W + N`` keys therefore hands attention at most ``N / 32 + 2`` distinct key
lengths (multiples of 32) up to 1024 keys and 17 per doubling above, never one per token: on a GPU every new
attention shape pays once for kernel selection, plan building and allocator fragmentation, and
one decode used to present ``N`` of them. The price is at most 31 columns, or 1/16, of
masked-out attention work. Position ids are the caller's and stay exact.
"""

from __future__ import annotations

import torch

KEY_STEP = 32  # the finest key bucket: keys are attended in multiples of this
BUCKET_SHIFT = 5  # from 1024 keys a bucket is length >> 5 rounded up to a power of 2: 16 per doubling


def key_bucket(length: int) -> int:
    """The key length a forward attends over when the cache holds ``length`` keys (the new ones included):
    ``length`` rounded up to a multiple of ``max(32, 2 ** (bit_length(length) - 5))``.

    >>> [key_bucket(n) for n in (1, 64, 65, 1023, 1024, 1025, 2049)]
    [32, 64, 96, 1024, 1024, 1088, 2176]
    """
    step = max(KEY_STEP, 1 << max(0, length.bit_length() - BUCKET_SHIFT))
    return -(-length // step) * step


def grown_capacity(needed: int, capacity: int, limit: int) -> int:
    """Double the capacity (at least to ``needed``), never past ``limit`` unless ``needed`` is."""
    return max(needed, min(2 * capacity, limit))


def exact_keys(length: int) -> int:
    """No buckets: attend over exactly the keys written (one new attention shape per step)."""
    return length


def growing_cache(max_length: int, bucket=key_bucket):
    """A transformers ``DynamicCache`` whose layers grow by doubling instead of by ``torch.cat``
    at every step, and whose forwards after the prefill attend over ``bucket(length)`` columns
    (:func:`key_bucket`; :func:`exact_keys` to compare against). ``max_length`` (prompt + the
    most tokens any row may add) caps the doubling."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    limit = bucket(max_length)

    class GrowingLayer(DynamicLayer):
        """Keys and values in zero-filled [B, H, capacity, D] buffers; ``keys``/``values`` are views
        of the first ``key_bucket(length)`` positions (``length`` after the prefill), which is what
        attention reads."""

        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            self.length = self.presented = 0
            self._keys, self._values = key_states[:, :, :0], value_states[:, :, :0]  # [B, H, 0, D]

        def update(self, key_states, value_states, *args, **kwargs):
            prefill = not self.is_initialized  # transformers sized its mask by the prompt: attend exactly
            if prefill:
                self.lazy_initialization(key_states, value_states)
            start, end = self.length, self.length + key_states.shape[-2]
            presented = end if prefill else bucket(end)
            if presented > self._keys.shape[-2]:
                capacity = grown_capacity(presented, self._keys.shape[-2], limit)
                self._keys, self._values = (
                    _resized(self._keys, start, capacity),
                    _resized(self._values, start, capacity),
                )
            self._keys[:, :, start:end] = key_states  # [B, H, capacity, D]
            self._values[:, :, start:end] = value_states
            self.length, self.presented = end, presented
            self._view()
            return self.keys, self.values

        def _view(self) -> None:
            self.keys, self.values = self._keys[:, :, : self.presented], self._values[:, :, : self.presented]

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            """(key columns the next forward attends over, 0): transformers sizes its masks by it."""
            return bucket(self.get_seq_length() + query_length), 0

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.get_seq_length() > 0:
                self._keys, self._values = self._keys[indices], self._values[indices]
                self._view()

    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


def _resized(buffer: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    """A zero-filled [B, H, capacity, D] buffer holding the first ``used`` positions of ``buffer``
    (zeros, not garbage: masked-out columns must stay finite, since 0 x NaN is NaN)."""
    grown = buffer.new_zeros((*buffer.shape[:2], capacity, buffer.shape[-1]))
    grown[:, :, :used] = buffer[:, :, :used]
    return grown
