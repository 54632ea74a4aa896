"""The seeds that make every sample's randomness its own (no torch here: eval, training and
serving derive seeds before any model loads).

Each sample (one prompt's sample ``j``) has a 64-bit seed, :func:`sample_seed` of its prompt's
seed and ``j``; :mod:`e1.engine.hf.sampling` draws its ``i``-th token from a hash of (that seed, ``i``).

    seeds = [derive_seed(0, "aime", "2024-I-1", "elastic", "1024+1024")]   # one per prompt
    engine.generate(prompts, budget, mode, sampling, n=16, seeds=seeds)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from e1.engine.base import Sampling

_MASK64 = (1 << 64) - 1


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from any values (their text), stable across runs, machines and Python versions.

    >>> derive_seed(0, "aime", "7") == derive_seed(0, "aime", "7") != derive_seed(0, "aime", "8")
    True
    """
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def problem_seed(seed: int, dataset: str, problem_id, mode, budget) -> int:
    """A problem's seed in one cell (``mode``, ``budget``) of a run: its samples' randomness depends
    on nothing else (not on the batch size, nor on which problems share its batch)."""
    return derive_seed(seed, dataset, problem_id, mode, f"{budget.think}+{budget.solve}")


def sample_seed(prompt_seed: int, sample_index: int) -> int:
    """The seed of sample ``sample_index`` of a prompt whose seed is ``prompt_seed``."""
    return derive_seed(prompt_seed & _MASK64, "sample", sample_index)


def prompt_seeds(sampling: Sampling, count: int, seeds: Sequence[int] | None) -> list[int]:
    """``seeds`` as given (one per prompt), or derived from ``sampling.seed`` and each prompt's position."""
    if seeds is None:
        return [derive_seed(sampling.seed, "prompt", p) for p in range(count)]
    if len(seeds) != count:
        from e1.errors import ConfigError

        raise ConfigError(f"{len(seeds)} seeds for {count} prompts", hint="pass one seed per prompt")
    return [int(s) & _MASK64 for s in seeds]
