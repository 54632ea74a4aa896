"""`e1 elo`: a Codeforces rating and percentile from per-problem results, offline.

    e1 elo fetch --contests 1971,1972 --out cf-contests --population
    e1 elo --results runs/code-1k --contests cf-contests --pass-n 8

The algorithm lives in :mod:`e1.report.elo`; this module parses options and renders the result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from e1.cli.help import Command, Group
from e1.cli.options import nonempty_path
from e1.errors import ConfigError

app = typer.Typer(
    cls=Group,
    help=("Estimate a Codeforces rating and percentile from per-problem results (the CodeElo method), offline."),
    epilog=(
        "Examples: fetch once, then rate a run:\n\n"
        "  e1 elo fetch --contests 1971,1972 --out cf --population\n"
        "  e1 elo --results runs/code-1k --contests cf --pass-n 8"
    ),
    invoke_without_command=True,
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
)


@app.callback()
def elo_command(
    ctx: typer.Context,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results", "-r", help='An e1 run directory, its samples.parquet, or JSON {"1971A": [true, false, ...]}.'
        ),
    ] = None,
    contests: Annotated[Path | None, typer.Option("--contests", "-c", help="Folder written by `e1 elo fetch`.")] = None,
    pass_n: Annotated[int, typer.Option("--pass-n", help="Attempts per problem; the first passing one scores.")] = 8,
    min_participants: Annotated[
        int, typer.Option("--min-participants", help="Skip contests with at most this many rated participants.")
    ] = 200,
    dataset: Annotated[str | None, typer.Option("--dataset", help="Use only samples of this dataset.")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="Use only samples of this decoding mode.")] = None,
    think: Annotated[str | None, typer.Option("--think", "-t", help="Use only samples at this think budget.")] = None,
    solve: Annotated[str | None, typer.Option("--solve", "-s", help="Use only samples at this solve budget.")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: rating, rating_ci_low/high (95% bootstrap over contests), percentile, "
            "contests.",
        ),
    ] = False,
) -> None:
    """Rate per-problem results on past Codeforces contests; print a table per contest and the mean
    with its 95% bootstrap interval over contests."""
    if ctx.invoked_subcommand is not None:
        return
    from e1.report import check_elo_options, estimate_rating, load_results

    check_elo_options(pass_n, min_participants)  # before any file is read
    if results is None or contests is None:
        raise ConfigError("e1 elo needs --results and --contests", hint="see `e1 elo --help`")
    from e1.budget import parse_tokens

    attempts = load_results(
        results,
        dataset=dataset,
        mode=mode,
        think=None if think is None else parse_tokens(think, "think budget"),
        solve=None if solve is None else parse_tokens(solve, "solve budget"),
    )
    estimate = estimate_rating(attempts, contests, pass_n=pass_n, min_participants=min_participants)
    if as_json:
        typer.echo(json.dumps(estimate.to_json()))
    else:
        from rich.console import Console

        from e1.report import elo_table

        Console().print(elo_table(estimate, min_participants))


@app.command(
    "fetch",
    cls=Command,
    no_args_is_help=True,
    epilog="Example:\n\n  e1 elo fetch --contests 1971,1972 --out cf --population",
)
def fetch_command(
    contests: Annotated[str, typer.Option("--contests", "-c", help="Contest ids, comma-separated: 1971,1972.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the contest files.", parser=nonempty_path("--out"))
    ],
    population: Annotated[
        bool, typer.Option("--population", help="Also store the rating histogram of all rated users.")
    ] = False,
    retries: Annotated[int, typer.Option("--retries", help="Tries after the first before giving up.")] = 5,
    api_url: Annotated[
        str | None, typer.Option("--api-url", help="API base URL.", show_default="https://codeforces.com/api/")
    ] = None,
) -> None:
    """Download contest standings and rating changes from the Codeforces API (files already there are kept)."""
    from e1.report import FetchConfig, fetch_contests

    try:
        contest_ids = [int(part) for part in contests.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--contests {contests!r}: expected ids like 1971,1972") from None
    if not contest_ids:
        raise ConfigError("--contests is empty", hint="e.g. --contests 1971,1972")
    config = FetchConfig(retries=retries) if api_url is None else FetchConfig(base_url=api_url, retries=retries)
    fetch_contests(contest_ids, out, population=population, config=config, log=typer.echo)
