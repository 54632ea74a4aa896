"""Training's reporters: TensorBoard and W&B (:mod:`e1.report.reporting`), opened from a TrainConfig.

reporters = open_reporters(config)        # one per name in config.report_to (rank 0 only)
reporters.log(row, step)                  # every number of the step's metrics row, as train/<name>
reporters.close()
"""

from __future__ import annotations

from e1.grpo.config import TrainConfig
from e1.report import REPORTERS, Reporters, TensorBoardReporter, WandbReporter
from e1.report import open_reporters as open_named_reporters

__all__ = ["REPORTERS", "Reporters", "TensorBoardReporter", "WandbReporter", "open_reporters"]


def open_reporters(config: TrainConfig, rank: int = 0) -> Reporters:
    """The reporters named in ``config.report_to``; none on ranks other than 0."""
    return open_named_reporters(config.reporters, config.out, config.to_json(), rank)
