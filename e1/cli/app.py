"""The ``e1`` root: registers the subcommands and turns errors into one line.

Commands live beside this module (e1/commands/eval.py, ...), one thin module each. Nothing here (or in those
modules at import time) imports torch, so ``e1 --help`` and tab completion stay instant.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import ClassVar

import typer

from e1 import __version__
from e1.cli.help import Lazy, LazyGroup, with_aliases
from e1.errors import E1Error, hub_endpoint, redact, redact_chain, redact_logs

# each command: its module (loaded when the command runs or shows its help) and its one-line summary
COMMANDS: dict[str, Lazy] = {
    "eval": Lazy("e1.commands.eval", "Evaluate a model under a thinking budget t and a solution budget s."),
    "sweep": Lazy("e1.commands.sweep", "Sweep budgets × modes × models: accuracy against tokens used."),
    "train": Lazy(
        "e1.commands.train",
        "Train a reasoning model with GRPO under a think/solve budget (Elastic "
        "Reasoning), or fine-tune it (--algo sft).",
    ),
    "serve": Lazy("e1.commands.serve", "Serve a model with vLLM's OpenAI-compatible server and e1's budgets."),
    "data": Lazy(
        "e1.commands.data",
        "List and prepare datasets: each becomes <data dir>/<name>.parquet with "
        "columns id, dataset, problem, answer, task, task_version.",
    ),
    "view": Lazy(
        "e1.commands.view",
        "Look at runs in a browser: accuracy-vs-tokens curves, a sample browser "
        "with the forced cut marked, two runs side by side on one problem, "
        "training metrics over steps.",
    ),
    "export": Lazy(
        "e1.commands.export",
        "Export a run's results in a format other tools read: one task per "
        "dataset × mode × budget cell (named <dataset>_<mode>_t<t>_s<s>), for "
        "each model of the run.",
    ),
    "elo": Lazy(
        "e1.commands.elo",
        "Estimate a Codeforces rating and percentile from per-problem results (the CodeElo method), offline.",
    ),
    "demo": Lazy(
        "e1.commands.demo",
        "Run Elastic Reasoning end to end on a tiny model, offline: data, SFT, E1 training, budget curves.",
    ),
    "help": Lazy("e1.cli.topics", "Longer help on one topic: e1 help modes (the decoding modes and their options)."),
}
ALIASES = {"sweep-budgets": "sweep"}  # the design card's name for e1 sweep: the same command


class Root(LazyGroup):
    """``e1``: each command's module is imported only when that command runs or shows its help."""

    LAZY: ClassVar[dict[str, Lazy]] = with_aliases(COMMANDS, ALIASES)
    ALIASES: ClassVar[dict[str, str]] = ALIASES


app = typer.Typer(
    name="e1",
    cls=Root,
    help=(
        "Elastic Reasoning under strict token budgets.\n\n"
        "Give a reasoning model t thinking tokens and s solution tokens, "
        "evaluate it, and train it to answer well from truncated thinking."
    ),
    epilog="Example:\n\n  e1 eval --model ./my-model --datasets aime --think 1k --solve 1k",
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


def _fail(message: str, code: int) -> None:
    """One red line on stderr. The message is text, not markup: paths like ``runs/[v2]`` print as typed."""
    from rich.console import Console
    from rich.markup import escape

    line = " ".join(redact(message).split())  # a server may echo the key back (masked before spaces are joined)
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
    and not an Exception, which a library's ``except Exception`` could swallow. SIGTERM is landed the same way."""

    def __init__(self, message: str, code: int = 130):
        super().__init__(message)
        self.code = code  # 128 + the signal's number


def _on_sigint(signum, frame) -> None:
    if signum == signal.SIGTERM:  # kill, timeout, a scheduler's preemption: landed as Ctrl-C (a second one kills)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Interrupted(interrupted_message(), 128 + signum)  # now, while the run directories are still held


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
    from e1.cpu import cpu_done, cpu_threads

    cpu_threads()  # torch's CPU team sized to the cores other processes leave free (e1.cpu.pace)
    try:
        _main()
    finally:
        cpu_done()  # the command is over: a process that goes on (a test, a library) is torch's own again


def _main() -> None:
    """The app, with E1Error → one red line and a non-zero exit."""
    debug = os.environ.get("E1_DEBUG", "") not in ("", "0")
    redact_logs()  # every log record and warning, e1's and the libraries', masks the keys e1 knows
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        signal.signal(signal.SIGTERM, _on_sigint)  # the requests in flight land (journalled) before e1 exits
    try:
        hub_endpoint()  # read by the hub's libraries wherever e1 reaches the hub: one gate, before any request
        app(prog_name="e1")
    except E1Error as err:
        if debug:
            redact_chain(err)  # the traceback's lines mask what the one line would
            raise
        _fail(str(err), err.exit_code)
    except Interrupted as err:
        if debug:
            raise
        _fail(str(err), err.code)
    except KeyboardInterrupt:
        if debug:
            raise
        _fail(interrupted_message(), 130)
    except Exception as err:  # an unexpected failure still gets one line, not a traceback
        if debug:
            redact_chain(err)  # the traceback's lines mask what the one line would
            raise
        _fail(*unexpected(err))


if __name__ == "__main__":
    main()
