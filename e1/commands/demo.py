"""`e1 demo`: the paper in miniature, offline on a laptop CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from e1.cli.help import command_app
from e1.cli.options import nonempty_path

EXAMPLES = """Examples:

  e1 demo
  e1 demo --fast --out runs/demo-fast"""


def demo_command(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Where every stage writes its run directory.", parser=nonempty_path("--out")),
    ] = Path("runs/demo"),
    fast: Annotated[bool, typer.Option("--fast", help="Smaller numbers (about 5 minutes), weaker claims.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of data, model and training.")] = 0,
    readme: Annotated[
        Path | None,
        typer.Option("--readme", help="Also write the results table into this README (between its demo markers)."),
    ] = None,
) -> None:
    """Run Elastic Reasoning end to end on a tiny model, offline: data, SFT, E1 training, budget curves.

    Builds a synthetic reasoning task and a tiny model, fine-tunes it on verbose reasoning
    traces (the base model), trains it with budget-constrained GRPO (the E1 model) and, as a
    baseline, with a cosine length reward (Yeo et al., 2025), and compares them across
    thinking budgets; prints where everything is and which of the
    paper's effects the results show. Rerunning resumes finished stages.
    """
    import time

    from rich.console import Console

    from e1.demo import DemoConfig, check_readme, claims_markdown, model_names, run_demo, update_readme
    from e1.report import RichProgress, quiet_libraries

    config = DemoConfig(out=out, fast=fast, seed=seed)  # checks its numbers
    if readme is not None:
        check_readme(readme)  # now, not after the whole demo has run
    quiet_libraries()
    console = Console()
    started = time.perf_counter()
    result = run_demo(config, progress=RichProgress())
    seconds = time.perf_counter() - started
    from rich.markdown import Markdown

    from e1.report import curves_table
    from e1.store import read_parquet

    curves = read_parquet(out / "curves" / "curves.parquet")
    console.print(curves_table(curves, names=model_names(result.base, result.e1, result.baseline)))
    block = claims_markdown(result.claims, result.median_think, seconds)
    console.print(Markdown(block))
    (out / "report.md").write_text(block)
    console.print(
        f"base model: [bold]{result.base}[/bold]\nE1 model:   [bold]{result.e1}[/bold]\n"
        f"baseline:   [bold]{result.baseline}[/bold] (GRPO with the cosine length reward)\n"
        f"curves:     [bold]{out / 'curves' / 'curves.png'}[/bold] (and curves.parquet)\n"
        f"claims:     [bold]{out / 'claims.json'}[/bold], {out / 'report.md'}"
    )
    if readme is not None and not update_readme(readme, block):
        console.print(f"[yellow]{readme} has no demo markers; table not written there[/yellow]")


app = command_app(demo_command, epilog=EXAMPLES)
