"""Where training metrics go besides ``metrics.parquet``: TensorBoard, Weights & Biases.

    reporters = open_reporters(config)        # one per name in config.report_to (rank 0 only)
    reporters.log(row, step)                  # every number of the step's metrics row
    reporters.close()

``tensorboard`` writes an event file under ``out/tensorboard/`` (``tensorboard --logdir
runs/x/tensorboard``); each metric is a scalar ``train/<name>``. ``wandb`` starts a run in
``out/wandb/`` whose id derives from the run directory, so ``--resume`` continues the same
run; ``WANDB_MODE=offline`` logs without a network (``wandb sync`` uploads later). Each needs
its package: ``pip install -e '.[tensorboard]'`` or ``'.[wandb]'``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from e1.errors import ConfigError
from e1.grpo.config import TrainConfig


class TensorBoardReporter:
    def __init__(self, config: TrainConfig):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("--report-to tensorboard needs the tensorboard package",
                              hint="pip install tensorboard (or e1[tensorboard])") from None
        self.writer = SummaryWriter(log_dir=str(config.out / "tensorboard"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(f"train/{name}", value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbReporter:
    def __init__(self, config: TrainConfig):
        try:
            import wandb
        except ImportError:
            raise ConfigError("--report-to wandb needs the wandb package",
                              hint="pip install wandb (or e1[wandb]); WANDB_MODE=offline needs no network") from None
        from e1.engine.sampling import derive_seed

        (config.out / "wandb").mkdir(parents=True, exist_ok=True)
        run_id = f"e1-{derive_seed(str(config.out.resolve())):016x}"  # the same run when resumed
        self.run = wandb.init(project="e1", name=config.out.name, id=run_id, resume="allow",
                              dir=str(config.out), config=config.to_json())

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({f"train/{name}": value for name, value in metrics.items()}, step=step)

    def close(self) -> None:
        self.run.finish()


REPORTERS: dict[str, Callable[[TrainConfig], object]] = {"tensorboard": TensorBoardReporter, "wandb": WandbReporter}


@dataclass
class Reporters:
    """All configured reporters as one: numbers only (NaN, e.g. steps without validation, skipped)."""

    reporters: list = field(default_factory=list)

    def log(self, row: dict, step: int) -> None:
        numbers = {key: float(value) for key, value in row.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step"
                   and not math.isnan(float(value))}
        for reporter in self.reporters:
            reporter.log(numbers, step)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()


def open_reporters(config: TrainConfig, rank: int = 0) -> Reporters:
    """The reporters named in ``config.report_to``; none on ranks other than 0."""
    if rank != 0:
        return Reporters()
    return Reporters([REPORTERS[name](config) for name in config.reporters])
