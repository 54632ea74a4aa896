"""How every ``--help`` of e1 reads: literal text, paragraphs that reflow, flags written as they are typed.

Every e1 app and command is declared with the classes here:

    app = typer.Typer(cls=Group)
    app.command(name="eval", cls=Command, epilog=EXAMPLES)(eval_command)

- **Text is literal.** typer renders help as rich markup, which ate ``pip install 'e1[gemini]'``
  (``[gemini]`` read as a style) and would turn ``:a:`` into an emoji. :func:`literal` is the one
  gate every help text (a command's, its epilog, each option's and argument's) passes on its way to
  typer: help strings in e1 carry no markup, so none is ever interpreted.
- **Paragraphs reflow.** typer keeps a docstring's single newlines, so a docstring wrapped at 100
  columns broke mid-sentence at other widths: :func:`reflow` joins a paragraph's lines (an indented
  line, such as an example, keeps its own).
- **Flags show no value type** (``--json``, not ``--json <bool>``, which reads as if ``--json true``
  were the way to write it; it is refused).
- **Commands load when used.** :class:`LazyGroup` names its commands in a table (module and one-line
  summary) and imports a command's module only to run it or show its own help, so ``e1 --help`` and
  tab completion do not import every command's dependencies.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import ClassVar

import typer
import typer.core

from e1.errors import ConfigError, did_you_mean

# a line that starts so keeps its line break: an indented example, a list item
_OWN_LINE = (" ", "\t", "- ", "* ", "• ")
_EMOJI_CODE = re.compile(r":\S*?(?:-(?:emoji|text))?:")  # the shape rich replaces with an emoji
_BRACKET = re.compile(r"(\\*)\[")  # a "[" and the backslashes right before it
_TAG = re.compile(r"[a-z#/@][^[]*?]")  # what rich reads as a tag after a "[" (rich.markup.RE_TAGS)
_WORD_JOINER = "\u2060"  # invisible, zero width: splits an emoji code without changing what is shown


def literal(text: str | None) -> str | None:
    """``text`` as rich markup that renders as ``text`` itself: every ``[`` and the backslashes before
    it escaped as rich's parser reads them, every emoji code split.

    >>> literal("pip install 'e1[gemini]'"), literal("a\\\\[b")
    ("pip install 'e1\\\\[gemini]'", 'a\\\\\\\\[b')
    """
    if not text:
        return text
    from rich.emoji import Emoji

    def bracket(match: re.Match) -> str:
        # a tag-like "[x...]" after n backslashes: rich prints n // 2 of them, and the tag as text if n is odd;
        # any other "[": rich reads each "\[" as "[" (so one more backslash than shown)
        slashes = len(match.group(1))
        return "\\" * (2 * slashes + 1 if _TAG.match(text, match.end()) else slashes + 1) + "["

    markup = _BRACKET.sub(bracket, text) if "[" in text else text
    parts, done = [], 0
    for colon in (found.start() for found in re.finditer(":", markup)):  # codes may overlap: try every colon
        code = _EMOJI_CODE.match(markup, colon)
        if code and Emoji.replace(code.group(0)) != code.group(0):
            parts += [markup[done : colon + 1], _WORD_JOINER]
            done = colon + 1
    return "".join([*parts, markup[done:]])


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
    """What :class:`Command` and :class:`Group` add to typer's classes: literal, reflowed help; typeless flags."""

    def __init__(self, *args, help: str | None = None, epilog: str | None = None, params=None, **kwargs):
        for param in params or ():
            param.help = literal(getattr(param, "help", None))
        super().__init__(*args, help=literal(reflow(help)), epilog=literal(epilog), params=params, **kwargs)

    def format_help(self, ctx, formatter) -> None:
        _flags_without_type(self.get_params(ctx))
        super().format_help(ctx, formatter)


class Command(_HelpReads, typer.core.TyperCommand):
    """A typer command whose help is literal, reflows, and shows flags as they are typed."""


class Group(_HelpReads, typer.core.TyperGroup):
    """A typer group (``e1 data``, ``e1 elo``) with the help of :class:`Command`."""


def command_app(function, **settings) -> typer.Typer:
    """A typer app holding one command, for :class:`LazyGroup` to load: ``app = command_app(eval_command,
    no_args_is_help=True, epilog=EXAMPLES)``."""
    app = typer.Typer(add_completion=False, rich_markup_mode="rich", pretty_exceptions_show_locals=False)
    app.command(cls=Command, **settings)(function)
    return app


@dataclass(frozen=True)
class Lazy:
    """A command :class:`LazyGroup` imports when it is used: ``module.app`` is a typer app holding it."""

    module: str
    summary: str  # the first line of the command's help, shown by ``e1 --help`` without importing it


def with_aliases(commands: dict[str, Lazy], aliases: dict[str, str]) -> dict[str, Lazy]:
    """``commands`` with each alias after its command, listed as ``The same command as e1 <name>.``"""
    table = {}
    for name, entry in commands.items():
        table[name] = entry
        table |= {
            alias: Lazy(entry.module, f"The same command as e1 {name}.") for alias, to in aliases.items() if to == name
        }
    return table


class _Commands(MutableMapping):
    """A group's commands by name, each imported on first look-up; listing the names imports nothing."""

    def __init__(self, lazy: dict[str, Lazy], loaded: dict):
        self.lazy, self.loaded = lazy, dict(loaded)

    def __getitem__(self, name: str):
        if name not in self.loaded:
            entry = self.lazy[name]  # KeyError: no such command
            command = typer.main.get_command(importlib.import_module(entry.module).app)
            command.name = name
            self.loaded[name] = command
        return self.loaded[name]

    def __setitem__(self, name: str, command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self.loaded.pop(name, None)
        self.lazy.pop(name, None)

    def __iter__(self):
        return iter({**dict.fromkeys(self.lazy), **self.loaded})

    def __len__(self) -> int:
        return len({**self.lazy, **self.loaded})


class UnknownCommand(ConfigError):
    """``e1 <name>`` where no command has that name: a usage error (exit code 2, as click's)."""

    exit_code = 2


class LazyGroup(Group):
    """The root group: its commands (``LAZY``, set by a subclass) load when run or asked for their
    own help; its listing (``e1 --help``, ``e1 <TAB>``) shows each one's summary without loading it."""

    LAZY: ClassVar[dict[str, Lazy]] = {}

    def __init__(self, *args, commands=None, **kwargs):
        super().__init__(*args, commands=_Commands(dict(self.LAZY), commands or {}), **kwargs)
        self._listing = False

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx, name: str):
        if self._listing and name in self.LAZY and name not in self.commands.loaded:
            return Command(name=name, help=self.LAZY[name].summary)
        return self.commands.get(name)

    def resolve_command(self, ctx, args):
        """A mistyped command is one line naming the closest ones (``e1 evl``: did you mean 'eval' or 'elo'?)."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            raise UnknownCommand(
                f"no such command {name!r}",
                hint=did_you_mean(name, self.list_commands(ctx), listing="the commands are:"),
            )
        return super().resolve_command(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        """typer's layout drawn with rich's light parts: typer's own renderer imports rich's markdown,
        syntax and traceback modules (pygments, markdown-it), most of the time `e1 --help` took."""
        _flags_without_type(self.get_params(ctx))
        _draw_root_help(self, ctx)

    def shell_complete(self, ctx, incomplete: str):
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False


def _draw_root_help(group: LazyGroup, ctx) -> None:
    """The root's --help: usage, help, an options panel, a commands panel (each command's summary
    from the table, nothing imported) and the epilog, as typer lays them out."""
    import os

    from rich.console import Console
    from rich.markup import render
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    width = os.environ.get("TERMINAL_WIDTH")
    console = Console(highlight=False, width=int(width) if width else None)
    console.print(Padding(Text(group.get_usage(ctx), style="bold"), 1))
    head, _, rest = (group.help or "").partition("\n\n")
    console.print(Padding(render(" ".join(head.split())), (0, 1, 0, 1)))
    if rest:
        console.print(Padding(render(rest, style="dim"), (1, 1, 0, 1)))
    console.print()
    options = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1), expand=True)
    options.add_column(style="bold cyan", no_wrap=True)
    options.add_column(style="bold green", no_wrap=True)
    options.add_column(ratio=10)
    for param in group.get_params(ctx):
        if param.param_type_name != "option" or param.hidden:
            continue
        long = ", ".join(opt for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--"))
        short = ", ".join(opt for opt in param.opts if not opt.startswith("--"))
        options.add_row(long, short, render(param.help or ""))
    console.print(Panel(options, title="Options", title_align="left", border_style="dim"))
    commands = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1), expand=True)
    commands.add_column(style="bold cyan", no_wrap=True)
    commands.add_column(ratio=10)
    for name in group.list_commands(ctx):
        summary = group.LAZY[name].summary if name in group.LAZY else group.commands[name].get_short_help_str(200)
        commands.add_row(name, render(literal(summary)))
    console.print(Panel(commands, title="Commands", title_align="left", border_style="dim"))
    if group.epilog:
        console.print(Padding(render(inspect.cleandoc(group.epilog)), 1))
