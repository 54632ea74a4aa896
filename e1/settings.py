"""Each setting is declared once: a dataclass field whose metadata says how a user gives it.

    @dataclass(frozen=True)
    class Sampling:
        top_k: int = setting(0, "Keep only the k most likely tokens (0 = off).", SAMPLING,
                             number=Number(int, min=0, hint="use 0 to switch it off"))

From that one field come the command-line option (:func:`e1.cli.options.option_class` builds typer's
``--top-k`` from it: flag, help, panel, completion, default), the key of ``config.json`` and of a
config file (the field's name; a spec field marked ``flat`` records its settings beside its owner's:
:func:`record`, :func:`flat_fields`), ``e1 serve``'s config (it holds an EngineSpec) and the range
check (:func:`check_settings`, with :class:`e1.numeric.Number`). TRL's ``TrlParser`` over dataclass
fields is the model. No typer here: the command line reads the metadata lazily.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Demo:
    ...     steps: int = setting(10, "Steps.", "Run", number=Number(int, min=1))
    ...     def __post_init__(self): check_settings(self)
    >>> Demo(steps=0)
    Traceback (most recent call last):
    e1.errors.ConfigError: --steps must be >= 1, got 0
    >>> flag_of("test_time_limit_s", Setting("Seconds per test.", "Code", flag="--test-time-limit"))
    '--test-time-limit'
"""

from __future__ import annotations

from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any

from e1.numeric import Number, check_numbers

# The panels options are grouped in, in the order --help shows them (every option names one).
BUDGETS = "Budgets & modes"
MODEL = "Model & backend"
API = "Models behind an API"
DATA = "Data & prompts"
SAMPLING = "Sampling"
CODE = "Code tests"
OUTPUT = "Output"
SCALE = "Scale"
RUN = "Training run"
GRPO = "GRPO"
OPTIMIZER = "Optimizer"
SERVER = "Server"

INCLUDE_HELP = (
    "Your own code to import first: a .py file or a folder (a package, or its .py files) that registers "
    "rewards (@register_reward), datasets, prompt styles or modes; repeat for several."
)


def mode_help(lead: str, names) -> str:
    """The help of a mode option: the registry's ``names``, and where their options are (``e1 help modes``)."""
    return (
        f"{lead}, written name[:key=value]...: {' | '.join(names)}; e.g. elastic:exit=qwen:grace=32. "
        "Every mode and its options: e1 help modes."
    )


@dataclass(frozen=True)
class Setting:
    """How a user gives one field. ``flag``: the option (default ``--name-with-dashes``); ``shown``:
    what --help says of the default (True: the value, False: nothing, text: a default that is no
    value); ``complete``: the name of a completion function in :mod:`e1.cli.completion`; ``path``: a
    path the command line refuses empty; ``cli_type``: what the command line reads when it differs
    from the field's type (``"1k"`` for an ``int | str``); ``switch``: a bool's ``--x/--no-x`` form."""

    help: str
    panel: str
    flag: str | None = None
    short: str | None = None
    number: Number | None = None
    shown: str | bool = True
    complete: str | None = None
    envvar: str | None = None
    path: bool = False
    cli_type: Any = None
    switch: str | None = None


def setting(default: Any = MISSING, help: str = "", panel: str = "", *, factory: Any = MISSING, **how) -> Any:
    """A dataclass field declared as a setting (:class:`Setting` takes ``how``)."""
    return field(default=default, default_factory=factory, metadata={"setting": Setting(help, panel, **how)})


def like(cls: type, name: str, default: Any = MISSING) -> Any:
    """A field that is ``cls``'s setting ``name`` under another key (TrainConfig's ``system_prompt``
    is PromptOptions' ``system``: its flag, help and bounds), with that setting's default unless given."""
    source, how = declared(cls)[name]
    return field(default=source.default if default is MISSING else default, metadata={"setting": how})


def spec(
    default: Any = MISSING,
    *,
    factory: Any = MISSING,
    flat: bool = False,
    narrow: dict[str, dict] | None = None,
    skip: tuple[str, ...] = (),
) -> Any:
    """A field holding a settings dataclass; ``flat``: its settings are recorded beside its owner's
    (``config.json`` and config files say ``"dtype"``, not ``"engine": {"dtype": ...}``); ``narrow``:
    what its settings mean in this owner (``{"dtype": {"help": ...}}``: :class:`Setting` fields);
    ``skip``: its settings this owner does not take (a server has no ``device``)."""
    return field(
        default=default, default_factory=factory, metadata={"spec": flat, "narrow": narrow or {}, "skip": skip}
    )


def declared(cls: type) -> dict[str, tuple[Field, Setting]]:
    """``cls``'s fields that are settings, in order, with their declarations."""
    return {f.name: (f, f.metadata["setting"]) for f in fields(cls) if "setting" in f.metadata}


def flag_of(name: str, how: Setting) -> str:
    return how.flag or "--" + name.replace("_", "-")


def default_of(f: Field) -> Any:
    """A field's default (MISSING: none)."""
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def numbers(cls: type) -> dict[str, Number]:
    """What each numeric setting of ``cls`` may hold (the :mod:`e1.numeric` table of old, derived)."""
    return {name: how.number for name, (_, how) in declared(cls).items() if how.number is not None}


def check_settings(config, by_flag: bool = True) -> None:
    """Check ``config``'s numeric settings; errors name the flag (``--top-p``), else the config key."""
    table = numbers(type(config))
    names = {name: flag_of(name, how) for name, (_, how) in declared(type(config)).items()} if by_flag else None
    check_numbers(config, table, names)


def flat_specs(cls: type) -> dict[str, type]:
    """The fields of ``cls`` whose settings are recorded flat, and their dataclasses."""
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if f.metadata.get("spec")}


def flat_fields(cls: type) -> dict[str, Field]:
    """The keys ``cls`` is recorded under: its own fields, each flat spec's fields in its place."""
    specs = flat_specs(cls)
    flat: dict[str, Field] = {}
    for f in fields(cls):
        flat |= {g.name: g for g in fields(specs[f.name])} if f.name in specs else {f.name: f}
    return flat


def record(config) -> dict[str, Any]:
    """``config`` as ``config.json`` holds it: its fields, a flat spec's settings in its place."""
    data = asdict(config)
    for name in flat_specs(type(config)):
        data |= data.pop(name)
    return data


def unflatten(cls: type, values: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``cls`` for flat ``values`` (a config file's, the options'): each flat
    spec is built from its keys over ``defaults[spec]`` (an instance), else its own defaults."""
    from dataclasses import replace

    kwargs = dict(values)
    for name, kind in flat_specs(cls).items():
        mine = {key: kwargs.pop(key) for key in declared(kind) if key in kwargs}
        base = (defaults or {}).get(name)
        kwargs[name] = replace(base, **mine) if base is not None else kind(**mine)
    return kwargs
