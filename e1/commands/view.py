"""`e1 view`: a local web app over run directories (curves, samples, side by side, training metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from e1.cli.help import command_app

EXAMPLES = """Examples:

  e1 view runs/sweep runs/e1-1k
  e1 view runs/demo --port 8800
  e1 view runs/sweep --host 0.0.0.0 --token $(openssl rand -hex 16)
  e1 view runs/sweep runs/e1-1k --bundle share/sweep"""


def view_command(
    runs: Annotated[
        list[Path],
        typer.Argument(
            show_default=False,
            metavar="RUN_DIR",
            help="Run directories (eval, sweep, train, demo); folders are searched for runs.",
        ),
    ],
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; anything but loopback needs --token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="E1_VIEW_TOKEN",
            show_default=False,
            help="Secret the browser must present (the printed URL carries it); required off loopback.",
        ),
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle",
            show_default=False,
            metavar="OUT",
            help="Write the viewer and the runs' data as a static folder (open OUT/index.html, or serve it with any static server) instead of serving.",
        ),
    ] = None,
) -> None:
    """Look at runs in a browser: accuracy-vs-tokens curves, a sample browser with the forced
    cut marked, two runs side by side on one problem, training metrics over steps.

    Needs the view extra: pip install -e '.[view]'. Reads the parquet files on request; nothing
    is copied or fetched.
    """
    import signal
    import threading

    from e1.view import ViewConfig, bundle_runs, serve

    if bundle is not None:
        written = bundle_runs(list(runs), bundle)
        typer.echo(f"e1 view: wrote {len(written)} files to {bundle}; open {bundle / 'index.html'} in a browser")
        return
    config = ViewConfig(paths=tuple(runs), host=host, port=port, token=token)
    if threading.current_thread() is threading.main_thread():  # uvicorn stops on Ctrl-C, then passes it on:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a plain KeyboardInterrupt (no run to resume)
    try:
        serve(config, announce=lambda line: typer.echo(line + "  (Ctrl-C to stop)"))
    except KeyboardInterrupt:
        typer.echo("e1 view stopped")


app = command_app(view_command, no_args_is_help=True, epilog=EXAMPLES)
