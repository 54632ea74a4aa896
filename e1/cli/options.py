"""Options the subcommands share, each declared once.

A command's options come from the settings the library declares (:mod:`e1.settings`):
:func:`option_class` turns the fields of settings dataclasses into a dataclass of typer options
(:class:`e1.cli.run_options.RunOptions`: every option that `e1 eval` and `e1 sweep` both take; `e1 train`'s from
TrainConfig, `e1 serve`'s from ServeConfig), and :func:`with_options` shows them to typer as
parameters of a command that takes one ``options: RunOptions`` argument:

    @with_options
    def eval_command(model: ModelOpt, options: RunOptions, out: OutOpt = Path("runs/eval")) -> None:
        config = options.eval_config(model=model, budgets=..., modes=..., n=1, out=out)

Values stay plain strings/ints here; the library's frozen configs validate them and raise
:class:`e1.errors.E1Error` (one red line, never a traceback).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, field, fields, is_dataclass, make_dataclass, replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from e1.settings import (  # noqa: F401
    API,
    BUDGETS,
    CODE,
    DATA,
    INCLUDE_HELP,
    MODEL,
    OUTPUT,
    SAMPLING,
    SCALE,
    SERVER,
    Setting,
    declared,
    flag_of,
)


def nonempty_path(flag: str) -> Callable[[object], Path]:
    """Typer's parser for a path option: ``--out ''`` would otherwise be ``Path('.')``, the current directory.

    OutOpt = Annotated[Path, typer.Option("--out", parser=nonempty_path("--out"))]
    """
    from e1.store import check_out

    return lambda value: check_out(value, flag)


ModelOpt = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="Model folder or Hugging Face hub id.", show_default=False, rich_help_panel=MODEL
    ),
]
ThinkOpt = Annotated[
    str,
    typer.Option(
        "--think",
        "-t",
        rich_help_panel=BUDGETS,
        help="Thinking budget t in tokens: 512, 1k (=1024), 1.5k, 2K; 0 = no thinking.",
    ),
]
SolveOpt = Annotated[
    str, typer.Option("--solve", "-s", rich_help_panel=BUDGETS, help="Solution budget s in tokens (>= 1): 512, 1k, ...")
]
OutOpt = Annotated[
    Path,
    typer.Option(
        "--out",
        "-o",
        help="Run directory; rerunning into it resumes.",
        rich_help_panel=OUTPUT,
        parser=nonempty_path("--out"),
    ),
]
RunOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        show_default="a new folder per run: runs/<command>/MODEL-DATASETS-TIME",
        rich_help_panel=OUTPUT,
        help="Run directory; rerunning into it resumes.",
        parser=nonempty_path("--out"),
    ),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Where prepared datasets live.",
        show_default="$E1_DATA_DIR or ~/.cache/e1/data",
        rich_help_panel=DATA,
        parser=nonempty_path("--data-dir"),
    ),
]


def mode_help(lead: str) -> str:
    """The help of a mode option: the registry's names, and where their options are (``e1 help modes``)."""
    from e1.cli.completion import mode_names
    from e1.settings import mode_help as help_text

    return help_text(lead, mode_names())


def option_class(name: str, *sources: type, defaults: dict | None = None) -> type:
    """A frozen dataclass of typer options, one per setting of ``sources`` (settings dataclasses,
    :mod:`e1.settings`): the flag, help, panel, completion and default all come from the setting's
    one declaration, and a flat spec field (TrainConfig's ``engine``) gives its settings in its
    place, narrowed as the field says. ``defaults`` overrides a default (``url``: no API unless given).
    :func:`with_options` shows its fields to typer as a command's own parameters."""
    overrides, specs = defaults or {}, []
    for field_name, kind, default in (option for source in sources for option in _options(source, {}, {})):
        if field_name in overrides:
            default = overrides[field_name]
            kind = Annotated[(typing.get_args(kind)[0] | None, *kind.__metadata__)] if default is None else kind
        specs.append((field_name, kind, field() if default is MISSING else field(default=default)))
    # eq and repr are never used: fewer generated methods keep --help and completion quick
    options = make_dataclass(name, specs, frozen=True, kw_only=True, eq=False, repr=False)
    options.__derived__ = frozenset(spec[0] for spec in specs)  # these fields restate no declaration (tests)
    return options


def _options(source: type, base: dict, narrow: dict) -> list[tuple[str, object, object]]:
    """(name, Annotated type, CLI default) of each setting of ``source``, flat specs expanded."""
    hints, options = typing.get_type_hints(source), []
    for f in fields(source):
        if f.metadata.get("spec"):
            default = f.default if f.default is not MISSING else None  # an instance: its values are the defaults
            own = {g.name: getattr(default, g.name) for g in fields(hints[f.name])} if default is not None else {}
            options += [
                option
                for option in _options(hints[f.name], own, f.metadata.get("narrow", {}))
                if option[0] not in f.metadata.get("skip", ())
            ]
        elif "setting" in f.metadata:
            how = replace(f.metadata["setting"], **narrow.get(f.name, {}))
            default = base.get(f.name, f.default)
            kind = how.cli_type or hints[f.name]
            if f.default_factory is not MISSING or _is_tuple(kind) and default is not MISSING:
                kind, default = Optional[_listed(kind)], None  # noqa: UP045 (a runtime type typer reads)  a default made when built (workers), or a list
            kind = _listed(kind)  # a required list stays required (--datasets)
            options.append((f.name, Annotated[_optional(kind), _typer_option(f.name, how)], default))
    return options


def _typer_option(name: str, how: Setting):
    from e1.cli import completion

    decls = [how.switch or flag_of(name, how), *([how.short] if how.short else [])]
    extra = {"autocompletion": getattr(completion, f"complete_{how.complete}")} if how.complete else {}
    if how.path:
        extra["parser"] = nonempty_path(decls[0])
    return typer.Option(
        *decls, help=how.help, rich_help_panel=how.panel, show_default=how.shown, envvar=how.envvar, **extra
    )


def _is_tuple(kind) -> bool:
    return typing.get_origin(kind) is tuple


def _listed(kind):
    """``tuple[str, ...]`` as typer's ``list[str]``."""
    return list[typing.get_args(kind)[0]] if _is_tuple(kind) else kind


def _optional(kind):
    """``X | None`` as ``Optional[X]`` (what typer reads)."""
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) and type(None) in args:
        return Optional[next(arg for arg in args if arg is not type(None))]  # noqa: UP045 (typer reads it)
    return kind


def _parameters(function: Callable, groups: dict[str, type]) -> list[inspect.Parameter]:
    """``function``'s parameters as keyword-only ones (so a required option may follow a defaulted
    one), annotations resolved, each options-dataclass parameter (``groups``) replaced by its fields."""
    hints = typing.get_type_hints(function, include_extras=True)
    parameters = []
    for parameter in inspect.signature(function).parameters.values():
        group = groups.get(parameter.name)
        if group is None:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[parameter.name]))
            continue
        option_hints = typing.get_type_hints(group, include_extras=True)
        parameters += [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=option_hints[f.name],
                default=inspect.Parameter.empty if f.default is MISSING else f.default,
            )
            for f in fields(group)
        ]
    return parameters


def with_options(command: Callable) -> Callable:
    """Let typer see the fields of ``command``'s options-dataclass parameters (such as ``options:
    RunOptions``) as options of its own, so a set of options is declared once, on a dataclass.

    Typer reads a command's ``inspect.signature``, which honours ``__signature__``: the wrapper
    declares the expanded parameters and gathers each dataclass's fields back into one instance.
    """
    groups = {name: hint for name, hint in typing.get_type_hints(command).items() if is_dataclass(hint)}

    @functools.wraps(command, assigned=("__module__", "__name__", "__qualname__", "__doc__"), updated=())
    def run(**values):
        for slot, group in groups.items():
            values[slot] = group(**{f.name: values.pop(f.name) for f in fields(group)})
        return command(**values)

    run.__signature__ = inspect.Signature(_parameters(command, groups))
    return run
