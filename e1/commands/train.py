"""`e1 train`: GRPO with budget-constrained (elastic) rollouts, on one device or under DeepSpeed ZeRO.

Every option defaults to the config file's value (``--config``), else to the paper's E1-Math
recipe in :class:`e1.grpo.config.TrainConfig`. No torch at import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from e1.cli.help import command_app
from e1.cli.options import option_class, with_options
from e1.grpo import TrainConfig
from e1.settings import RUN

# every option of `e1 train` but --config, one per TrainConfig setting (its engine's and code rewards'
# among them, flat). Each defaults to the paper's E1-Math recipe (TrainConfig's own defaults); an
# option not given on the command line leaves the config file's value.
TrainOptions = option_class("TrainOptions", TrainConfig, defaults={"model": None, "data": None})


EXAMPLES = """Examples:

  e1 train --model agentica-org/DeepScaleR-1.5B-Preview --data deepscaler \\
      --think 1k --solve 1k --out runs/e1-math
  e1 train --config train.toml --steps 50 --resume
  e1 train --config train.toml --save-every 1 --resume-every 10
  e1 train --model ./sft --data deepscaler --think 512..4k \\
      --think-schedule 4k:3k:2k --report-to tensorboard
  e1 train --model ./sft --data deepscaler --think 1k --length-reward cosine \\
      --out runs/cosine-1k
  e1 train --algo sft --model ./init --data digits-train --lr 3e-3 \\
      --lr-schedule cosine --out runs/sft
  torchrun --nproc_per_node 2 -m e1 train --config train.toml --deepspeed zero2
  torchrun --nproc_per_node 8 -m e1 train --config train.toml \\
      --deepspeed zero3 --backend vllm --max-model-len 4096"""


@with_options
def train_command(
    *,
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="TOML or YAML file with the same keys as the options (flags override it).",
            show_default=False,
            rich_help_panel=RUN,
        ),
    ] = None,
    options: TrainOptions,
) -> None:
    """Train a reasoning model with GRPO under a think/solve budget (Elastic Reasoning), or fine-tune it (--algo sft).

    Writes config.json, metrics.parquet (one row per step), checkpoints/step_N (Hugging Face
    model folders that e1 eval --model loads as is) and eval/step_N into --out. An option left
    out takes the --config file's value, else the default shown.
    """
    from rich.console import Console

    from e1.grpo import build_config, train
    from e1.report import RichProgress, next_steps, quiet_libraries, step_status

    given = {name: value for name, value in vars(options).items() if _given(ctx, name)}
    train_config = build_config(config, **given)
    quiet_libraries()
    if os.environ.get("RANK", "0") != "0":  # under torchrun/deepspeed only rank 0 reports
        train(train_config)
        return
    progress = RichProgress()
    out = train(train_config, progress=progress, on_step=lambda row: progress.status(step_status(row)))
    console = Console()
    console.print(f"run in [bold]{out}[/bold]: metrics.parquet, checkpoints/")
    console.print(next_steps(out, f"e1 view {out}", f"e1 eval --model {out}/checkpoints/step_N --datasets ..."))


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not left at its shown default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


app = command_app(train_command, no_args_is_help=True, epilog=EXAMPLES)
