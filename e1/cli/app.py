"""The ``e1`` root: registers the subcommands and turns errors into one line.

Commands live beside this module (e1/cli/eval.py, ...), one thin module each. Nothing here (or in those
modules at import time) imports torch, so ``e1 --help`` and tab completion stay instant.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import typer

from e1 import __version__
from e1.cli import data as data_cmd
from e1.cli import demo as demo_cmd
from e1.cli import elo as elo_cmd
from e1.cli import eval as eval_cmd
from e1.cli import export as export_cmd
from e1.cli import serve as serve_cmd
from e1.cli import sweep as sweep_cmd
from e1.cli import train as train_cmd
from e1.cli import view as view_cmd
from e1.cli.help import Command, Group
from e1.errors import E1Error, redact, redact_logs

app = typer.Typer(
    name="e1",
    cls=Group,
    help=(
        "Elastic Reasoning under strict token budgets.\n\n"
        "Give a reasoning model [bold]t[/bold] thinking tokens and [bold]s[/bold] solution tokens, "
        "evaluate it, and train it to answer well from truncated thinking.\n\n"
        "Example: [cyan]e1 eval --model ./my-model --datasets aime --think 1k --solve 1k[/cyan]"
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"e1 {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Elastic Reasoning under strict token budgets."""


app.add_typer(data_cmd.app, name="data", cls=Group)
app.command(name="eval", cls=Command, no_args_is_help=True)(eval_cmd.eval_command)
app.command(name="train", cls=Command, no_args_is_help=True)(train_cmd.train_command)
app.add_typer(elo_cmd.app, name="elo", cls=Group)
app.command(name="demo", cls=Command)(demo_cmd.demo_command)
app.command(name="sweep", cls=Command, no_args_is_help=True)(sweep_cmd.sweep_command)
app.command(name="serve", cls=Command, no_args_is_help=True)(serve_cmd.serve_command)
app.command(name="view", cls=Command, no_args_is_help=True)(view_cmd.view_command)
app.command(name="export", cls=Command, no_args_is_help=True)(export_cmd.export_command)


def _fail(message: str, code: int) -> None:
    """One red line on stderr. The message is text, not markup: paths like ``runs/[v2]`` print as typed."""
    from rich.console import Console
    from rich.markup import escape

    line = redact(" ".join(message.split()))  # a server may echo the key back in its message
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/bold red] {escape(line)}")
    sys.exit(code)


def interrupted_message() -> str:
    """What Ctrl-C kept and how to continue: the run directories this process holds, if any."""
    from e1.store import held

    kept = ", ".join(str(path) for path in held())
    where = f"finished results are kept in {kept}" if kept else "finished results are kept"
    return f"interrupted: {where}; rerun the same command to resume (e1 train: add --resume)"


class Interrupted(BaseException):
    """Ctrl-C as e1 raises it: not a KeyboardInterrupt, which click turns into a bare "Aborted!",
    and not an Exception, which a library's ``except Exception`` could swallow."""


def _on_sigint(signum, frame) -> None:
    raise Interrupted(interrupted_message())  # now, while the run directories are still held


def unexpected(err: Exception) -> tuple[str, int]:
    """The line and exit code of a failure that is no :class:`E1Error`: a full disk (or quota,
    read-only file system) where a library wrote for itself says so (1); anything else asks for a report (2)."""
    from e1.store import DISK_ERRNOS, RESUME, disk_errno

    code = disk_errno(err)
    if code is None:
        return f"{type(err).__name__}: {err} (set E1_DEBUG=1 for a traceback and please report it)", 2
    reason, action = DISK_ERRNOS[code]
    where = f" {err.filename}" if getattr(err, "filename", None) else ""
    return f"cannot write{where}: {reason}; finished results up to here are kept ({action}, then {RESUME})", 1


def main() -> None:
    """Console-script entry point: run the app; E1Error → one red line and a non-zero exit."""
    debug = os.environ.get("E1_DEBUG", "") not in ("", "0")
    redact_logs()  # every log record and warning, e1's and the libraries', masks the keys e1 knows
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        app(prog_name="e1")
    except E1Error as err:
        if debug:
            raise
        _fail(str(err), err.exit_code)
    except Interrupted as err:
        if debug:
            raise
        _fail(str(err), 130)
    except KeyboardInterrupt:
        if debug:
            raise
        _fail(interrupted_message(), 130)
    except Exception as err:  # an unexpected failure still gets one line, not a traceback
        if debug:
            raise
        _fail(*unexpected(err))


if __name__ == "__main__":
    main()
