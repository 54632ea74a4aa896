"""Budget sweeps: models × datasets × modes × budgets, each model loaded once → accuracy curves.

    grid = EvalConfig(model="", datasets=("aime",), budgets=budget_grid(think="0,512,1k,2k,3k", solve="1k"),
                      modes=parse_modes("elastic,truncate"), n=4)
    config = SweepConfig(models=("Salesforce/E1-Math-1.5B", "agentica-org/DeepScaleR-1.5B-Preview"),
                         settings=grid, out=Path("runs/sweep"))
    samples, summary, curves = sweep(config)

(:func:`~e1.eval.axes.budget_grid` and :func:`~e1.eval.axes.parse_modes` read the command line's lists.)

Each model's whole grid is one :func:`e1.eval.run.evaluate` call into ``out/models/<slug>/`` (the
eval format, resumable), on an engine loaded at most once — and not at all when that model's
grid is already finished. The sweep then aggregates into ``out/``: ``samples.parquet`` and
``summary.parquet`` with a leading ``model`` column, ``curves.parquet`` (one row per model ×
dataset × mode × budget; see :data:`CURVE_COLUMNS`), ``curves.png``, ``differences.parquet``
(modes paired over problems at each budget: :func:`e1.report.metrics.mode_differences`),
``areas.parquet`` and ``problems.parquet`` (the area under each curve and each problem's
smallest solving budget: :mod:`e1.report.spending`) and ``config.json``.

A sweep grows: more budgets, modes or datasets into an existing ``out`` run the union of its grid
and the new one (:func:`e1.eval.grid.grown`); every computed cell is kept as it is, only the new
cells are drawn, and every file then covers the whole grid. What would change a computed cell
(model, n, sampling, seed, prompt options, a dataset's content) is still refused in one line.

By default one unconstrained trajectory per sample serves every mode and budget
(:mod:`e1.eval.shared`): each cell's samples are still exact draws from that cell, and the
cells are paired. ``independent=True`` draws every cell on its own.

Every mode at a grid point gets the same total: ``truncate`` treats ``Budget(t, s)`` as one
budget ``t + s``, and rows record ``think_budget``/``solve_budget`` as given.

Hosted reasoning APIs take effort levels rather than tokens: ``budget_axis="effort"``
(:func:`effort_grid`) turns each mode ``none`` into ``none:effort=LEVEL`` per level, with one
budget, ``Budget(0, max_tokens)`` (no token budget: the level sets the thinking, ``--max-tokens``
caps the reply). Each row still records the vendor's *measured* thinking tokens, ``curves`` an
``effort`` column (``""`` on a token axis), and ``curves.png`` then draws accuracy against the
measured mean thinking tokens, one line per model × mode through its levels (``areas.parquet``:
the area under that line, its levels as the points).
"""

from __future__ import annotations

import gc
import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from e1 import __version__
from e1.engine import Mode
from e1.errors import ConfigError
from e1.eval.grid import check_grid, grown
from e1.eval.run import RUN_IDENTITY, EvalConfig
from e1.report import NullProgress, check_trackers, parse_report_to
from e1.store import CONFIG, GROUP_KEY, SAMPLES, SUMMARY, check_run_dir, file_name, inside, model_identity

CURVES, PLOT, MODELS_DIR = "curves.parquet", "curves.png", "models"
DECODED_PLOT = "curves_decoded.png"  # x = every decoded token (early-exit's trials too), when a mode has trials
AREAS = "areas.parquet"  # e1.report.spending: AUC per curve
PROBLEMS = "problems.parquet"  # ... and b* per problem
CURVE_KEY = ["model", "dataset", "mode"]
CURVE_COLUMNS = [
    "model",
    "dataset",
    "mode",
    "think_budget",
    "solve_budget",
    "accuracy",
    "pass_at_k",
    "mean_total_tokens",
    "mean_think_tokens",
    "mean_solve_tokens",
    "forced_rate",
    "accuracy_ci_low",
    "accuracy_ci_high",
    "effort",
    "mean_decoded_tokens",
    "overthinking_share",
]
BUDGET_COLUMNS = ("think_budget", "solve_budget")
SWEEP_KEY = ["model", *GROUP_KEY]


def model_slug(model: str) -> str:
    """A folder name for a model id or path: readable, stable, and distinct for distinct ids. The
    readable form (``org--name``; a path without its leading ``./``, ``/`` or ``~/``) is what sweeps
    have always named their folders; :func:`e1.store.file_name` is the gate that makes it a file name.

    >>> model_slug("Salesforce/E1-Math-1.5B")
    'Salesforce--E1-Math-1.5B'
    """
    text = re.sub(r"^(\./|/|~/)+", "", model.strip()).rstrip("/")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-.") or "model"
    if len(slug) > 60 or slug != model.strip().replace("/", "--"):  # shortened or lossy: a hash keeps ids apart
        slug = f"{slug[-48:].lstrip('-.')}-{zlib.crc32(model.encode()):08x}"
    return file_name(slug)


def display_names(models) -> dict[str, str]:
    """Short labels for tables and plots: the paths without the folders that all of them share.

    >>> display_names(["runs/a/step_100", "runs/a/step_200"])
    {'runs/a/step_100': 'step_100', 'runs/a/step_200': 'step_200'}
    >>> display_names(["Salesforce/E1-Math-1.5B", "agentica-org/DeepScaleR-1.5B-Preview"])["Salesforce/E1-Math-1.5B"]
    'Salesforce/E1-Math-1.5B'
    """
    parts = [[p for p in m.rstrip("/").split("/") if p not in ("", ".")] or [m] for m in models]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    names = {m: "/".join(p[shared:]) for m, p in zip(models, parts)}
    return names if len(set(names.values())) == len(names) else {m: m for m in models}


def _check_distinct(models) -> None:
    """Refuse one model given twice, however spelled (``T``, ``T/``, ``./T``, a copy of ``T``): a
    local folder is what :func:`e1.store.run_identity.model_identity` says it is; a hub id is as typed."""
    seen: dict[str, str] = {}
    for model in models:
        key = model_identity(model) if Path(model).expanduser().is_dir() else model.strip().rstrip("/")
        if key in seen:
            which = model if seen[key] == model else f"{seen[key]} and {model} are one model"
            raise ConfigError(f"the same --model is given twice ({which})", hint="give each model once")
        seen[key] = model


@dataclass(frozen=True)
class SweepConfig:
    """``models`` × the grid of ``settings``: an :class:`EvalConfig` whose budgets and modes span
    the grid and whose other settings (datasets, n, sampling, markers, code tests...) apply to
    every model; its ``model`` and ``out`` are replaced by each model and its run directory.
    ``independent``: draw every cell on its own instead of sharing prefixes (:mod:`e1.eval.shared`)."""

    models: tuple[str, ...]
    settings: EvalConfig
    out: Path = Path("runs/sweep")
    independent: bool = False

    def __post_init__(self):
        if not self.models:
            raise ConfigError("no model given", hint="pass --model once per model")
        _check_distinct(self.models)
        if not self.settings.budgets:
            raise ConfigError("no budget given", hint="pass --think/--solve lists or --budgets T+S pairs")
        if not self.settings.modes:
            raise ConfigError("no mode given", hint="pass --modes elastic,truncate,...")
        slugs = [model_slug(m) for m in self.models]
        if len(set(slugs)) < len(slugs):
            raise ConfigError("two --model values map to the same folder name", hint="rename one of the folders")

    @property
    def modes(self) -> tuple[Mode, ...]:
        return self.settings.modes

    def run_dir(self, model: str) -> Path:
        return inside(Path(self.out), MODELS_DIR, model_slug(model))

    def eval_config(self, model: str) -> EvalConfig:
        """The eval of one model: its whole grid, into its own run directory."""
        return replace(
            self.settings, model=model, out=self.run_dir(model), share_prefixes=self.shares, report_to="none"
        )  # the sweep reports once, every model together

    @property
    def shares(self) -> bool:
        """Whether one trajectory serves every cell: not with --independent, nor when each cell's
        prompt states its own budget (--prompt-budget), nor behind an API (a server cannot follow
        another request's tokens)."""
        return not self.independent and self.settings.prompt.budget is None and self.settings.api is None

    def to_json(self) -> dict:
        settings = replace(self.settings, share_prefixes=self.shares).to_json()
        data = {key: value for key, value in settings.items() if key not in ("model", "model_identity", "out")}
        data["models"], data["out"] = list(self.models), str(self.out)
        data["runs"] = {m: str(Path(MODELS_DIR) / model_slug(m)) for m in self.models}
        return data


def _preflight(config: SweepConfig, models: bool) -> None:
    """Before the first model loads: --out is writable, and (``models``: they are loaded here) every
    --model exists and fits the grid's budgets, so a typo in the last model fails in seconds."""
    from e1.store import check_context, check_model_path, check_writable

    check_writable(config.out)
    check_trackers(parse_report_to(config.settings.report_to))  # a tracker that cannot log fails now, not at the end
    for model in config.models if models and config.settings.api is None else ():  # served: checked at load
        check_model_path(model)
        check_context(
            model, config.settings.budgets, [m for m in config.modes if m.bounded], config.settings.engine.max_model_len
        )


def sweep(config: SweepConfig, progress=None, load_engine: Callable[[str], object] | None = None, group=None):
    """Run (or resume) a sweep; returns (samples, summary, curves) DataFrames, also written to ``config.out``
    (with ``differences.parquet``, :func:`e1.report.metrics.mode_differences` of the samples).

    ``load_engine(model)`` builds an engine (default: :func:`e1.eval.run.load_engine_for` on that
    model's eval config: its backend, dtype, device, markers); it is called at most once per
    model, and only for models with samples still to generate. Holds ``out`` for the duration;
    under torchrun every rank calls this, and only rank 0 writes and gets the frames (the
    others get ``(None, None, None)``).
    """
    from e1.eval.distributed import current_group, group_lock
    from e1.eval.run import eval_tp

    group = group or current_group(eval_tp(config.settings), config.settings.engine.device)
    out = Path(config.out)
    _preflight(config, models=load_engine is None)
    _check_sweep_dir(out, config)  # refused before waiting for the folder
    with group_lock(out, "e1 sweep", group):  # grown from what the folder holds once it is ours
        return _sweep(_check_sweep_dir(out, config), progress or NullProgress(), load_engine, group)


def _sweep(config: SweepConfig, progress, load_engine, group):
    """Every model's eval, then (rank 0) the sweep's files over all of them."""
    from e1.eval.run import upgrade_run
    from e1.store import SampleStore, write_json

    out, main = Path(config.out), group.ranks.main
    if main:
        if (out / CONFIG).exists():  # a sweep written before: its old labels first, then today's config
            upgrade_run(out, SampleStore(out, legacy=Mode.legacy))
        write_json({**config.to_json(), "kind": "sweep", "e1_version": __version__}, out / CONFIG)
    frames = _evaluate_models(config, progress, load_engine, group)
    if not main:
        return None, None, None
    return _write_results(config, frames)


def _evaluate_models(config: SweepConfig, progress, load_engine, group) -> list:
    """Each model's whole grid as one eval into its run directory, its engine loaded at most once
    (not at all when the grid is finished); rank 0's samples of each, with a leading model column."""
    from e1.eval.run import evaluate

    load_engine = load_engine or (lambda model: _load_engine(model, config, group.ranks))
    names = display_names(config.models)
    frames = []
    for model in config.models:
        engine = _LazyEngine(lambda model=model: load_engine(model))
        try:
            samples, _ = evaluate(
                config.eval_config(model),
                engine=engine,
                progress=_Labelled(progress, names[model]),
                group=group,
                grow=True,
            )
        finally:
            engine.release()
        if group.ranks.main:
            frames.append(samples.assign(model=model)[["model", *samples.columns]])
    return frames


def _write_results(config: SweepConfig, frames: list):
    """The sweep's samples, summary, curves, differences, areas, problems and plots in ``out``,
    reported to the trackers; returns (samples, summary, curves)."""
    import pandas as pd

    from e1.report import (
        DIFFERENCES,
        curve_areas,
        mode_differences,
        parse_report_to,
        plot_curves,
        report_results,
        solving_budgets,
        summarize,
    )
    from e1.store import write_parquet

    out, names = Path(config.out), display_names(config.models)
    samples = _in_config_order(pd.concat(frames, ignore_index=True), config)
    summary = _in_config_order(summarize(samples, by=SWEEP_KEY, ks=config.settings.ks), config)
    curves = curves_frame(summary)
    write_parquet(samples, out / SAMPLES)
    write_parquet(summary, out / SUMMARY)
    write_parquet(curves, out / CURVES)
    write_parquet(mode_differences(samples, by=SWEEP_KEY), out / DIFFERENCES)
    effort_axis = any(mode.effort for mode in config.modes)  # measured thinking tokens on x: no budgets to place
    areas = (
        curve_areas(effort_lines(samples), by=CURVE_KEY, cells=(*BUDGET_COLUMNS, "effort"))
        if effort_axis
        else (curve_areas(samples, by=CURVE_KEY))
    )
    write_parquet(areas, out / AREAS)
    write_parquet(solving_budgets(samples, by=CURVE_KEY), out / PROBLEMS)
    plot_curves(curves, out / PLOT, names=names, x="think" if effort_axis else "output")
    if curves["overthinking_share"].notna().any() or curves["mode"].map(lambda text: Mode.parse(text).trials).any():
        plot_curves(curves, out / DECODED_PLOT, names=names, x="decoded")
    report_results(
        parse_report_to(config.settings.report_to),
        out,
        summary.assign(model=summary["model"].map(names)),
        samples.assign(model=samples["model"].map(names)),
        config.to_json(),
    )
    return samples, summary, curves


def effort_lines(samples):
    """Samples of an effort axis as one curve per mode: ``mode`` without its level, ``effort`` the level."""
    modes = {mode: Mode.parse(mode) for mode in samples["mode"].unique()}
    return samples.assign(
        effort=samples["mode"].map(lambda mode: modes[mode].effort),
        mode=samples["mode"].map(lambda mode: str(modes[mode].replace(effort=""))),
    )


def curves_frame(summary):
    """One row per model × dataset × mode × budget: accuracy (avg@n, a fraction) against tokens used,
    and the mode's effort level (``""``: a token budget)."""
    efforts = summary["mode"].map(lambda mode: Mode.parse(mode).effort)
    return summary.assign(effort=efforts)[CURVE_COLUMNS].reset_index(drop=True)


def _check_sweep_dir(out: Path, config: SweepConfig) -> SweepConfig:
    """Refuse to mix samples drawn with other settings, in the sweep's folder and in each model's (all of it
    before the first write: a refused sweep leaves every file in --out as it was); returns ``config`` grown
    to hold the folder's grid too (:func:`e1.eval.grid.grown`)."""
    from e1.eval.run import check_eval_dir, dataset_fingerprints

    previous = check_run_dir(out, config.to_json(), RUN_IDENTITY, kind="sweep")
    check_grid(out, previous, config.to_json(), command="e1 sweep", grow=True)
    config = replace(config, settings=grown(out, previous, config.settings))
    fingerprints = dataset_fingerprints(config.settings)
    for model in config.models:  # each model's folder too, before the first write into any of them
        check_eval_dir(config.eval_config(model), model=False, grow=True, fingerprints=fingerprints)
    return config


def _in_config_order(frame, config: SweepConfig):
    """Rows ordered as the user listed models and modes (datasets as evaluated, budgets ascending)."""
    model_rank = {m: i for i, m in enumerate(config.models)}
    mode_rank = {str(m): i for i, m in enumerate(config.modes)}
    dataset_rank = {d: i for i, d in enumerate(dict.fromkeys(frame["dataset"]))}
    ranks = frame.assign(
        _model=frame["model"].map(model_rank),
        _dataset=frame["dataset"].map(dataset_rank),
        _mode=frame["mode"].map(mode_rank),
        _total=frame["think_budget"] + frame["solve_budget"],
    )
    keys = ["_model", "_dataset", "_mode", "_total", "think_budget"]
    keys += [c for c in ("problem_id", "sample_index") if c in frame.columns]
    return (
        ranks.sort_values(keys, kind="stable")
        .drop(columns=["_model", "_dataset", "_mode", "_total"])
        .reset_index(drop=True)
    )


def _load_engine(model: str, config: SweepConfig, ranks):
    from e1.eval.run import load_engine_for

    return load_engine_for(config.eval_config(model), ranks)


class _LazyEngine:
    """Loads the engine on first use, so a model whose grid is already finished is never loaded."""

    def __init__(self, load: Callable[[], object]):
        self._load, self._engine = load, None

    def __getattr__(self, name: str):
        if self._engine is None:
            self._engine = self._load()
        return getattr(self._engine, name)

    def release(self) -> None:
        """Drop the model before the next one loads (GPU memory holds one model at a time)."""
        if self._engine is None:
            return
        close = getattr(self._engine, "close", None)  # vLLM holds its GPU memory until shut down
        if close is not None:
            close()
        self._engine = None
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


@dataclass(frozen=True)
class _Labelled:
    """A progress reporter whose task descriptions name the model being evaluated."""

    progress: object
    label: str

    def task(self, description: str, total: int):
        return self.progress.task(f"{self.label}: {description}", total)

    def stage(self, description: str):
        return self.progress.stage(f"{self.label}: {description}")
