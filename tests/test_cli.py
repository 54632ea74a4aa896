"""The CLI surface: help, lazy imports, completion, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def e1(*args, env=None, check=False):
    """Run the real console entry point (``python -m e1``) in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "e1", *args], capture_output=True, text=True, env=full_env, timeout=300, check=check
    )


def test_help_lists_working_commands_and_loads_no_command_and_no_heavy_library():
    """The root --help lists commands from its table: no command module, no heavy library is imported."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from e1.cli.app import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('torch', 'vllm', 'transformers', 'pandas', 'datasets',\n"
        "    'math_verify', 'starlette', 'uvicorn', 'plotly', 'pydantic', 'e1.commands.eval', 'e1.commands.sweep', 'e1.commands.train',\n"
        "    'e1.commands.serve', 'e1.engine', 'e1.grpo')))\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    for command in ("data", "eval", "elo", "sweep"):
        assert command in out


def test_only_working_commands_are_registered():
    import typer

    assert set(typer.main.get_command(app).commands) == {
        "data",
        "eval",
        "train",
        "elo",
        "sweep",
        "sweep-budgets",
        "demo",
        "serve",
        "view",
        "export",
        "help",
    }


def test_sweep_budgets_is_the_sweep_command():
    """The design card's name: `e1 sweep-budgets` runs e1 sweep itself (same options, same refusals)."""
    import typer

    commands = typer.main.get_command(app).commands
    assert [p.opts for p in commands["sweep-budgets"].params] == [p.opts for p in commands["sweep"].params]
    for name in ("sweep", "sweep-budgets"):
        result = runner.invoke(app, [name, "--model", "m", "--datasets", "aime", "--think", "1x"], prog_name="e1")
        assert "think budget" in str(result.exception), (name, result.output)
    usage = runner.invoke(app, ["sweep-budgets", "--help"], prog_name="e1", env={"COLUMNS": "80"}).output
    assert "Usage: e1 sweep-budgets" in usage


def test_a_mistyped_command_is_one_line_naming_the_closest():
    result = e1("evl", "--model", "m")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == ["error: no such command 'evl' (did you mean 'eval' or 'elo'?)"]
    assert "did you mean 'sweep-budgets'" in e1("sweep-budget").stderr


COMMAND_NAMES = ["data", "demo", "elo", "eval", "export", "help", "serve", "sweep", "sweep-budgets", "train", "view"]


@settings(max_examples=40, deadline=None)
@given(name=st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_0123456789.[]'", min_size=1, max_size=16))
def test_any_unknown_command_name_is_refused_by_the_one_gate(name):
    """Whatever is typed where a command goes: a known command runs; anything else is UnknownCommand,
    naming it, with the closest commands (or all of them), never a traceback."""
    from e1.cli.help import UnknownCommand

    assume(name not in COMMAND_NAMES and not name.startswith("-"))
    result = runner.invoke(app, [name], prog_name="e1")
    assert isinstance(result.exception, UnknownCommand), result.output
    assert repr(name) in str(result.exception) and result.exception.exit_code == 2
    assert "did you mean" in str(result.exception) or all(c in str(result.exception) for c in COMMAND_NAMES)


@settings(max_examples=30, deadline=None)
@given(command=st.sampled_from([c for c in COMMAND_NAMES if len(c) >= 4]), data=st.data())
def test_a_command_missing_one_letter_is_suggested(command, data):
    at = data.draw(st.integers(0, len(command) - 1))
    typo = command[:at] + command[at + 1 :]
    assume(typo not in COMMAND_NAMES)
    result = runner.invoke(app, [typo], prog_name="e1")
    assert f"'{command}'" in result.exception.hint, (typo, result.exception.hint)


@pytest.mark.parametrize(
    "command",
    [
        ["eval"],
        ["train"],
        ["demo"],
        ["data", "list"],
        ["data", "prepare"],
        ["elo"],
        ["elo", "fetch"],
        ["sweep"],
        ["serve"],
        ["view"],
    ],
)
def test_every_command_help_has_an_example(command):
    result = runner.invoke(app, [*command, "--help"], prog_name="e1")
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert "e1 " in result.output


@pytest.mark.parametrize("think", ["-1", "1x", "k", "", "1.3k"])
def test_bad_budget_is_one_line_error(think):
    result = e1("eval", "--model", "nowhere", "--datasets", "aime", "--think", think)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "think budget" in lines[0] and "Traceback" not in result.stderr


def test_solve_zero_is_refused():
    result = e1("eval", "--model", "nowhere", "--datasets", "aime", "--solve", "0")
    assert result.returncode != 0 and "solve budget must be >= 1" in result.stderr


def test_debug_env_shows_traceback():
    result = e1("eval", "--model", "nowhere", "--datasets", "aime", "--think", "1x", env={"E1_DEBUG": "1"})
    assert result.returncode != 0 and "Traceback" in result.stderr and "BudgetError" in result.stderr


def test_missing_model_folder_is_one_line_error(tmp_path):
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"problem": "1+1?", "answer": "2"}\n')
    result = e1(
        "eval", "--model", str(tmp_path / "no-model"), "--datasets", str(problems), "--out", str(tmp_path / "run")
    )
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no-model" in result.stderr
    assert not (tmp_path / "run" / "samples.parquet").exists()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_match_the_app(shell):
    generated = e1(
        "--show-completion", shell, env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}, check=True
    ).stdout
    committed = (ROOT / "completions" / f"e1.{shell}").read_text()
    assert generated == committed, f"completions/e1.{shell} drifted: regenerate it (see completions/README.md)"


def test_completion_answers_with_subcommands():
    result = e1(env={"_E1_COMPLETE": "complete_bash", "COMP_WORDS": "e1 ev", "COMP_CWORD": "1"})
    assert result.stdout.split() == ["eval"]
    result = e1(env={"_E1_COMPLETE": "complete_bash", "COMP_WORDS": "e1 sw", "COMP_CWORD": "1"})
    assert result.stdout.split() == ["sweep", "sweep-budgets"]
    result = e1(env={"_E1_COMPLETE": "complete_bash", "COMP_WORDS": "e1 eval --th", "COMP_CWORD": "2"})
    assert {"--think", "--think-start", "--think-end"} <= set(result.stdout.split())


def test_version():
    from e1 import __version__

    assert e1("--version").stdout.strip() == f"e1 {__version__}"


def test_eval_and_sweep_share_one_declaration_of_their_common_options():
    from dataclasses import fields

    import typer

    from e1.cli.run_options import RunOptions

    commands = typer.main.get_command(app).commands
    shared = {f.name for f in fields(RunOptions)}
    eval_params = {p.name: p for p in commands["eval"].params}
    sweep_params = {p.name: p for p in commands["sweep"].params}
    assert set(eval_params) - shared == {"model", "think", "solve", "mode", "n", "out"}
    assert set(sweep_params) - shared == {
        "models",
        "think",
        "solve",
        "budgets",
        "modes",
        "budget_axis",
        "efforts",
        "n",
        "independent",
        "out",
    }
    for name in shared:
        mine, theirs = eval_params[name], sweep_params[name]
        assert (mine.opts, mine.help, mine.default, mine.required) == (
            theirs.opts,
            theirs.help,
            theirs.default,
            theirs.required,
        ), name
    assert eval_params["datasets"].required and eval_params["test_time_limit_s"].default == 6.0
