"""Where a training rank's memory goes: bytes per kind, counted from the tensors themselves, and
each phase's accelerator peak (``torch.cuda.max_memory_allocated``) where there is one.

    usage = account(strategy, reference=trainer.ref_model, rollout=trainer.engine.model)
    usage.optimizer, usage.gathered        # bytes this rank holds now
    row |= usage.columns()                 # params_bytes, ..., the metrics row's columns

Every tensor storage is counted once, under the first kind that reaches it, in this order:

- ``params``: the policy's weights this rank holds (under ZeRO-3 its partition: ``ds_tensor``);
- ``gathered``: under ZeRO-3, full weights materialised outside the partition (a gather's copy);
- ``master``: the optimizer's own copy of the weights (ZeRO's fp32 partition; a plain optimizer
  steps the weights themselves and has none);
- ``optimizer``: the optimizer's state (AdamW's two moments and step counts);
- ``grads``: gradients held (``.grad`` of the weights and of the master copy);
- ``buffers``: any other tensor the ZeRO optimizer keeps (gradient buckets, flat gradient partitions);
- ``reference``: the frozen reference model of the KL term, as this rank holds it (under ZeRO-3 its
  partition, wherever it lives: with ``ref_offload`` that is CPU memory); ``rollout``: a rollout
  engine's own copy.

On CPU nothing else holds memory for training, so these kinds are all of it; on a GPU the
per-phase peaks add activations, logits and vLLM's KV cache, which no tensor walk sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

KINDS = ("params", "gathered", "master", "optimizer", "grads", "buffers", "reference", "rollout")


@dataclass(frozen=True)
class Usage:
    """Bytes of each kind that one rank holds (see the module docstring)."""

    params: int = 0
    gathered: int = 0
    master: int = 0
    optimizer: int = 0
    grads: int = 0
    buffers: int = 0
    reference: int = 0
    rollout: int = 0

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def columns(self) -> dict[str, int]:
        """The metrics row's columns: ``params_bytes`` ... ``rollout_bytes``."""
        return {f"{kind}_bytes": value for kind, value in asdict(self).items()}


def account(strategy, reference=None, rollout=None) -> Usage:
    """What ``strategy`` (:mod:`e1.grpo.parallel`), the reference model and a rollout copy hold now."""
    optimizer = strategy.optimizer
    base = getattr(optimizer, "optimizer", optimizer)  # ZeRO wraps a torch optimizer stepping its partitions
    partitioned = [p for p in strategy.policy.parameters() if hasattr(p, "ds_tensor")]  # ZeRO-3
    kinds = {
        "params": [getattr(p, "ds_tensor", p) for p in strategy.policy.parameters()]
        + [p.data for p in partitioned if getattr(p, "ds_persist", False)],
        "gathered": [p.data for p in partitioned if not getattr(p, "ds_persist", False)],
        # what the torch optimizer steps: its state's keys (ZeRO-3 lends it the flat fp32 partitions only during a step)
        "master": [*_params(base), *base.state.keys()],
        "optimizer": [t for state in base.state.values() for t in _tensors(state)],
        "grads": [p.grad for p in (*strategy.policy.parameters(), *_params(base)) if p.grad is not None],
        "buffers": list(_tensors(vars(optimizer), depth=3)) if optimizer is not base else [],
        "reference": _held(reference) if reference is not None else [],
        "rollout": list(rollout.parameters()) if rollout is not None and rollout is not strategy.policy else [],
    }
    seen: set[tuple] = set()
    return Usage(**{kind: _new_bytes(tensors, seen) for kind, tensors in kinds.items()})


def _held(model) -> list:
    """What this rank holds of ``model``: each weight's partition under ZeRO-3 (``ds_tensor``, in
    CPU memory when offloaded), a weight kept whole (persistent, or gathered now) and the buffers."""
    held = []
    for p in model.parameters():
        if hasattr(p, "ds_tensor"):
            held.append(p.ds_tensor)
        held.append(p.data)  # empty under ZeRO-3 outside a gather, unless the weight persists
    return held + list(model.buffers())


def _params(optimizer) -> Iterator:
    return (p for group in optimizer.param_groups for p in group["params"])


def _tensors(value, depth: int = 1) -> Iterator:
    """The tensors in ``value`` and in the lists, tuples and dicts it holds, ``depth`` levels down."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth > 0 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1)
    elif depth > 0 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth - 1)


def _new_bytes(tensors: Iterable, seen: set[tuple]) -> int:
    """Bytes of the storages behind ``tensors`` not in ``seen`` (which they join): a view of a
    flat buffer counts the buffer, once."""
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if storage.nbytes() and key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


@contextmanager
def peak(peaks: dict[str, int], name: str):
    """Record in ``peaks[name]`` the accelerator's peak allocation while the block runs (the
    largest over repeated entries); nothing where torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    try:
        yield
    finally:
        torch.cuda.synchronize()
        peaks[name] = max(peaks.get(name, 0), torch.cuda.max_memory_allocated())
