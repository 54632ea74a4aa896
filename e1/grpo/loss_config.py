"""How the GRPO loss is computed (:class:`GRPOLossConfig`) and its closed choices, without torch:
:mod:`e1.grpo.config` checks a training run's choices with them before anything loads, and
:mod:`e1.grpo.core` (the tensor functions) computes with them. What each setting means is in
:mod:`e1.grpo.core`'s docstring.

    >>> GRPOLossConfig(clip_high=0.28, forced_tokens="mask").forced_tokens
    'mask'
"""

from __future__ import annotations

from dataclasses import dataclass

from e1.errors import ConfigError, did_you_mean

AGGREGATIONS = ("token-mean", "seq-mean")
FORCED_TOKENS = ("train", "mask")


def check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}", hint=did_you_mean(value, choices))


@dataclass(frozen=True)
class GRPOLossConfig:
    """How advantages and the GRPO loss are computed; see :mod:`e1.grpo.core`'s docstring."""

    clip_low: float = 0.2  # a ratio below 1 - clip_low stops pushing a token down (A < 0)
    clip_high: float = 0.2  # a ratio above 1 + clip_high stops pushing a token up (A > 0)
    kl_coef: float = 0.001  # weight of k3 KL to the reference policy; 0 = no reference model
    entropy_coef: float = 0.0  # weight of the entropy bonus
    aggregation: str = "token-mean"  # "token-mean" | "seq-mean"
    forced_tokens: str = "train"  # forced end markers: "train" on them (paper) | "mask" them out
    scale_by_std: bool = True  # divide advantages by the group's std (False = Dr. GRPO)
    eps: float = 1e-6  # added to the group std before dividing

    def __post_init__(self):
        if not 0 <= self.clip_low < 1:
            raise ConfigError(f"clip_low must be in [0, 1), got {self.clip_low}", hint="0.2 is the usual value")
        if not self.clip_high >= 0:
            raise ConfigError(f"clip_high must be >= 0, got {self.clip_high}", hint="0.2 is usual; DAPO uses 0.28")
        if not self.kl_coef >= 0:
            raise ConfigError(
                f"kl_coef must be >= 0, got {self.kl_coef}", hint="use 0 to train without a reference model"
            )
        if not self.entropy_coef >= 0:
            raise ConfigError(
                f"entropy_coef must be >= 0, got {self.entropy_coef}", hint="use 0 to switch the bonus off"
            )
        if not self.eps > 0:
            raise ConfigError(f"eps must be > 0, got {self.eps}", hint="1e-6 is the usual value")
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_choice("forced_tokens", self.forced_tokens, FORCED_TOKENS)
