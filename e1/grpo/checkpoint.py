"""Checkpoints of a training run: save, find, resume exactly.

    latest = check_run_dir(config)                 # None: a fresh run; refuses to mix two runs
    final = save_checkpoint(config, state, strategy, tokenizer)   # out/checkpoints/step_N
    state = load_checkpoint(latest, strategy)      # weights are loaded apart, from the folder itself

``checkpoints/step_N`` is a Hugging Face model folder (``e1 eval`` loads it) plus
``trainer_state.pt`` (the data cursor, the optimizer state on one device, the RNG states), and
under DeepSpeed a ``deepspeed/`` folder with every rank's shard of the optimizer state. It is
written to a temporary folder and renamed into place, so a killed run never leaves half of one.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from e1.errors import ConfigError, ModelError, ResultsError
from e1.grpo.config import TrainConfig
from e1.grpo.parallel import Parallel

METRICS = "metrics.parquet"
CHECKPOINTS = "checkpoints"
STATE = "trainer_state.pt"


@dataclass
class TrainerState:
    """What a checkpoint needs beyond the weights and the optimizer to continue exactly."""

    step: int = 0  # steps completed
    epoch: int = 0  # data epoch the cursor is in
    position: int = 0  # index into that epoch's permutation


def save_checkpoint(config: TrainConfig, state: TrainerState, strategy: Parallel, tokenizer) -> Path:
    """``checkpoints/step_N``: every rank adds its optimizer shard (ZeRO), rank 0 writes the model
    folder from :meth:`full_weights` (a collective under ZeRO-3: all ranks enter) and renames it."""
    root = config.out / CHECKPOINTS
    final, tmp = root / f"step_{state.step}", root / f".step_{state.step}.tmp"
    if strategy.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    strategy.barrier()
    optimizer = strategy.save_optimizer(tmp)  # None under ZeRO: the shards are in tmp/deepspeed
    strategy.barrier()
    with strategy.full_weights() as module:
        if strategy.rank == 0:
            _write(module, tokenizer, {"state": vars(state).copy(), "optimizer": optimizer}, tmp, final)
            _prune(config)
    strategy.barrier()
    return final


def _write(module: torch.nn.Module, tokenizer, saved: dict, tmp: Path, final: Path) -> None:
    module.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(saved | {"python_rng": random.getstate(), "torch_rng": torch.get_rng_state(),
                        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}, tmp / STATE)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def _prune(config: TrainConfig) -> None:
    if config.keep_last:
        for old in checkpoints(config.out)[: -config.keep_last]:
            shutil.rmtree(old)


def load_checkpoint_model(checkpoint: Path, dtype: str, device: str):
    """The policy's weights in ``checkpoint``: a damaged or truncated one names itself and says to
    move it away (the run resumes from the one before), not to download the model again."""
    from e1.engine.hf import load_model

    try:
        return load_model(str(checkpoint), dtype, device)
    except ModelError as err:
        raise ResultsError(f"checkpoint {checkpoint} cannot be loaded: {err.message}",
                           hint=f"move {checkpoint} away to resume from the checkpoint before it") from err


def load_checkpoint(checkpoint: Path, strategy: Parallel) -> TrainerState:
    """Restore the optimizer and the RNG states of ``checkpoint``; returns its trainer state."""
    try:
        saved = torch.load(checkpoint / STATE, weights_only=False)
        missing = {"state", "optimizer", "python_rng", "torch_rng", "cuda_rng"} - set(saved)
        if missing:
            raise KeyError(f"no {', '.join(sorted(missing))}")
        state = TrainerState(**saved["state"])
    except Exception as err:  # a damaged or foreign file: torch and pickle raise many types
        raise ResultsError(f"cannot read {checkpoint / STATE}: {' '.join(str(err).split())[:120] or type(err).__name__}",
                           hint=f"move {checkpoint} away to resume from the checkpoint before it") from err
    strategy.load_optimizer(checkpoint, saved["optimizer"])
    random.setstate(saved["python_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return state


def load_metrics(out: Path, step: int) -> list[dict]:
    """The metrics rows of steps up to ``step`` (a resumed run rewrites the later ones)."""
    path = out / METRICS
    if not path.exists():
        return []
    from e1.store.results import read_parquet

    frame = read_parquet(path)
    return frame[frame["step"] <= step].to_dict("records")


def write_metrics(out: Path, rows: list[dict]) -> None:
    import pandas as pd

    from e1.store.results import write_parquet

    write_parquet(pd.DataFrame(rows), out / METRICS)


def checkpoints(out: Path) -> list[Path]:
    """``out/checkpoints/step_N`` folders, oldest first."""
    root = Path(out) / CHECKPOINTS
    found = [p for p in root.glob("step_*") if p.is_dir() and re.fullmatch(r"step_\d+", p.name) and (p / STATE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


# settings a resumed run must share with the run it continues
RUN_IDENTITY = ("model", "data", "algo", "seed", "prompts_per_step", "samples_per_prompt", "think_start", "think_end")


def check_run_dir(config: TrainConfig) -> Path | None:
    """The checkpoint to resume from (None = start fresh); refuses to mix two runs in one directory,
    and ``--resume`` of a directory that holds no run (a typo would silently start afresh)."""
    from e1.store.results import check_run_dir as check_identity

    out = config.out
    previous = check_identity(out, config.to_json(), RUN_IDENTITY, what="training run")
    found = checkpoints(out)
    if not config.resume:
        if previous is not None or found:
            raise ConfigError(f"{out} already holds a training run", hint="pass --resume to continue it, or use another --out")
        return None
    if previous is None and not found:
        raise ConfigError(f"--resume: {out} holds no training run to continue",
                          hint="check the --out path, or leave out --resume to start one")
    return found[-1] if found else None
