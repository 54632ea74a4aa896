"""GRPO for budget-constrained reasoning: the pure tensor core lives in :mod:`e1.grpo.core`.

The config (:mod:`e1.grpo.config`) is light; the core and the trainer (:mod:`e1.grpo.trainer`)
import torch, so their names load on first use and ``import e1.grpo`` stays instant.

    >>> from e1.grpo import GRPOLossConfig
    >>> GRPOLossConfig(clip_high=0.28).aggregation
    'token-mean'
"""

from __future__ import annotations

from e1.grpo.config import ALGOS, DEFAULTS, TRAIN_DTYPES, TRAIN_ENGINE, TrainConfig, from_flat
from e1.grpo.config_file import build_config
from e1.grpo.loss_config import AGGREGATIONS, FORCED_TOKENS, GRPOLossConfig

# Names from modules that import torch at the top: loaded on first use (``__getattr__``).
_LAZY = {
    **dict.fromkeys(
        (
            "aggregate",
            "entropy_from_logits",
            "group_advantages",
            "kl_k3",
            "loss_mask",
            "loss_normalizer",
            "policy_loss",
            "token_log_probs",
        ),
        "e1.grpo.core",
    ),
    "checkpoints": "e1.grpo.trainer",
    "train": "e1.grpo.trainer",
}

__all__ = [
    "AGGREGATIONS",
    "ALGOS",
    "DEFAULTS",
    "TRAIN_DTYPES",
    "FORCED_TOKENS",
    "GRPOLossConfig",
    "TRAIN_ENGINE",
    "TrainConfig",
    "build_config",
    "from_flat",
    *_LAZY,
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.grpo' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
