"""The README and docs/ as a newcomer uses them: short, every link resolves, every `e1` command in a
fenced block is one the CLI accepts (command, flags and values parsed as a shell would pass them),
the README's first eval on your own file runs offline as written (with a tiny model's folder in
place of the demo's checkpoint), and so does every Python snippet of docs/integrations.md (its model
read from ``E1_MODEL``, which the test points at the tiny model)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from e1.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELLS = {"", "bash", "sh", "shell", "console"}


def blocks(page: Path) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang in SHELLS]


def shell_lines(block: str) -> list[str]:
    """The block's commands: continuations joined, heredoc bodies and comments dropped."""
    out, heredoc, pending = [], None, ""
    for line in block.split("\n"):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        found = re.search(r"<<-?\s*'?(\w+)'?", pending)
        if found:
            heredoc = found.group(1)
        if pending.strip():
            out.append(pending.strip())
        pending = ""
    return out


def e1_args(line: str) -> list[str] | None:
    """The arguments an e1 process gets from one shell line (after `e1` or `-m e1`), or None."""
    line = re.sub(r"\$\([^)]*\)", "X", line)  # a command substitution is one word
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "e1" and (i == 0 or "=" in words[i - 1] or words[i - 1] == "-m"):
            args = words[i + 1 :]
            for stop in ("&&", "|", ";", ">", "||"):
                args = args[: args.index(stop)] if stop in args else args
            return args
    return None


def commands(page: Path) -> list[tuple[str, bool]]:
    """(shell line, whether it is a whole command): every line of the page's fenced blocks (whole
    commands), and every inline code span that starts with `e1 ` (a command named in prose, often
    without its required options)."""
    inline = re.findall(r"(?<!`)`(e1 [^`\n]+)`(?!`)", FENCE.sub("", page.read_text()))
    return [(line, True) for block in blocks(page) for line in shell_lines(block)] + [(line, False) for line in inline]


PLACEHOLDERS = {"...", "<TAB>"}
COMMANDS = [
    (page.relative_to(ROOT).as_posix(), [a for a in args if a not in PLACEHOLDERS], whole)
    for page in PAGES
    for line, whole in commands(page)
    if (args := e1_args(line)) is not None
]


def test_the_readme_is_short_and_says_what_e1_does_now():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "soon" not in text.split("##")[0]  # the opening paragraph describes what e1 does today
    assert "## Decoding modes" in text and "| mode | thinking | solution | forced tokens |" in text


def test_the_readme_setup_test_command_is_the_ci_one():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in [line.strip() for block in blocks(ROOT / "README.md") for line in block.splitlines()]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_local_link_resolves(page):
    def anchors(target: Path) -> set[str]:
        return {
            re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", target.read_text(), re.MULTILINE)
        }

    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"\w+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} names no file"
        if anchor:
            assert anchor in anchors(target), f"{page.name}: {link} names no heading"


def test_the_docs_hold_commands_to_check():
    pages = {page for page, _, _ in COMMANDS}
    assert "README.md" in pages and len(pages) >= 8 and sum(whole for *_, whole in COMMANDS) >= 25


@pytest.mark.parametrize("page, args, whole", COMMANDS, ids=[f"{p}:{' '.join(a)[:60]}" for p, a, _ in COMMANDS])
def test_every_documented_command_parses(page, args, whole):
    """The command exists and every flag is one of its flags; a whole command (a fenced block's line)
    also has its required options and every value converts. Nothing runs."""
    command, name, rest = typer.main.get_command(app), "e1", list(args)
    while hasattr(command, "list_commands") and rest and not rest[0].startswith("-"):
        ctx = command.context_class(command, info_name=name)
        assert rest[0] in command.list_commands(ctx), (
            f"{page}: no command e1 {' '.join(args[: len(args) - len(rest) + 1])}"
        )
        command, name, rest = command.get_command(ctx, rest[0]), rest[0], rest[1:]
    ctx = command.context_class(command, info_name=name)
    flags = {opt for param in command.get_params(ctx) for opt in (*param.opts, *param.secondary_opts)}
    own = rest[: rest.index("--")] if "--" in rest else rest  # after "--": another program's options
    given = [word.split("=")[0] for word in own if word.startswith("-")]
    assert set(given) <= flags, f"{page}: e1 {' '.join(args)}: no such flag {sorted(set(given) - flags)}"
    if hasattr(command, "list_commands") or {"--help", "-h", "--version"} & set(rest):
        return
    with command.make_context(name, rest, resilient_parsing=not whole) as made:
        assert made.params is not None


def test_the_first_eval_on_your_own_file_runs_offline(tiny_model_dir, tmp_path):
    """The README's block, run as written but for the model folder: the file it writes, then e1 eval."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first eval on your own file, offline")[1].split("\n## ")[0]
    (block,) = blocks_of(section)
    heredoc = re.search(r"cat > (\S+) <<'EOF'\n(.*?)\nEOF\n", block, re.DOTALL)
    (tmp_path / heredoc.group(1)).write_text(heredoc.group(2) + "\n")
    (line,) = [line for line in shell_lines(block) if line.startswith("e1 eval")]
    args = e1_args(line)
    args[args.index("--model") + 1] = str(tiny_model_dir)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = Path(args[args.index("--out") + 1])
    assert (out / "samples.parquet").exists() and (out / "summary.parquet").exists()


def blocks_of(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang in SHELLS]


INTEGRATIONS = ROOT / "docs" / "integrations.md"


def snippets(page: Path) -> list[tuple[str, str]]:
    """(the section's heading, the code) of each fenced python block of ``page``, in order."""
    found, heading = [], ""
    for part in re.split(r"^(## .*)$", page.read_text(), flags=re.MULTILINE):
        if part.startswith("## "):
            heading = part[3:].strip()
        found += [(heading, body) for lang, body in FENCE.findall(part) if lang == "python"]
    return found


SNIPPETS = snippets(INTEGRATIONS)


def test_the_integrations_page_has_a_snippet_per_tool():
    headings = [heading for heading, _ in SNIPPETS]
    assert all(any(h.startswith(tool) for h in headings) for tool in ("transformers", "vLLM", "lm-evaluation", "TRL"))


@pytest.mark.parametrize("heading, code", SNIPPETS, ids=[heading.split(":")[0] for heading, _ in SNIPPETS])
def test_every_integration_snippet_runs_offline(heading, code, tiny_model_dir, tmp_path):
    """Each snippet as a script of its own (vLLM's workers import it), on the tiny model, offline."""
    if re.search(r"^from vllm|^import vllm", code, re.MULTILINE) and importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    script = tmp_path / "snippet.py"
    script.write_text(code)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "E1_MODEL": str(tiny_model_dir), "PYTHONPATH": path, "VLLM_CPU_KVCACHE_SPACE": "1"}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{heading}: {result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{heading}: printed nothing"
