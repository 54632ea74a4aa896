"""Every number is checked for what it is (:mod:`e1.numeric`): finite, in range, whole where it must be.

The options are not listed here: they are read from the typer app (every int or float option of
every command) and from the config dataclasses' fields, so a new option is covered the day it is
added, and fails here until its command has a base command line below and its field a spec.
"""

from __future__ import annotations

import math
import re
import time
import typing
from dataclasses import fields
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.cli.app import app
from e1.errors import ConfigError, E1Error
from tests.test_bad_inputs import run_main

INT64_MAX = 2**63 - 1

# a command line per command that fails fast, after the numbers are checked, for a reason of its
# own (``valid``): a value the option accepts reaches it and no model ever loads
BASE = {
    "eval": (["--model", "./no-model", "--datasets", "{data}", "--out", "{out}"], "no model folder"),
    "sweep": (["--model", "./no-model", "--datasets", "{data}", "--out", "{out}"], "no model folder"),
    "train": (["--model", "./no-model", "--data", "{data}", "--out", "{out}"], "no model folder"),
    "serve": (["--model", "./no-model", "--print-command"], "no model folder"),
    "demo": (["--out", "{out}", "--readme", "{tmp}/missing/README.md"], "--readme"),
    "elo": (["--results", "{tmp}/none.json", "--contests", "{tmp}"], "no results"),
    "elo fetch": (["--contests", "1", "--out", "{out}", "--api-url", "notaurl"], "--api-url"),
    "view": (["{tmp}/no-run"], "no such directory"),
}
HOSTILE = {  # never a valid value of any numeric option
    "integer": ["nan", "inf", "-inf", "1e400", "9" * 23, "9" * 400, "-" + "9" * 23],
    "float": ["nan", "inf", "-inf", "1e400", "-1e400", "NaN", "-nan"],
}
EDGE = ["-1", "0"]  # valid for some options (--seed 0, --top-k 0), refused by others


def numeric_options() -> list[tuple[str, str]]:
    """(command path, flag) of every int or float option of every visible command."""
    from e1.cli.app import ALIASES

    found = []

    def walk(command, path: str) -> None:
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not getattr(sub, "hidden", False) and name not in ALIASES:  # an alias is the command it names
                walk(sub, f"{path} {name}".strip())
        for param in command.params:  # typer keeps each parameter's annotation, Optional unwrapped
            kind = {int: "integer", float: "float"}.get(
                getattr(param, "type_descriptor", None) and param.type_descriptor.annotation
            )
            if param.param_type_name == "option" and not param.is_flag and kind:
                found.append((path, param.opts[0], kind))

    walk(typer.main.get_command(app), "")
    return found


OPTIONS = numeric_options()


def test_every_command_with_numeric_options_has_a_base_command_line():
    commands = {path for path, _, _ in OPTIONS}
    assert commands <= set(BASE), f"add a fast-failing command line to BASE for {sorted(commands - set(BASE))}"
    assert len(OPTIONS) >= 60  # eval, sweep and train each take about twenty


def names_option(text: str, flag: str) -> bool:
    """The message names ``flag`` as typed (--top-p), or its config key says what it must be
    (``top_p must be``, ``test_time_limit_s must be``); "--n" does not match "--no" nor "n"."""
    key = flag.lstrip("-").replace("-", "_")
    return bool(
        re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
        or re.search(rf"(?<![\w-]){re.escape(key)}\w* must be", text)
    )


@pytest.fixture
def paths(tmp_path) -> dict[str, str]:
    (tmp_path / "data.jsonl").write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    return {"data": str(tmp_path / "data.jsonl"), "out": str(tmp_path / "out"), "tmp": str(tmp_path)}


@pytest.mark.parametrize("command, flag, kind", OPTIONS, ids=[f"{c}:{f}" for c, f, _ in OPTIONS])
def test_every_numeric_option_refuses_what_is_not_a_number_in_range(command, flag, kind, paths, tmp_path, capsys):
    base, valid = BASE[command]
    for value in HOSTILE[kind] + EDGE:
        started = time.perf_counter()
        args = [*command.split(), *[a.format(**paths) for a in base], f"{flag}={value}"]
        code, err = run_main(args, capsys)
        text = " ".join(err.split())
        assert code in (1, 2), (value, err)
        assert "Traceback" not in err and "please report it" not in err, (value, err)
        if code == 1:  # e1's own error: one red line (after the stage a log shows when a model starts loading)
            *progress, last = err.strip().splitlines()
            assert last.startswith("error: ") and all(line.startswith("loading ") for line in progress), (value, err)
        if value in EDGE:
            assert names_option(text, flag) or valid in text, (value, err)
        else:
            assert names_option(text, flag), (value, err)
        assert not (tmp_path / "out").exists(), f"{flag}={value} created --out"
        assert time.perf_counter() - started < 20, f"{flag}={value} took {time.perf_counter() - started:.0f} s"


# -- the config dataclasses: every numeric field has a spec, and a generated value is checked ------


# (module, config class, its spec tables, the other arguments it needs); resolved in the tests
CONFIGS = [
    ("e1.grpo.config", "TrainConfig", ("e1.grpo.config:TRAIN_NUMBERS",), {"model": "m", "data": "d"}),
    ("e1.eval.run", "EvalConfig", ("e1.eval.run:EVAL_NUMBERS",), {"model": "m", "datasets": ("d",)}),
    ("e1.engine.spec", "EngineSpec", ("e1.engine.spec:ENGINE_NUMBERS",), {}),
    ("e1.rewards.scoring", "ScoringSpec", ("e1.rewards.scoring:SCORING_NUMBERS",), {}),
    ("e1.engine.base", "Sampling", ("e1.engine.base:SAMPLING_NUMBERS",), {}),
    ("e1.serve.server", "ServeConfig", ("e1.serve.server:SERVE_NUMBERS",), {"model": "m"}),
    ("e1.demo.pipeline", "DemoConfig", ("e1.demo.pipeline:DEMO_NUMBERS",), {}),
    ("e1.report.elo", "FetchConfig", ("e1.report.elo:FETCH_NUMBERS",), {}),
    (
        "e1.engine.api.openai_engine",
        "ApiSettings",
        ("e1.engine.api.openai_engine:API_NUMBERS",),
        {"url": "http://127.0.0.1:1/v1"},
    ),
    ("e1.view.server", "ViewConfig", ("e1.view.server:VIEW_NUMBERS",), {"paths": ("runs/x",)}),
]


def resolve(entry) -> tuple[type, dict, dict]:
    import importlib

    module, name, tables, required = entry
    specs = {}
    for table in tables:
        where, _, attribute = table.partition(":")
        specs |= getattr(importlib.import_module(where), attribute)
    return getattr(importlib.import_module(module), name), specs, required


def numeric_fields(cls) -> list[str]:
    """Fields whose type is a number (``int``, ``float``, ``int | None``), not ``str | int`` or ``bool``."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in fields(cls):
        kinds = set(typing.get_args(hints[f.name]) or (hints[f.name],)) - {type(None)}
        if kinds and kinds <= {int, float}:
            found.append(f.name)
    return found


@pytest.mark.parametrize("entry", CONFIGS, ids=[entry[1] for entry in CONFIGS])
def test_every_numeric_config_field_has_a_spec(entry):
    cls, specs, _ = resolve(entry)
    assert set(numeric_fields(cls)) <= set(specs), f"{cls.__name__}: declare a Number for each numeric field"


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**30), 10**30),
    st.sampled_from(
        [0, -1, 1, 0.0, 1.0, INT64_MAX, INT64_MAX + 1, 10**400, float("nan"), float("inf"), True, "1", None]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry=st.sampled_from(CONFIGS), data=st.data(), value=NUMBERS)
def test_a_config_takes_a_number_only_if_its_spec_does(entry, data, value):
    cls, specs, required = resolve(entry)
    name = data.draw(st.sampled_from(sorted(set(specs) & {f.name for f in fields(cls)})))
    spec = specs[name]  # an e1.numeric.Number
    try:
        config = cls(**required, **{name: value})
    except E1Error as err:  # refused: by its own spec (naming it), or by a rule between fields
        if not spec.fits(value):
            assert isinstance(err, ConfigError) and name.removesuffix("_s").replace("_", "-") in str(err).replace(
                "_", "-"
            )
        return
    stored = getattr(config, name)
    assert spec.fits(stored), f"{cls.__name__}({name}={value!r}) was accepted"
    assert stored is None or math.isfinite(stored) and abs(stored) <= INT64_MAX


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30)))
def test_a_token_count_is_a_whole_number_in_range_or_a_budget_error(value):
    from e1.budget import MAX_TOKENS, parse_tokens
    from e1.errors import BudgetError

    try:
        tokens = parse_tokens(value, "thinking_budget")
    except BudgetError as err:
        assert "thinking_budget" in str(err)
        return
    assert isinstance(tokens, int) and 0 <= tokens <= MAX_TOKENS


@pytest.mark.parametrize("text", ["9" * 400, "9" * 5000 + "k", str(2**31), "1" + "0" * 30 + ".5k"])
def test_a_huge_budget_is_refused_naming_it_not_overflowing(text):
    from e1.budget import parse_tokens
    from e1.errors import BudgetError

    with pytest.raises(BudgetError, match="thinking_budget must be <= 2147483647"):
        parse_tokens(text, "thinking_budget")


@pytest.mark.parametrize(
    "xargs, field",
    [
        ({"thinking_budget": "9" * 400, "solution_budget": 4}, "thinking_budget"),
        ({"thinking_budget": 4, "solution_budget": float("nan")}, "solution_budget"),
        ({"budget_room": "x"}, "budget_room"),
        ({"budget_room": 1.5}, "budget_room"),
        ({"budget_room": [3]}, "budget_room"),
    ],
)
def test_a_served_request_field_of_the_wrong_kind_is_a_400_naming_it(xargs, field):
    from e1.serve.budgets import check_fields, check_room

    with pytest.raises(E1Error, match=field):  # E1Error: the middleware's and the processor's HTTP 400
        check_fields(xargs)
        check_room(xargs, 10)


def test_the_middleware_refuses_a_clients_budget_room_of_the_wrong_kind(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers
    from e1.serve.budgets import ServeDefaults
    from e1.serve.responses import Served, prepare

    tokenizer = load_tokenizer(str(tiny_model_dir))
    served = Served(ServeDefaults(think=6, solve=4), tokenizer, resolve_markers(tokenizer), 256)
    with pytest.raises(E1Error, match="budget_room must be a whole number"):
        prepare({"messages": [], "vllm_xargs": {"budget_room": "x"}}, served)


def test_yaml_reads_what_the_hints_write_as_floats(tmp_path):
    import yaml

    from e1.grpo.config_file import _example, load_config_file

    for key in ("lr", "kl_coef", "weight_decay", "test_time_limit_s"):
        assert isinstance(yaml.safe_load(f"{key}: {_example(key)}")[key], float), _example(key)
    config = tmp_path / "train.yaml"
    config.write_text("lr: 1e-6\nkl_coef: 3E-3\nmodel: 1e5\n")  # YAML 1.1 reads all three as strings
    assert load_config_file(config) == {"lr": 1e-6, "kl_coef": 3e-3, "model": "1e5"}


def test_the_module_doctests():
    import doctest

    import e1.numeric

    assert doctest.testmod(e1.numeric).failed == 0


def test_a_path_kind_says_what_is_there(tmp_path):
    import os

    from e1.store.preflight import path_kind

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    assert path_kind(tmp_path / "fifo") == "a FIFO (named pipe)"
    assert path_kind(tmp_path / "loop") == "a symlink loop"
    assert path_kind(tmp_path / "broken").startswith("a broken symlink")
    assert path_kind(tmp_path) == "a directory"
    assert path_kind(Path("/dev/null")) == "a character device"
    assert path_kind(tmp_path / "nothing") is None
