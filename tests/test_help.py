"""--help as a user at an 80-column terminal reads it: nothing cut, options in panels, text literal,
one default style, each example whole on its own lines, the mode grammar once (`e1 help modes`),
and `e1 --help` answering without loading any command (the time: benchmarks/help_speed.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.cli.app import Root, app
from e1.cli.help import Lazy, command_app

ROOT = Path(__file__).resolve().parents[1]
MAX_PANEL = 12  # options in one panel before a command must group them


def every_command():
    """(path, click command) for e1 and every command and group under it, loading each one."""
    found, todo = [], [(("e1",), typer.main.get_command(app))]
    while todo:
        path, command = todo.pop()
        found.append((path, command))
        ctx = command.context_class(command, info_name=path[-1])
        if hasattr(command, "list_commands"):
            todo += [((*path, name), command.get_command(ctx, name)) for name in command.list_commands(ctx)]
    return sorted(found, key=lambda item: item[0])


COMMANDS = every_command()
IDS = [" ".join(path) for path, _ in COMMANDS]


def shown(path: tuple[str, ...], *args: str, width: int = 80) -> str:
    result = CliRunner().invoke(app, [*path[1:], *args], prog_name="e1", env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


def options(command) -> list:
    ctx = command.context_class(command, info_name=command.name)
    return [p for p in command.get_params(ctx) if p.param_type_name == "option" and p.name != "help" and not p.hidden]


def words(text: str) -> str:
    """The text a reader sees, whitespace and box borders aside."""
    return " ".join(text.replace("│", " ").replace("\u2060", "").split())


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_help_fits_80_columns_with_nothing_cut(path, command):
    text = shown(path, "--help")
    for line in text.splitlines():
        assert len(line) <= 80, line
        assert "…" not in line, f"cut at 80 columns: {line}"  # a flag, a value or a default cut short
    for option in options(command):
        assert option.opts[0] in text, option.opts[0]  # every flag is written whole


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_options_are_grouped_in_panels_of_a_readable_size(path, command):
    mine = options(command)
    panels: dict[str, list[str]] = {}
    for option in mine:
        panels.setdefault(getattr(option, "rich_help_panel", None) or "Options", []).append(option.opts[0])
    if len(mine) > MAX_PANEL:  # a long command names a panel for every option
        assert "Options" not in panels, f"{' '.join(path)}: in no panel: {panels.get('Options')}"
    assert all(len(flags) <= MAX_PANEL for flags in panels.values()), panels
    text = shown(path, "--help", width=200)
    for panel in panels:
        assert f"╭─ {panel} " in text


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_defaults_are_shown_one_way_by_typer_not_written_in_help(path, command):
    for option in options(command):
        assert not re.search(r"\(default|default:|\[default", option.help or "", re.IGNORECASE), (
            option.opts,
            option.help,
        )
    text = shown(path, "--help", width=200)
    assert "(default" not in text and "[default: None]" not in text


def test_every_include_option_is_the_shared_one():
    """--include is declared once (e1.cli.options): each command that takes it says the same, and those
    that record it in config.json say so."""
    from e1.cli.options import INCLUDE_HELP

    taking = {
        " ".join(path[1:]): option.help
        for path, command in COMMANDS
        for option in options(command)
        if "--include" in option.opts
    }
    assert {"eval", "sweep", "train", "data prepare"} <= set(taking), sorted(taking)
    assert all(text.startswith(INCLUDE_HELP) for text in taking.values()), taking
    assert all("config.json" in taking[name] for name in ("eval", "sweep", "train"))
    assert "config.json" not in taking["data prepare"]  # prepare writes no run folder


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_each_example_shows_whole_on_its_own_lines(path, command):
    epilog = command.epilog or ""
    examples = [
        line.strip()
        for line in epilog.splitlines()
        if line.strip().startswith(("e1 ", "--", "GEMINI_API_KEY", "torchrun"))
    ]
    assert examples or path[-1] == "e1" or command.epilog, f"{' '.join(path)} has no example"
    text = [line.strip() for line in shown(path, "--help").splitlines()]
    for example in examples:
        assert example in text, f"example not on a line of its own at 80 columns: {example}"


def test_the_install_hint_keeps_its_brackets():
    assert "pip install 'e1[gemini]'" in words(shown(("e1", "eval"), "--help"))
    assert "pip install -e '.[view]'" in words(shown(("e1", "view"), "--help"))


PIECES = st.sampled_from(
    [
        "a",
        "b",
        " ",
        "[",
        "]",
        "/",
        "\\",
        ":",
        "=",
        "'",
        "e1",
        "[bold]",
        "[/]",
        ":a:",
        "[gemini]",
        ":smile:",
        "\\[",
        "[link=x]",
        "-emoji:",
    ]
)
HELP_TEXT = st.lists(PIECES, min_size=1, max_size=12).map("".join)


@settings(max_examples=60, deadline=None)
@given(text=HELP_TEXT.filter(lambda t: t.strip()))
def test_any_help_text_renders_as_written(text):
    """The gate (e1.cli.help.literal) leaves no markup: brackets, backslashes, emoji codes print as typed."""

    def command(x: str = typer.Option("", "--x", help=text, show_default=False)) -> None:
        pass

    command.__doc__ = text
    result = CliRunner().invoke(command_app(command), ["--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert words(result.output).count(words(text)) >= 2, (text, result.output)  # the command's help and --x's


def test_each_listed_summary_is_the_first_line_of_its_command_help():
    """The root lists commands from its table, without loading them; the table never drifts from them."""
    listed = words(shown(("e1",), "--help", width=300))
    for name, entry in Root.LAZY.items():
        command = typer.main.get_command(app).get_command(None, name)
        if name in Root.ALIASES:  # `e1 sweep-budgets`: listed as the command it is
            assert entry == Lazy(Root.LAZY[Root.ALIASES[name]].module, f"The same command as e1 {Root.ALIASES[name]}.")
        else:
            assert entry.summary == " ".join(command.help.split("\n\n")[0].split()), name
        assert f"{name} {words(entry.summary)}" in listed


def test_mode_options_point_to_the_modes_page_which_holds_the_grammar():
    from e1.engine import modes_reference, modes_usage

    page = shown(("e1", "help"), "modes")
    assert all(len(line) <= 80 for line in page.splitlines())
    unwrapped = "".join(line.strip() for line in page.splitlines())  # an item longer than 80 columns wraps
    for item in modes_usage().split(" | "):
        assert item in unwrapped, item
    for name, summary, helps in modes_reference():
        assert words(f"{name}: {summary}") in words(page)
        assert all(words(help) in words(page) for help in helps)
    for path in (("e1", "eval"), ("e1", "sweep"), ("e1", "serve")):
        text = words(shown(path, "--help"))
        assert "e1 help modes" in text
        assert words(modes_usage()) not in text and "stop=…" not in text  # the grammar is shown once, there


def test_an_unknown_help_topic_is_one_line_naming_the_closest():
    result = subprocess.run(
        [sys.executable, "-m", "e1", "help", "mode"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines() == ["error: no help topic 'mode' (did you mean 'modes'?)"]
    assert "modes" in shown(("e1", "help"))


def test_a_train_option_left_out_keeps_the_config_files_value(tmp_path, monkeypatch):
    """train's help shows the recipe's defaults as values, yet only options given on the command line
    (or in the environment) override the --config file."""
    import e1.grpo

    seen = {}

    def train(config, **kwargs):
        seen["config"] = config
        return tmp_path / "run"

    monkeypatch.setattr(e1.grpo, "train", train)
    config = tmp_path / "train.toml"
    config.write_text('model = "m"\ndata = "d.jsonl"\nsteps = 7\nlr = 0.5\nout = "x"\n')
    result = CliRunner().invoke(app, ["train", "--config", str(config), "--lr", "1e-06"])
    assert result.exit_code == 0, result.output
    assert seen["config"].steps == 7  # left out: the file's, not the shown default 200
    assert seen["config"].lr == 1e-06  # given, though equal to the default: the flag's
    assert "[default: 200]" in words(shown(("e1", "train"), "--help", width=200))
