"""A training config file (TOML or YAML) read and checked key by key, then merged with the options.

    values = load_config_file("train.toml")              # unknown keys and ill-typed values refused
    config = build_config("train.toml", steps=10)         # the options override the file

Importing this module does not import torch.
"""

from __future__ import annotations

import re
from dataclasses import MISSING
from pathlib import Path
from typing import Any

from e1.errors import ConfigError, did_you_mean
from e1.grpo.config import _FLAT, DEFAULTS, FIELDS, TrainConfig, from_flat


def check_keys(values: dict[str, Any], source: str = "config") -> None:
    """ConfigError naming the first unknown key and the closest valid one."""
    for key in values:
        if key not in FIELDS:
            raise ConfigError(f"{source}: unknown key {key!r}", hint=did_you_mean(key, FIELDS))


# a config file's value for a field must be one of these (bool is refused where a number belongs:
# TOML/YAML ``true`` is not 1); "Path" fields take strings
_TYPES = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "Path": (str, Path),
    "tuple[str, ...]": (list, tuple),
}
_TYPE_NAMES = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "Path": "a path (a string)",
    "tuple[str, ...]": "a list of paths",
}


def check_types(values: dict[str, Any], source: str = "config") -> None:
    """ConfigError naming the first value whose type does not fit its field, as the CLI refuses
    ``--steps 2.5``: ``steps = 2.5``, ``prompts_per_step = true`` and ``lr = "fast"`` are all refused.

    >>> check_types({"steps": 2.5}, "train.toml")
    Traceback (most recent call last):
    e1.errors.ConfigError: train.toml: steps must be a whole number, got 2.5 (write e.g. steps = 200)
    """
    annotations = {name: str(f.type) for name, f in _FLAT.items()}
    for key, value in values.items():
        kinds = [kind.strip() for kind in annotations[key].split("|")]
        if value is None and "None" in kinds:
            continue
        fits = any(
            isinstance(value, _TYPES[kind]) and (kind == "bool" or not isinstance(value, bool))
            for kind in kinds
            if kind in _TYPES
        )
        if not fits:
            expected = " or ".join(_TYPE_NAMES[kind] for kind in kinds if kind in _TYPE_NAMES)
            sep = ": " if str(source).lower().endswith((".yaml", ".yml")) else " = "
            raise ConfigError(
                f"{source}: {key} must be {expected}, got {value!r}", hint=f"write e.g. {key}{sep}{_example(key)}"
            )


def _example(key: str) -> str:
    """The field's default as a TOML value (``"..."`` when it has none)."""
    default = DEFAULTS[key]
    if default is None or default is MISSING:
        return '"..."'
    if isinstance(default, tuple):
        return '["my_rewards.py"]'
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float):  # 1.0e-06, not 1e-06: YAML 1.1 reads a mantissa without a dot as a string
        mantissa, e, exponent = repr(default).partition("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}{e}{exponent}"
    return f'"{default}"' if isinstance(default, (str, Path)) else str(default)


# what YAML 1.1 (PyYAML) reads as a string though it is a float: an exponent without a dot (1e-6, 3E-3)
_YAML_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_floats(values: dict[str, Any]) -> dict[str, Any]:
    """``lr: 1e-6`` as the float it means (YAML 1.1 reads it as the string "1e-6"), in float fields only."""
    floats = {name for name, f in _FLAT.items() if "float" in str(f.type)}
    return {
        key: float(value)
        if key in floats and isinstance(value, str) and _YAML_FLOAT.fullmatch(value.strip())
        else value
        for key, value in values.items()
    }


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The keys of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file, checked against :class:`TrainConfig`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file", hint="check the path")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        import tomllib

        values = _parse(path, tomllib.loads, tomllib.TOMLDecodeError)
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"{path}: reading YAML needs PyYAML", hint="pip install pyyaml, or use a .toml file"
            ) from None
        values = _parse(path, yaml.safe_load, yaml.YAMLError) or {}
        values = _yaml_floats(values) if isinstance(values, dict) else values
    else:
        raise ConfigError(f"{path}: unknown config format {suffix!r}", hint="use a .toml or .yaml file")
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected key = value pairs at the top level", hint="see `e1 train --help`")
    check_keys(values, str(path))
    check_types(values, str(path))
    return values


def _parse(path: Path, parse, error: type[Exception]):
    try:
        return parse(path.read_text())
    except (error, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot parse: {str(err).splitlines()[0]}", hint="fix the syntax") from None


def build_config(file: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """A TrainConfig from an optional file plus overrides; ``None`` overrides mean "not given"."""
    values = load_config_file(file) if file else {}
    given = {key: value for key, value in overrides.items() if value is not None}
    check_keys(given, "options")
    merged = values | given
    for required in ("model", "data"):
        if required not in merged:
            raise ConfigError(f"no {required} given", hint=f"pass --{required} or set {required} in the config file")
    return from_flat(merged)
