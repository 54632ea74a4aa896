"""`e1 eval`: evaluate a model on datasets under a think/solve budget."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from e1.cli.completion import complete_mode
from e1.cli.help import command_app
from e1.cli.options import BUDGETS, SAMPLING, ModelOpt, RunOutOpt, SolveOpt, ThinkOpt, mode_help, with_options
from e1.cli.run_options import RunOptions

EXAMPLES = """Examples:

  e1 eval --model Salesforce/E1-Math-1.5B --datasets aime,math500 \\
      --think 1k --solve 1k
  e1 eval --model ./tiny --datasets problems.jsonl --mode truncate --n 1 \\
      --temperature 0 --report-to tensorboard
  e1 eval --model ./tiny --datasets problems.jsonl --think 512 \\
      --mode soft:start=0.8:strength=8
  e1 eval --model agentica-org/DeepCoder-1.5B-Preview --datasets humaneval --n 4
  e1 eval --backend anthropic --model claude-sonnet-4-5 --datasets aime \\
      --mode elastic --think 2k --solve 1k --n 1
  e1 eval --model Salesforce/E1-Math-1.5B --datasets aime --think 4k \\
      --solve 1k --mode early-exit:threshold=0.95"""


@with_options
def eval_command(
    *,
    model: ModelOpt,
    think: ThinkOpt = "1k",
    solve: SolveOpt = "1k",
    mode: Annotated[
        str,
        typer.Option("--mode", autocompletion=complete_mode, rich_help_panel=BUDGETS, help=mode_help("Decoding mode")),
    ] = "elastic",
    n: Annotated[int, typer.Option("--n", "-n", help="Samples per problem.", rich_help_panel=SAMPLING)] = 16,
    options: RunOptions,
    out: RunOutOpt = None,
) -> None:
    """Evaluate a model under a thinking budget t and a solution budget s.

    Writes config.json, samples.parquet and summary.parquet into --out (without it: a new folder
    per run) and prints the summary (--report-to: also to TensorBoard / W&B; e1 export turns the
    run into lm-eval, lighteval or Hub files).
    Rerunning into the same --out resumes where it stopped. Under torchrun the ranks share
    the work (docs/multi-node.md).
    """
    from rich.console import Console

    from e1.budget import Budget
    from e1.engine import Mode
    from e1.eval import evaluate, is_main_process
    from e1.report import RichProgress, next_steps, quiet_libraries, results_line, summary_table

    options.includes(out)  # the user's rewards, datasets, prompts and modes, before any name is looked up
    out = options.run_dir(out, "eval", [model])
    config = options.eval_config(
        model=model, budgets=[Budget.parse(think, solve)], modes=[Mode.parse(mode)], n=n, out=out
    )
    quiet_libraries()
    _, summary = evaluate(config, progress=RichProgress() if is_main_process() else None)
    if summary is None:  # torchrun: rank 0 prints
        return
    console = Console()
    console.print(summary_table(summary, title=f"{model} — {config.modes[0]} t={think} s={solve}"))
    if config.api is not None:
        console.print(api_line(out))
    else:
        console.print(weights_line(out))
    console.print(results_line(out, "samples.parquet", "summary.parquet", "config.json"))
    console.print(next_steps(out))


def weights_line(out: Path) -> str:
    """The dtype the local backend decoded in (recorded in config.json): ``--dtype auto`` is the checkpoint's."""
    import json

    record = json.loads((out / "config.json").read_text())
    why = " (--dtype auto: the checkpoint's)" if record.get("dtype") == "auto" else ""
    return f"decoded with --backend {record.get('backend')}, weights in {record.get('weights_dtype', 'the stored dtype')}{why}"


def api_line(out: Path) -> str:
    """Which server decoded the run, and how each mode ran there (recorded in config.json)."""
    import json

    record = json.loads((out / "config.json").read_text()).get("api_method") or {}
    methods = ", ".join(f"{mode}: {method}" for mode, method in (record.get("methods") or {}).items())
    line = f"served by {record.get('url')} ({record.get('server')} server; {record.get('prompts')}) — {methods}"
    if "token_exact" not in record:  # a hosted vendor: its own counts
        return line
    exact = "token for token as --backend vllm/hf" if record["token_exact"] else "NOT token-exact"
    return f"{line} — {exact}: {record.get('exactness')}"


app = command_app(eval_command, no_args_is_help=True, epilog=EXAMPLES)
