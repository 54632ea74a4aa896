"""`e1 export`: a run's results as lm-evaluation-harness, lighteval or Hugging Face Hub files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from e1.cli.completion import complete_formats
from e1.cli.help import command_app

EXAMPLES = """Examples:

  e1 export runs/eval --format lm-eval
  e1 export runs/sweep --format lighteval --out exports/sweep
  e1 export runs/eval --format hub --out my-model-card
  e1 export runs/eval --format hub --push my-org/E1-Math-1.5B"""


def export_command(
    run: Annotated[
        Path, typer.Argument(show_default=False, metavar="RUN_DIR", help="A directory written by e1 eval or e1 sweep.")
    ],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            show_default=False,
            autocompletion=complete_formats,
            help="lm-eval (results JSON + samples JSONL) | lighteval (results JSON + details parquet) | hub (.eval_results/*.yaml + README.md model-index).",
        ),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", show_default="RUN_DIR/export/FORMAT", help="Where to write the files.")
    ] = None,
    push: Annotated[
        str | None,
        typer.Option(
            "--push",
            show_default=False,
            metavar="OWNER/NAME",
            help="With --format hub: upload the eval results to this model repository on the Hub (HF_TOKEN or hf auth login).",
        ),
    ] = None,
) -> None:
    """Export a run's results in a format other tools read: one task per dataset × mode × budget
    cell (named <dataset>_<mode>_t<t>_s<s>), for each model of the run.

    lm-eval writes what `lm_eval --output_path --log_samples` writes (results_<date>.json and one
    samples_<task>_<date>.jsonl per task); lighteval writes its results JSON and details parquet
    (load them with datasets or lighteval's tracker); hub writes the Hub's eval-results YAML (the
    accuracy in percent) and a model card with the same results, for the registered benchmarks.
    """
    from rich.console import Console
    from rich.markup import escape

    from e1.errors import ConfigError
    from e1.report import check_repo_id, export_run, push_results

    if push is not None:
        if format != "hub":
            raise ConfigError("--push uploads a hub export", hint="add --format hub")
        check_repo_id(push)  # before anything is written
    written, skipped = export_run(run, format, out)
    console = Console(highlight=False, soft_wrap=True)
    for path in written:
        console.print(f"wrote {escape(str(path))}")
    for note in skipped:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if push is not None:
        console.print(f"pushed the eval results to {escape(push)}: {escape(push_results(written, push))}")


app = command_app(export_command, no_args_is_help=True, epilog=EXAMPLES)
