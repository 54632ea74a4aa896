"""How every ``--help`` of e1 reads: paragraphs that reflow, flags written as they are typed.

typer (rich markup) keeps a docstring's single newlines, so a docstring wrapped at 100 columns
in the source broke mid-sentence at every other terminal width; and typer 0.29 prints a flag as
``--json <bool>``, which reads as if ``--json true`` were the way to write it (it is refused:
a flag takes no value). Every e1 app and command is declared with the classes here, which join
a paragraph's lines (an indented line, such as an example, keeps its own) and show a flag with
no value type, as typer did up to 0.28:

    app = typer.Typer(cls=Group)
    app.command(name="eval", cls=Command)(eval_command)
"""

from __future__ import annotations

import inspect

import typer.core

# a line that starts so keeps its line break: an indented example, a list item
_OWN_LINE = (" ", "\t", "- ", "* ", "• ")


def reflow(text: str | None) -> str | None:
    """``text`` with the hard-wrapped lines of each paragraph joined into one line.

    >>> reflow("Evaluate a model under\\na budget.\\n\\nExamples:\\n\\n  e1 eval\\n  e1 eval -n 4")
    'Evaluate a model under a budget.\\n\\nExamples:\\n\\n  e1 eval\\n  e1 eval -n 4'
    """
    if not text:
        return text
    return "\n\n".join(_joined(paragraph) for paragraph in inspect.cleandoc(text).split("\n\n"))


def _joined(paragraph: str) -> str:
    if paragraph.startswith("\b"):  # click's mark for a paragraph printed as written
        return paragraph
    lines: list[str] = []
    for line in paragraph.split("\n"):
        if lines and not line.startswith(_OWN_LINE) and not lines[-1].startswith(_OWN_LINE):
            lines[-1] = f"{lines[-1]} {line.strip()}"
        else:
            lines.append(line)
    return "\n".join(lines)


def _flags_without_type(params) -> None:
    """A flag's help row shows no value type: ``--json``, ``--resume / --no-resume``."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class _HelpReads:
    """What :class:`Command` and :class:`Group` add to typer's classes: reflowed help, typeless flags."""

    def __init__(self, *args, help: str | None = None, **kwargs):
        super().__init__(*args, help=reflow(help), **kwargs)

    def format_help(self, ctx, formatter) -> None:
        _flags_without_type(self.get_params(ctx))
        super().format_help(ctx, formatter)


class Command(_HelpReads, typer.core.TyperCommand):
    """A typer command whose help reflows and whose flags show as they are typed."""


class Group(_HelpReads, typer.core.TyperGroup):
    """A typer group (the root, ``e1 data``, ``e1 elo``) with the help of :class:`Command`."""
