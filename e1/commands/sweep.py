"""`e1 sweep`: accuracy-vs-budget curves for several models and decoding modes."""

from __future__ import annotations

from typing import Annotated

import typer

from e1.cli.completion import complete_modes
from e1.cli.help import command_app
from e1.cli.options import BUDGETS, MODEL, SAMPLING, RunOutOpt, mode_help, with_options
from e1.cli.run_options import RunOptions

EXAMPLES = """Examples:

  e1 sweep --model Salesforce/E1-Math-1.5B \\
      --model agentica-org/DeepScaleR-1.5B-Preview --datasets aime \\
      --think 0,512,1k,2k,3k --solve 1k \\
      --modes elastic,truncate,budget-forcing --n 4 --out runs/sweep
  e1 sweep --model ./my-model --datasets problems.jsonl \\
      --budgets 512+1k,1k+1k,2k+2k --n 1 --temperature 0 --report-to wandb
  e1 sweep --model ./my-model --datasets problems.jsonl --think 512,1k \\
      --modes 'elastic,soft:strength=8,elastic:stop="\\\\boxed\\{"'
  GEMINI_API_KEY=... e1 sweep --backend gemini --model gemini-2.5-flash \\
      --datasets aime --budget-axis effort --efforts low,high,dynamic \\
      --max-tokens 16384 --n 4"""


ModelsOpt = Annotated[
    list[str],
    typer.Option(
        "--model",
        "-m",
        show_default=False,
        rich_help_panel=MODEL,
        help="Model folder or Hugging Face hub id; repeat for several models.",
    ),
]
ThinksOpt = Annotated[
    str | None,
    typer.Option(
        "--think",
        "-t",
        help="Thinking budgets, comma-separated: 0,512,1k,2k.",
        show_default="0,512,1k,2k,3k",
        rich_help_panel=BUDGETS,
    ),
]
SolvesOpt = Annotated[
    str | None,
    typer.Option(
        "--solve",
        "-s",
        help="Solution budgets, comma-separated; every t is paired with every s.",
        show_default="1k",
        rich_help_panel=BUDGETS,
    ),
]
BudgetPairsOpt = Annotated[
    str | None,
    typer.Option(
        "--budgets",
        help="Explicit think+solve pairs instead of --think/--solve: 512+1k,1k+1k.",
        show_default=False,
        rich_help_panel=BUDGETS,
    ),
]
ModesOpt = Annotated[
    str | None,
    typer.Option(
        "--modes",
        autocompletion=complete_modes,
        show_default="elastic; none with --budget-axis effort",
        rich_help_panel=BUDGETS,
        help=mode_help("Decoding modes, comma-separated"),
    ),
]
BudgetAxisOpt = Annotated[
    str,
    typer.Option(
        "--budget-axis",
        rich_help_panel=BUDGETS,
        help="tokens (--think/--solve budgets) | effort (a hosted API's effort levels, --efforts; x axis: measured "
        "thinking tokens).",
    ),
]
EffortsOpt = Annotated[
    str | None,
    typer.Option(
        "--efforts",
        show_default=False,
        rich_help_panel=BUDGETS,
        help="--budget-axis effort: the vendor's levels, comma-separated, e.g. low,medium,high (gemini also: dynamic).",
    ),
]
SamplesOpt = Annotated[
    int, typer.Option("--n", "-n", help="Samples per problem at every grid point.", rich_help_panel=SAMPLING)
]
IndependentOpt = Annotated[
    bool,
    typer.Option(
        "--independent",
        rich_help_panel=SAMPLING,
        help="Draw every mode and budget on its own; without it one trajectory per sample serves them all (fewer "
        "tokens, exact per cell, paired across cells).",
    ),
]


@with_options
def sweep_command(
    *,
    models: ModelsOpt,
    think: ThinksOpt = None,
    solve: SolvesOpt = None,
    budgets: BudgetPairsOpt = None,
    modes: ModesOpt = None,
    budget_axis: BudgetAxisOpt = "tokens",
    efforts: EffortsOpt = None,
    n: SamplesOpt = 4,
    independent: IndependentOpt = False,
    options: RunOptions,
    out: RunOutOpt = None,
) -> None:
    """Sweep budgets × modes × models: accuracy against tokens used.

    Each model is loaded once for its whole grid (an eval run in --out/models/).
    truncate gets one budget t + s: the same total as the other modes; soft shares a trajectory
    only up to start × t. Writes samples, summary, curves, differences, areas (AUC per curve) and
    problems (b* per problem) parquet (with a model column), curves.png; the tables show them all.
    Rerunning into the same --out resumes where it stopped (without --out: a new folder per run).
    --budget-axis effort (hosted APIs) sweeps effort levels: modes none:effort=LEVEL, x = measured thinking tokens.
    """
    from e1.eval import SweepConfig, is_main_process, run_sweep, sweep_axes
    from e1.report import RichProgress, quiet_libraries

    options.includes(out)  # the user's rewards, datasets, prompts and modes, before any name is looked up
    out = options.run_dir(out, "sweep", list(models))
    grid_modes, grid_budgets = sweep_axes(budget_axis, modes, efforts, think, solve, budgets, options.max_tokens)
    grid = options.eval_config(model=models[0] if models else "", modes=grid_modes, n=n, out=out, budgets=grid_budgets)
    config = SweepConfig(models=tuple(models), settings=grid, out=out, independent=independent)
    quiet_libraries()
    samples, summary, curves = run_sweep(config, progress=RichProgress() if is_main_process() else None)
    if summary is None:  # torchrun: rank 0 prints
        return
    _print_results(config, summary, curves)


def _print_results(config, summary, curves) -> None:
    """The sweep's tables (one per model keeps 80 columns readable) and where its files are."""
    from rich.console import Console

    from e1.eval import AREAS, DECODED_PLOT, PROBLEMS, display_names
    from e1.report import (
        DIFFERENCES,
        curves_table,
        differences_table,
        next_steps,
        results_line,
        spending_table,
        summary_table,
    )
    from e1.store import read_parquet

    out = config.out
    console = Console()
    names = display_names(config.models)
    for model, rows in summary.groupby("model", sort=False):
        console.print(summary_table(rows.drop(columns="model"), title=names[model]))
    console.print(curves_table(curves, names=names))
    console.print(spending_table(read_parquet(out / AREAS), read_parquet(out / PROBLEMS), names=names))
    differences = read_parquet(out / DIFFERENCES)
    if len(differences):
        console.print(differences_table(differences, names=names))
    decoded = [DECODED_PLOT] if (out / DECODED_PLOT).exists() else []  # early-exit: x = output + trial tokens
    console.print(
        results_line(out, "curves.png", *decoded, "curves.parquet", DIFFERENCES, "summary.parquet", "samples.parquet")
    )
    console.print(next_steps(out))


app = command_app(sweep_command, no_args_is_help=True, epilog=EXAMPLES)
