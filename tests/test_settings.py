"""Each setting is declared once (e1/settings.py): the options of e1 eval, sweep, train and serve are
built from the settings dataclasses' fields, so none restates a config field by hand, `config.json`
keeps its flat shape, and every declared number is checked where the config is built."""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, fields

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.cli.app import app
from e1.data import PromptOptions
from e1.engine import ApiSettings, EngineSpec, Sampling, load_engine
from e1.errors import ConfigError
from e1.eval import EvalConfig, RunSettings
from e1.grpo import TrainConfig
from e1.rewards import ScoringSpec
from e1.serve import ServeConfig
from e1.serve.budgets import ServeDefaults
from e1.settings import declared, flag_of, flat_fields, numbers, record, unflatten

# the settings each command's config holds (EvalConfig's own: RunSettings, which --help reads without the run)
BUILDS = {
    "eval": (RunSettings, EngineSpec, Sampling, ScoringSpec, PromptOptions, ApiSettings),
    "train": (TrainConfig,),
    "serve": (ServeConfig, ServeDefaults),
}
BUILDS["sweep"] = BUILDS["eval"]


def config_names(configs) -> tuple[set[str], set[str]]:
    """Every field's name of ``configs`` (flat specs' included), and every declared setting's flag."""
    names, flags = set(), set()
    for config in configs:
        names |= set(flat_fields(config))
        flags |= {flag_of(name, how) for kind in (config, *_specs(config)) for name, (_, how) in declared(kind).items()}
    return names, flags


def _specs(config: type) -> list[type]:
    hints = typing.get_type_hints(config)
    return [hints[f.name] for f in fields(config) if "spec" in f.metadata]


def hand_twins() -> list[str]:
    """Options written by hand in a command that restate a config field (its name or its flag), and
    engine settings restated beside EngineSpec (a loader's keywords, a serve config's fields)."""
    commands = typer.main.get_command(app).commands
    twins = []
    for command, configs in BUILDS.items():
        names, flags = config_names(configs)
        derived = _derived(commands[command].callback)
        for param in commands[command].params:
            if param.name in derived or param.param_type_name != "option":
                continue
            if param.name in names or set(param.opts) & flags:
                twins.append(f"{command} {param.opts[0] if param.opts else param.name}")
    engine = {f.name for f in fields(EngineSpec)}
    twins += [f"load_engine({name}=)" for name in inspect.signature(load_engine).parameters if name in engine]
    twins += [f"ServeConfig.{f.name}" for f in fields(ServeConfig) if f.name in engine]
    return twins


def _derived(callback) -> set[str]:
    """The parameters of a command that an option class built from settings gives it."""
    hints = typing.get_type_hints(inspect.unwrap(callback), include_extras=True)
    return {name for hint in hints.values() for name in getattr(hint, "__derived__", ())}


def test_no_option_restates_a_config_field_by_hand():
    assert hand_twins() == []


def help_of(param) -> str:
    return param.help.replace("\\[", "[")  # typer escapes rich markup


def test_each_command_option_carries_its_settings_help_and_default():
    commands = typer.main.get_command(app).commands
    train = {param.name: param for param in commands["train"].params}
    for name, (f, how) in declared(TrainConfig).items():
        assert help_of(train[name]) == how.help, name
        if f.default is not MISSING and not isinstance(f.default, tuple):
            assert train[name].default == f.default, name
    evaluate = {param.name: param for param in commands["eval"].params}
    serve = {param.name: param for param in commands["serve"].params}
    for name, (f, how) in declared(EngineSpec).items():
        assert help_of(evaluate[name]) == how.help and evaluate[name].default == f.default, name
        if name not in ("backend", "device", "speculative"):
            assert help_of(serve[name]) == how.help and serve[name].default == f.default, name
    assert "device" not in serve and "backend" not in serve  # a server has neither
    assert "speculative" not in serve  # its budgets are forced through the logits: no drafter beside them
    assert train["dtype"].default == "float32" and "optimizer" in help_of(train["dtype"])  # training narrows them


def test_config_json_keeps_its_flat_shape():
    config = TrainConfig(
        model="m", data="d", engine=EngineSpec(backend="hf", dtype="bfloat16"), scoring=ScoringSpec(workers=3)
    )
    data = record(config)
    assert "engine" not in data and "scoring" not in data
    assert (data["dtype"], data["workers"], data["steps"]) == ("bfloat16", 3, 200)
    assert TrainConfig(**unflatten(TrainConfig, {k: v for k, v in data.items()})) == config
    evaluated = EvalConfig(model="m", datasets=("d",), engine=EngineSpec(tp=2))
    assert evaluated.to_json()["tp"] == 2 and "engine" not in evaluated.to_json()


NUMERIC = [
    (config, name, number)
    for config in (EngineSpec, Sampling, ScoringSpec, ApiSettings, ServeConfig)
    for name, number in numbers(config).items()
]
REQUIRED = {ApiSettings: {"url": "http://127.0.0.1:1/v1"}, ServeConfig: {"model": "m"}}


@pytest.mark.parametrize("config, name, number", NUMERIC, ids=[f"{c.__name__}.{n}" for c, n, _ in NUMERIC])
@settings(max_examples=25, deadline=None)
@given(value=st.one_of(st.integers(-(10**6), 10**6), st.floats(allow_nan=True, allow_infinity=True), st.none()))
def test_a_declared_number_is_checked_where_the_config_is_built(config, name, number, value):
    """A value the declaration refuses is a one-line ConfigError naming the flag; one it allows builds."""
    how = declared(config)[name][1]
    try:
        config(**REQUIRED.get(config, {}), **{name: value})
    except ConfigError as err:
        assert not number.fits(value) or "must be 0 or >=" in str(err), (value, err)  # Sampling's own rule
        assert flag_of(name, how) in str(err)
    else:
        assert number.fits(value), value


def test_load_engine_reads_every_engine_setting_from_its_one_spec(tiny_model_dir):
    """What the spec says is what loads: the backend, the weights' dtype, the device and the markers."""
    spec = EngineSpec(backend="hf", dtype="bfloat16", device="cpu", think_end="</think>")
    engine = load_engine(str(tiny_model_dir), spec, batch_size=3)
    assert type(engine).__name__ == "HFEngine" and engine.batch_size == 3
    assert (engine.dtype, engine.device.type) == ("bfloat16", "cpu")
    assert engine.markers.end_text == "</think>"
