"""`e1 data`: list the benchmark registry and prepare datasets as canonical parquet files.

    e1 data list
    e1 data prepare aime math500 amc
    e1 data prepare livecodebench --release v6 --start-date 2025-02-01 --end-date 2025-05-01
    e1 data prepare --from problems.jsonl --name mine --problem-field question
    e1 data prepare mine --include my_datasets.py     # a dataset your own code registers

The work happens in :mod:`e1.data`; pandas and datasets are imported only when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from e1.cli.help import Command, Group
from e1.cli.options import INCLUDE_HELP, DataDirOpt, nonempty_path
from e1.errors import DataError

app = typer.Typer(
    cls=Group,
    help=(
        "List and prepare datasets: each becomes <data dir>/<name>.parquet with columns "
        "id, dataset, problem, answer, task, task_version."
    ),
    epilog="Example:\n\n  e1 data prepare aime math500",
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
)

NamesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Registered datasets to prepare (see e1 data list).", show_default=False),
]
OutDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Folder for the parquet files.",
        show_default="$E1_DATA_DIR or ~/.cache/e1/data",
        parser=nonempty_path("--out"),
    ),
]
FromOpt = Annotated[
    Path | None,
    typer.Option(
        "--from",
        help="A local .jsonl, .json, .parquet or .csv file to prepare.",
        show_default=False,
        parser=nonempty_path("--from"),
    ),
]


def _text_option(flag: str, help: str, default: str):
    """An optional text option (None: not given) whose default is ``default``, a value or a description."""
    return Annotated[str | None, typer.Option(flag, help=help, show_default=default)]


NameOpt = _text_option("--name", "Dataset name for --from.", "the file stem")
ProblemFieldOpt = _text_option("--problem-field", "Field with the problem.", "problem")
AnswerFieldOpt = _text_option("--answer-field", "Field with the answer.", "answer")
IdFieldOpt = _text_option("--id-field", "Field with a unique id.", "id if every row has one, else row numbers")
ReleaseOpt = _text_option("--release", "livecodebench: release, e.g. v5 (every problem up to v5).", "v5")
StartDateOpt = _text_option("--start-date", "livecodebench: first contest day kept, YYYY-MM-DD.", "2024-08-01")
EndDateOpt = _text_option("--end-date", "livecodebench: last contest day kept, YYYY-MM-DD.", "2025-02-01")
IncludeOpt = Annotated[list[str] | None, typer.Option("--include", help=INCLUDE_HELP, show_default=False)]


@app.command("list", cls=Command, epilog="Example:\n\n  e1 data list")
def list_command(data_dir: DataDirOpt = None) -> None:
    """Show the registered benchmarks and which of them are prepared."""
    from rich.console import Console

    from e1.data import benchmarks, default_data_dir, prepared_names
    from e1.report import datasets_table

    folder = data_dir or default_data_dir()
    if folder.exists() and not folder.is_dir():
        raise DataError(f"--data-dir {folder} is a file", hint="pass the folder that holds the prepared .parquet files")
    prepared = set(prepared_names(folder))
    console = Console()
    # the one-line descriptions only fit a wide terminal
    console.print(datasets_table(benchmarks(), prepared, folder, descriptions=console.width >= 140))
    local = sorted(prepared - {benchmark.name for benchmark in benchmarks()})
    if local:
        console.print(f"also prepared from local files: {', '.join(local)}")


PREPARE_EXAMPLES = """Examples:

  e1 data prepare aime math500 --out ./data
  e1 data prepare livecodebench --release v6 --start-date 2025-02-01 \\
      --end-date 2025-05-01
  e1 data prepare --from problems.jsonl --name mine --problem-field question
  e1 data prepare mine --include my_datasets.py"""


@app.command("prepare", cls=Command, no_args_is_help=True, epilog=PREPARE_EXAMPLES)
def prepare_command(
    names: NamesArg = None,
    out: OutDirOpt = None,
    from_file: FromOpt = None,
    name: NameOpt = None,
    problem_field: ProblemFieldOpt = None,
    answer_field: AnswerFieldOpt = None,
    id_field: IdFieldOpt = None,
    release: ReleaseOpt = None,
    start_date: StartDateOpt = None,
    end_date: EndDateOpt = None,
    include: IncludeOpt = None,
) -> None:
    """Download benchmarks (or read a local file) and write one canonical parquet per dataset.

    Offline: E1_HUB_MIRROR=DIR reads DIR/<hub id>/, a copy of the hub repo in the hub's layout:
    DIR/HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet; a config also needs the repo's README.md.
    The mirror is read afresh each time; a dataset prepared from it is prepared again when it changes.

    Or prepare a downloaded file with --from; a registered --name keeps that dataset's fields and task.
    Datasets your own code registers (--include) prepare like the built-in ones.
    """
    from rich.console import Console

    from e1.data import load_includes, prepare_file
    from e1.report import quiet_libraries

    quiet_libraries()
    load_includes(include or ())  # the user's datasets, before any name is looked up

    console = Console()
    given = {"release": release, "start_date": start_date, "end_date": end_date}
    options = {key: value for key, value in given.items() if value is not None}
    if from_file is not None:
        if options:
            raise DataError("--release, --start-date and --end-date only apply to registered datasets, not --from")
        if names:
            raise DataError(f"give dataset names or --from, not both (got {', '.join(names)} and --from)")
        result = prepare_file(
            from_file, name, out, problem_field=problem_field, answer_field=answer_field, id_field=id_field
        )
        console.print(f"[green]✓[/green] {result.name}: {result.rows} rows → {result.path}")
        return
    if name or problem_field or answer_field or id_field:
        raise DataError("--name and the --*-field options only apply with --from FILE")
    if not names:
        raise DataError("nothing to prepare", hint="name datasets (e1 data list shows them) or give --from FILE")
    _prepare_registered(console, names, out, options)


def _prepare_registered(console, names: list[str], out, options: dict[str, str]) -> None:
    """Prepare registered datasets; every name and option is checked before any download."""
    from e1.data import get_benchmark, prepare_benchmark

    benchmarks = [get_benchmark(each) for each in names]  # typos fail before any download
    for benchmark in benchmarks:
        benchmark.resolve_options(options)  # an option a dataset does not take fails before any download
    for benchmark in benchmarks:
        with console.status(f"loading [bold]{benchmark.name}[/bold] from {benchmark.source} …"):
            result = prepare_benchmark(benchmark.name, out, options)
        console.print(f"[green]✓[/green] {benchmark.name}: {result.rows} rows → {result.path}")
        if result.skipped_rows:
            console.print(f"  skipped {result.skipped_rows} rows without a problem or an answer")
        expected = benchmark.expected_rows if not options else None  # other options select other rows
        if expected and result.rows + result.skipped_rows != expected:
            console.print(f"  [yellow]note:[/yellow] expected {expected} rows")
