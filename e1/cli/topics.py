"""`e1 help TOPIC`: help that is longer than one option's, shown once instead of in every command.

    e1 help          # the topics
    e1 help modes    # the decoding modes' grammar, each mode and each of its options

Each page is built from the registry it describes (the modes from :mod:`e1.engine.modes`), so it
never drifts from what the commands accept; it prints plain text wrapped to the terminal.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from typing import Annotated

import typer

from e1.cli.help import command_app
from e1.errors import ConfigError

Line = tuple[int, str]  # (indent, text): a wrapped line continues at indent + 2 when indent > 0 or it is a term


def modes_page() -> list[Line]:
    """The decoding modes: how one is written, then each mode with its options (from the registry)."""
    from e1.engine import modes_reference, modes_usage

    lines: list[Line] = [
        (0, "Decoding modes"),
        (0, ""),
        (
            0,
            (
                "A mode is written name[:key=value]..., each option at most once, e.g. elastic:exit=qwen:grace=32. "
                "A text value with colons or commas goes in quotes: elastic:exit='Time is up.'. The same text is what "
                "e1 eval --mode, e1 sweep --modes (comma-separated), e1 serve --mode, a request's budget_mode and "
                "config files take, and what config.json and the results' mode column record."
            ),
        ),
        (0, ""),
        (0, "Grammar:"),
        (0, ""),
        *((2, item) for item in modes_usage().split(" | ")),
    ]
    for name, summary, options in modes_reference():
        lines += [(0, ""), (-1, f"{name}: {summary}"), *((2, option) for option in options)]
    return lines


def topics_page() -> list[Line]:
    return [(0, "Topics (e1 help TOPIC):"), (0, ""), *((2, f"{name}: {what}") for name, (what, _) in TOPICS.items())]


TOPICS: dict[str, tuple[str, Callable[[], list[Line]]]] = {
    "modes": ("the decoding modes: how one is written, each mode and its options", modes_page),
}


def wrapped(lines: list[Line], width: int) -> str:
    """Each line wrapped to ``width``; indent -1 marks a term (``name: what it is``) that hangs at 2."""
    out = []
    for indent, text in lines:
        first = " " * max(indent, 0)
        rest = first + "  " if indent else ""
        out += textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False) or [""]
    return "\n".join(out)


def help_command(
    topic: Annotated[str | None, typer.Argument(show_default=False, help="A topic: modes.")] = None,
) -> None:
    """Longer help on one topic: e1 help modes (the decoding modes and their options)."""
    width = min(shutil.get_terminal_size().columns, 100)
    if topic is None:
        lines = topics_page()
    elif topic in TOPICS:
        lines = TOPICS[topic][1]()
    else:
        from e1.errors import did_you_mean

        raise ConfigError(f"no help topic {topic!r}", hint=did_you_mean(topic, TOPICS, "topics are"))
    typer.echo(wrapped(lines, width))


app = command_app(help_command, epilog="Example:\n\n  e1 help modes")
