"""Checkpoints of a training run: save, find, resume exactly.

    latest = check_run_dir(config)                 # None: a fresh run; refuses to mix two runs
    final = save_checkpoint(config, state, strategy, tokenizer)   # out/checkpoints/step_N
    save_checkpoint(config, state, strategy, tokenizer, resumable=False)   # the model folder alone
    state = load_checkpoint(latest, strategy)      # weights are loaded apart, from the folder itself

``checkpoints/step_N`` is a Hugging Face model folder (``e1 eval`` loads it). A resumable one
(:meth:`TrainConfig.save_kind` says which steps) adds ``trainer_state.pt`` (the data cursor, the
optimizer state on one device, the RNG states) and under DeepSpeed a ``deepspeed/`` folder with
every rank's shard of the optimizer state: most of the bytes (AdamW's two moments, and ZeRO's
fp32 master weights), so the saves between resume points write the weights alone. Either kind is
written to a temporary folder and renamed into place, so a killed run never leaves half of one.

Invariants: a save that is not resumable writes no optimizer state; ``--resume`` continues from
the newest resumable checkpoint (:func:`checkpoints`), and from any of them gives the steps the
uninterrupted run took; pruning (``keep_last``) never removes the newest resumable one.
"""

from __future__ import annotations

import os
import random
import re
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from e1.errors import ConfigError, ModelError, ResultsError
from e1.grpo.config import TrainConfig
from e1.grpo.parallel import Parallel
from e1.store import CHECKPOINTS, METRICS, record_files, recorded, remove_owned, replace_owned

STATE = "trainer_state.pt"


@dataclass
class TrainerState:
    """What a checkpoint needs beyond the weights and the optimizer to continue exactly."""

    step: int = 0  # steps completed
    epoch: int = 0  # data epoch the cursor is in
    position: int = 0  # index into that epoch's permutation


def save_checkpoint(
    config: TrainConfig, state: TrainerState, strategy: Parallel, tokenizer, resumable: bool = True
) -> Path:
    """``checkpoints/step_N``: when ``resumable``, every rank adds its optimizer shard (ZeRO) and rank 0
    the trainer state; rank 0 writes the model folder from :meth:`full_weights` (a collective under
    ZeRO-3: all ranks enter) and renames it. A full disk is a :class:`e1.store.disk.DiskError` that
    names the checkpoints kept."""
    from e1.store import check_alive, disk_errors

    root = config.out / CHECKPOINTS
    final, tmp = root / f"step_{state.step}", root / f".step_{state.step}.tmp"
    check_alive(final)  # save_pretrained would make a vanished run directory again
    kept, resume = _kept(config.out)
    if strategy.rank == 0:
        remove_owned(root, [tmp.name], whole=True)  # a save killed before: e1's own temporary folder
    strategy.barrier()
    try:
        with disk_errors(final, kept, resume):  # judged before tmp goes: torch's error needs the full disk
            # None under ZeRO: the shards are in tmp/deepspeed
            saved = {"state": vars(state).copy(), "optimizer": strategy.save_optimizer(tmp)} if resumable else None
            strategy.barrier()
            with strategy.full_weights() as module:
                if strategy.rank == 0:
                    _write(module, tokenizer, saved, tmp, final)
                    _prune(config)
    except BaseException:
        if strategy.rank == 0:
            remove_owned(root, [tmp.name], whole=True)  # a half-written checkpoint would only hold the space
        raise
    strategy.barrier()
    return final


def _kept(out: Path) -> tuple[str, str]:
    """What a failed save leaves, and how to go on from it."""
    found = checkpoints(out)
    kept = f"checkpoints up to {found[-1].name} are kept" if found else "no checkpoint is kept yet"
    return kept, "rerun the same command with --resume to continue"


def _write(module: torch.nn.Module, tokenizer, saved: dict | None, tmp: Path, final: Path) -> None:
    """The model folder, and ``saved`` (+ the RNG states) as the trainer state unless None."""
    module.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if saved is not None:
        torch.save(
            saved
            | {
                "python_rng": random.getstate(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            tmp / STATE,
        )
    record_files(tmp)  # what e1 wrote: all that pruning or a later save of this step may remove
    replace_owned(final, "the checkpoint")
    os.replace(tmp, final)


def _prune(config: TrainConfig) -> None:
    """Keep the newest ``keep_last`` saves, and the newest resumable one whatever its age."""
    if config.keep_last:
        resumable = checkpoints(config.out)[-1:]
        for old in saved_models(config.out)[: -config.keep_last]:
            if old not in resumable:  # only the files its save recorded: what the user added stays
                remove_owned(old, recorded(old) or [], drop_root=True)


def load_checkpoint_model(checkpoint: Path, dtype: str, device: str):
    """The policy's weights in ``checkpoint``: a damaged or truncated one names itself and says to
    move it away (the run resumes from the one before), not to download the model again."""
    from e1.engine import load_model

    try:
        return load_model(str(checkpoint), dtype, device)
    except ModelError as err:
        raise ResultsError(
            f"checkpoint {checkpoint} cannot be loaded: {err.message}",
            hint=f"move {checkpoint} away to resume from the checkpoint before it",
        ) from err


def load_checkpoint(checkpoint: Path, strategy: Parallel) -> TrainerState:
    """Restore the optimizer and the RNG states of ``checkpoint``; returns its trainer state."""
    try:
        saved = torch.load(checkpoint / STATE, weights_only=False)
        missing = {"state", "optimizer", "python_rng", "torch_rng", "cuda_rng"} - set(saved)
        if missing:
            raise KeyError(f"no {', '.join(sorted(missing))}")
        state = TrainerState(**saved["state"])
    except Exception as err:  # a damaged or foreign file: torch and pickle raise many types
        raise ResultsError(
            f"cannot read {checkpoint / STATE}: {' '.join(str(err).split())[:120] or type(err).__name__}",
            hint=f"move {checkpoint} away to resume from the checkpoint before it",
        ) from err
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
    from e1.store import read_parquet

    frame = read_parquet(path)
    return frame[frame["step"] <= step].to_dict("records")


def write_metrics(out: Path, rows: list[dict]) -> None:
    import pandas as pd

    from e1.store import write_parquet

    kept, resume = _kept(out)
    write_parquet(pd.DataFrame(rows), out / METRICS, kept=f"{METRICS} is unchanged and {kept}", resume=resume)


def saved_models(out: Path) -> list[Path]:
    """Every ``out/checkpoints/step_N`` model folder, resumable or not, oldest first."""
    root = Path(out) / CHECKPOINTS
    found = [p for p in root.glob("step_*") if p.is_dir() and re.fullmatch(r"step_\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def checkpoints(out: Path) -> list[Path]:
    """The resumable ``out/checkpoints/step_N`` folders (with a trainer state), oldest first."""
    return [p for p in saved_models(out) if (p / STATE).exists()]


# settings a resumed run must share with the run it continues
RUN_IDENTITY = ("model", "data", "algo", "seed", "prompts_per_step", "samples_per_prompt", "think_start", "think_end")


def check_run_dir(config: TrainConfig) -> Path | None:
    """The checkpoint to resume from (None = start fresh); refuses to mix two runs in one directory,
    and ``--resume`` of a directory that holds no run (a typo would silently start afresh)."""
    from e1.store import check_run_dir as check_identity

    out = config.out
    previous = check_identity(out, config.to_json(), RUN_IDENTITY, kind="train")
    found = checkpoints(out)
    if not config.resume:
        if previous is not None or found:
            raise ConfigError(
                f"{out} already holds a training run", hint="pass --resume to continue it, or use another --out"
            )
        return None
    if previous is None and not found:
        raise ConfigError(
            f"--resume: {out} holds no training run to continue",
            hint="check the --out path, or leave out --resume to start one",
        )
    return found[-1] if found else None


def owned(config: TrainConfig):
    """The run directory's lock (:mod:`e1.store.lock`), taken by the process that writes it: rank 0
    (``RANK`` as torchrun and deepspeed set it). A second launch's rank 0 is refused at once, and
    its launcher stops the other ranks; ranks of one run never contend for the lock."""
    from e1.store import run_lock

    if config.deepspeed is not None and os.environ.get("RANK", "0") != "0":
        return nullcontext()
    return run_lock(config.out, "e1 train")


def check_data(config: TrainConfig, problems) -> dict[str, str]:
    """The training problems' fingerprint (:func:`e1.data.identity.fingerprint`), refused when the run
    directory recorded another one: a resumed run must continue on the problems it began with.
    Returns the fingerprints ``config.json`` records."""
    from e1.data import fingerprint
    from e1.store import check_datasets

    return check_datasets(config.out, {str(problems["dataset"].iloc[0]): fingerprint(problems)})
