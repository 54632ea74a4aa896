"""What the terminal shows: summary tables whose key cells are never cut, --help that documents
each flag as it is typed and reads in whole paragraphs, runs without library deprecation noise."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from e1.budget import format_tokens
from e1.report.ui import summary_table

MODES = [
    "elastic",
    "truncate",
    "none",
    "budget-forcing",
    "budget-forcing:wait=2",
    "elastic:exit=qwen",
    "elastic:exit=qwen:grace=32",
    "budget-forcing:wait=4:grace=16",
    "elastic:exit='Final answer:'",
]
FRACTION = st.one_of(st.floats(0, 1), st.just(math.nan))


@st.composite
def summaries(draw) -> pd.DataFrame:
    """A summary frame as e1 writes it: a few rows of datasets x modes x budgets, any figures."""
    count = draw(st.integers(1, 6))
    rows = []
    for _ in range(count):
        low, high = sorted([draw(FRACTION), draw(FRACTION)])
        rows.append(
            dict(
                dataset=draw(st.from_regex(r"[a-z][a-z0-9_.\-]{0,15}", fullmatch=True)),
                mode=draw(st.sampled_from(MODES)),
                think_budget=draw(st.sampled_from([0, 512, 1024, 1536, 3072, 32768]) | st.integers(0, 40000)),
                solve_budget=draw(st.sampled_from([1024, 1536]) | st.integers(1, 40000)),
                problems=draw(st.integers(1, 20000)),
                samples_per_problem=16,
                accuracy=draw(FRACTION),
                accuracy_ci_low=low,
                accuracy_ci_high=high,
                pass_at_1=draw(FRACTION),
                pass_at_k=draw(FRACTION),
                maj_at_k=draw(FRACTION),
                k=draw(st.sampled_from([1, 4, 16, 64])),
                mean_think_tokens=draw(st.floats(0, 40000)),
                mean_solve_tokens=draw(st.floats(0, 40000)),
                mean_total_tokens=0.0,
                forced_rate=draw(st.floats(0, 1)),
                natural_samples=1,
                natural_accuracy=draw(FRACTION),
                forced_samples=1,
                forced_accuracy=draw(FRACTION),
                unanswered_rate=draw(st.floats(0, 1)),
                tokens_per_correct=draw(st.floats(0, 1e6) | st.just(math.nan)),
                censored_rate=draw(st.floats(0, 1)),
                pass_at_2=draw(FRACTION),
            )
        )
    return pd.DataFrame(rows)


def rendered(renderable, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text().splitlines()


def _keys_fit(summary, width: int) -> bool:
    """Whether the key columns (dataset, mode, t+s) fit side by side, two spaces apart."""
    budgets = [
        f"{format_tokens(int(t))}+{format_tokens(int(s))}"
        for t, s in zip(summary["think_budget"], summary["solve_budget"])
    ]
    widths = [max(map(len, summary["dataset"])), max(map(len, summary["mode"])), max(map(len, budgets + ["t+s"]))]
    return sum(widths) + 2 * (len(widths) - 1) <= width


@settings(max_examples=80, deadline=None)
@given(summary=summaries(), width=st.sampled_from([60, 80, 100, 120]))
def test_every_key_cell_of_a_summary_table_is_shown_whole(summary, width):
    table = summary_table(summary, title="a model — elastic t=1k s=1k")
    lines = rendered(table, width)
    assert all(len(line) <= width for line in lines)
    cells = [line.split() for line in lines]
    # a key column with one value in every row (two rows or more) is named in the caption instead
    constant = {column for column in ("dataset", "mode") if len(summary) > 1 and summary[column].nunique() == 1}
    assert list(table.keys) == [c for c in ("dataset", "mode") if c not in constant] + ["t+s"]
    for row in summary.itertuples(index=False):
        budget = f"{format_tokens(int(row.think_budget))}+{format_tokens(int(row.solve_budget))}"
        mode = row.mode.split()  # a quoted exit text may hold a space
        key = [*([row.dataset] if "dataset" not in constant else []), *(mode if "mode" not in constant else []), budget]
        if _keys_fit(summary, width):
            assert any(words[: len(key)] == key for words in cells), (key, "\n".join(lines))
        else:  # wider than the terminal alone: folded onto more lines, never cut
            assert all(part in "".join("".join(words) for words in cells) for part in (row.dataset, budget)), key
    header = next(line for line in lines if "─" not in line and line.split()[:1] == list(table.keys)[:1])
    assert header.split()[: len(table.keys)] == list(table.keys)  # (a narrow table's title may wrap above it)


@settings(max_examples=30, deadline=None)
@given(summary=summaries())
def test_a_wide_terminal_shows_every_figure_and_a_narrow_one_names_what_it_left_out(summary):
    k = int(summary["k"].max())
    headers = [
        "probs",
        "avg@n",
        f"pass@{k}",
        f"maj@{k}",
        "think",
        "solve",
        "forced",
        "natural",
        "no ans.",
        "tok/✓",
        "cut",
        *(["pass@2"] if k != 2 else []),
    ]
    wide = " ".join(" ".join(rendered(summary_table(summary), 250)).split())  # a caption wraps at the table's width
    assert all(header in wide for header in headers) and "left out" not in wide
    narrow = " ".join(" ".join(rendered(summary_table(summary), 60)).split())
    constant = [h for h in headers if h not in summary_table(summary).figures]  # one value in every row
    assert "avg@n" not in constant and (not constant or len(summary) > 1)
    if constant:
        same = narrow.split("the same in every row: ")[1]
        assert all(f"{h} " in same for h in constant), (constant, narrow)
    missing = [h for h in headers if f" {h} " not in f" {narrow.split('─')[0]} " and h not in constant]
    if missing:
        left_out = narrow.split("left out at this width: ")[1]
        assert all(h in left_out for h in missing), (missing, narrow)


def commands():
    """Every command and group of e1, with its path: ("e1",), ("e1", "data", "prepare"), ..."""
    import typer

    from e1.cli.app import app

    found, todo = [], [(("e1",), typer.main.get_command(app))]
    while todo:
        path, command = todo.pop()
        found.append((path, command))
        todo += [((*path, name), sub) for name, sub in getattr(command, "commands", {}).items()]
    return sorted(found, key=lambda item: item[0])


def help_text(path: tuple[str, ...], width: int = 200) -> str:
    from typer.testing import CliRunner

    from e1.cli.app import app

    result = CliRunner().invoke(app, [*path[1:], "--help"], prog_name="e1", env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


COMMANDS = commands()


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
def test_every_flag_is_documented_as_it_is_typed_and_that_form_is_accepted(path, command):
    import re

    text = help_text(path)
    assert "<bool>" not in text, text
    ctx = command.context_class(command, info_name=path[-1])
    flags = [param for param in command.get_params(ctx) if getattr(param, "is_flag", False)]
    assert flags, "every command has at least --help"
    for flag in flags:
        for form, value in [(form, True) for form in flag.opts] + [(form, False) for form in flag.secondary_opts]:
            row = next(line for line in text.splitlines() if form in line.replace("│", " ").split()[:3])
            assert not re.search(r"<\w+>", row), row  # no value type after a flag
            opts, rest, _ = command.make_parser(ctx).parse_args([form])
            assert rest == [] and opts[flag.name] is value, (form, opts, rest)


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
def test_help_paragraphs_reflow_to_the_terminal_width(path, command):
    """At 200 columns a line of a paragraph ends only where the next word would not fit."""
    width = 200
    text = help_text(path, width)
    description = [line.rstrip() for line in text.split("╭")[0].splitlines()]
    for line, after in zip(description, description[1:]):
        if not line.strip() or not after.strip() or line.lstrip().startswith("Usage:"):
            continue
        indent = len(line) - len(line.lstrip())
        if len(after) - len(after.lstrip()) > indent:  # an example on its own line
            continue
        assert len(line) + 1 + len(after.split()[0]) > width - 4, f"a paragraph breaks after:\n{line}\n{after}"


def test_reflow_joins_a_paragraphs_lines_and_keeps_examples_and_lists():
    from e1.cli.help import reflow

    text = "One line\nand its rest.\n\nExamples:\n\n  e1 eval -n 1\n  e1 eval -n 2\n\nModes:\n- elastic\n- truncate"
    assert reflow(text) == (
        "One line and its rest.\n\nExamples:\n\n  e1 eval -n 1\n  e1 eval -n 2\n\nModes:\n- elastic\n- truncate"
    )
    assert reflow("\b\nkept\nas is") == "\b\nkept\nas is" and reflow(None) is None


def cache_renamed(model):
    """The tiny model as transformers 5.24 presents it: its forward takes the KV cache as ``cache``
    and warns when it is passed as ``past_key_values`` (a FutureWarning on every decoded token)."""
    import warnings

    import torch

    class Renamed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.config = model, model.config

        def forward(
            self,
            input_ids=None,
            attention_mask=None,
            position_ids=None,
            cache=None,
            use_cache=None,
            logits_to_keep=0,
            past_key_values=None,
            **kwargs,
        ):
            if past_key_values is not None:
                warnings.warn(
                    "`past_key_values` is deprecated and will be removed in version 5.40.0 for "
                    "`Qwen2ForCausalLM.forward`. Use `cache` instead.",
                    FutureWarning,
                    stacklevel=2,
                )
                cache = past_key_values
            return self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=use_cache,
                logits_to_keep=logits_to_keep,
                **kwargs,
            )

    return Renamed()


def test_decoding_and_training_pass_the_kv_cache_as_the_model_names_it(tiny_engine):
    import warnings

    import torch

    from e1.budget import Budget
    from e1.engine.base import Mode, Sampling
    from e1.engine.hf.hf_engine import HFEngine
    from e1.grpo.batches import MicroBatch, shared_prompt_logits

    model = cache_renamed(tiny_engine.model)
    engine = HFEngine(model, tiny_engine.tokenizer, tiny_engine.markers)
    prompt = tiny_engine.tokenizer.encode("What is 2 + 2?")
    ids = torch.tensor([prompt, prompt[1:] + prompt[:1]])  # [G=2, P]
    completion = torch.tensor([[5, 6, 7]] * 4)  # [B=4, C=3]
    batch = MicroBatch(
        rows=[0, 1, 2, 3],
        group_size=2,
        prompt_ids=ids,
        prompt_mask=torch.ones_like(ids),
        completion_ids=completion,
        completion_mask=torch.ones_like(completion),
        mask=torch.ones_like(completion),
        advantages=torch.zeros(4),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        completions = engine.generate([prompt] * 2, Budget(8, 4), Mode(), Sampling(temperature=1.0, seed=0))
        logits = shared_prompt_logits(model, batch)
    assert len(completions) == 2 and logits.shape[:2] == (4, 3)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eval", "sweep", "train"])
def test_a_run_prints_no_deprecation_warning(name, tiny_model_dir, problems_file, tmp_path, capsys):
    """Whatever transformers is installed: nothing it deprecates is called (warnings shown always)."""
    import warnings

    from tests.test_bad_inputs import run_main
    from tests.test_disk_full import command

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code, err = run_main(command(name, tiny_model_dir, problems_file, tmp_path / "run"), capsys)
    assert code == 0, err
    noise = [
        f"{w.category.__name__}: {w.message} ({w.filename})"
        for w in seen
        if issubclass(w.category, (FutureWarning, DeprecationWarning))
    ]
    assert not noise and "Warning" not in err, noise or err
