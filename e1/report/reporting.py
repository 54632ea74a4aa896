"""Where numbers go besides e1's parquet files: TensorBoard and Weights & Biases.

    names = parse_report_to("tensorboard,wandb")       # the one parser of --report-to
    reporters = open_reporters(names, out, config)       # training: rank 0 only
    reporters.log(row, step)                             # every finite number of a metrics row
    reporters.close()

    report_results(names, out, summary, samples, config)  # e1 eval / e1 sweep: once, at the end

``tensorboard`` writes event files under ``out/tensorboard/`` (``tensorboard --logdir
runs/x/tensorboard``); ``wandb`` starts a run in ``out/wandb/`` whose id derives from the run
directory, so a resumed run (or a rerun of the same eval) continues the same W&B run;
``WANDB_MODE=offline`` logs without a network (``wandb sync`` uploads later). Each needs its
package: ``pip install -e '.[tensorboard]'`` or ``'.[wandb]'``.

An eval's or sweep's results (:func:`report_results`) go out as each reporter's users expect
them: TensorBoard gets every number of every ``summary.parquet`` cell as a scalar
``eval/<dataset>/<mode>/s=<solve>/<metric>`` (a sweep: ``eval/<model>/...``) whose step is the
thinking budget t, so its charts are accuracy-against-budget curves, and the summary and the
first :data:`TABLE_ROWS` samples as markdown tables (its Text tab); W&B gets the cells' numbers
in the run summary (``eval/<cell>/<metric>``) and the summary and samples as ``wandb.Table``.
The invariant: every finite number of every cell reaches every reporter once, under a name
that identifies its cell. The TensorBoard folder is replaced as a whole (atomically), so a
rerun shows the results once, not twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from e1.errors import ConfigError, did_you_mean

REPORT_TO = ("tensorboard", "wandb")
TENSORBOARD, WANDB = "tensorboard", "wandb"
TABLE_ROWS = 1000  # samples in the samples table: the first sample of each problem and cell, in results order
CELL_KEY = ("model", "dataset", "mode", "think_budget", "solve_budget")
SAMPLE_TABLE_COLUMNS = [
    "model",
    "dataset",
    "problem_id",
    "sample_index",
    "mode",
    "think_budget",
    "solve_budget",
    "think_tokens",
    "solve_tokens",
    "forced",
    "correct",
    "extracted_answer",
    "gold",
    "solution_text",
]
TEXT_CLIP = 400  # characters of a text shown in TensorBoard's markdown table


def parse_report_to(text: str | None) -> tuple[str, ...]:
    """``--report-to`` as reporter names, each checked (``none`` or empty: no reporter).

    >>> parse_report_to("tensorboard, wandb"), parse_report_to("none"), parse_report_to(None)
    (('tensorboard', 'wandb'), (), ())
    """
    names = tuple(
        dict.fromkeys(name.strip() for name in str(text or "").split(",") if name.strip() not in ("", "none"))
    )
    for name in names:
        if name not in REPORT_TO:
            raise ConfigError(f"unknown report_to {name!r}", hint=did_you_mean(name, (*REPORT_TO, "none")))
    return names


def check_trackers(names: tuple[str, ...]) -> None:
    """Before any work: each tracker of ``--report-to`` can be used now (its package is installed;
    W&B has a key, or runs offline), else one ConfigError saying how to make it so. A run that
    fails only after its evaluation (W&B asking for a login at the end) would cost the whole run."""
    if TENSORBOARD in names:
        _summary_writer_class()
    if WANDB in names:
        _wandb()
        if not _wandb_ready():
            raise ConfigError(
                "--report-to wandb: no W&B login (no WANDB_API_KEY, no key in ~/.netrc)",
                hint="run `wandb login`, set WANDB_API_KEY, or WANDB_MODE=offline to log without a network",
            )


def _wandb_ready() -> bool:
    """W&B can log: offline or disabled, or a key in WANDB_API_KEY or the netrc file for its host."""
    import netrc
    import os
    from urllib.parse import urlparse

    if os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_DISABLED", "").strip().lower() in ("true", "1"):
        return True
    if os.environ.get("WANDB_API_KEY", "").strip():
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        found = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(found and found[2])


def _summary_writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "--report-to tensorboard needs the tensorboard package", hint="pip install tensorboard (or e1[tensorboard])"
        ) from None
    return SummaryWriter


def _wandb():
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "--report-to wandb needs the wandb package",
            hint="pip install wandb (or e1[wandb]); WANDB_MODE=offline needs no network",
        ) from None
    return wandb


class TensorBoardReporter:
    def __init__(self, out: Path, log_dir: Path | None = None):
        self.writer = _summary_writer_class()(log_dir=str(log_dir or Path(out) / TENSORBOARD))

    def log(self, metrics: dict[str, float], step: int, prefix: str = "train/") -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(f"{prefix}{name}", value, global_step=step)
        self.writer.flush()

    def text(self, tag: str, markdown: str) -> None:
        self.writer.add_text(tag, markdown, global_step=0)

    def close(self) -> None:
        self.writer.close()


class WandbReporter:
    def __init__(self, out: Path, config: dict):
        wandb = _wandb()
        from e1.engine import derive_seed

        out = Path(out)
        (out / WANDB).mkdir(parents=True, exist_ok=True)
        run_id = f"e1-{derive_seed(str(out.resolve())):016x}"  # the same run when resumed
        self.run = wandb.init(project="e1", name=out.name, id=run_id, resume="allow", dir=str(out), config=config)

    def log(self, metrics: dict[str, float], step: int, prefix: str = "train/") -> None:
        self.run.log({f"{prefix}{name}": value for name, value in metrics.items()}, step=step)

    def summary(self, values: dict[str, float]) -> None:
        self.run.summary.update(values)

    def table(self, name: str, frame) -> None:
        plain = frame.reset_index(drop=True).astype(object)
        self.run.log({name: _wandb().Table(dataframe=plain.where(plain.notna(), None))})  # pd.NA: a null cell

    def close(self) -> None:
        self.run.finish()


REPORTERS: dict[str, Callable[..., object]] = {
    TENSORBOARD: lambda out, config: TensorBoardReporter(out),
    WANDB: lambda out, config: WandbReporter(out, config),
}


def numbers(row: dict) -> dict[str, float]:
    """The finite numbers of a row (no booleans, no ``step``): NaN, e.g. a step without validation, is left out."""
    return {
        key: float(value)
        for key, value in row.items()
        if isinstance(value, (int, float))
        and not isinstance(value, bool)
        and key != "step"
        and math.isfinite(float(value))
    }


@dataclass
class Reporters:
    """All configured reporters as one (training: one metrics row per step)."""

    reporters: list = field(default_factory=list)

    def log(self, row: dict, step: int) -> None:
        values = numbers(row)
        for reporter in self.reporters:
            reporter.log(values, step)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()


def open_reporters(names: tuple[str, ...], out: Path, config: dict, rank: int = 0) -> Reporters:
    """A reporter per name (:func:`parse_report_to`); none on ranks other than 0."""
    if rank != 0:
        return Reporters()
    return Reporters([REPORTERS[name](Path(out), config) for name in names])


def cell_name(row: dict) -> str:
    """The name of a summary cell: ``[<model>/]<dataset>/<mode>/s=<solve>`` (its think budget is the step).

    >>> cell_name({"dataset": "aime", "mode": "elastic", "think_budget": 512, "solve_budget": 1024})
    'aime/elastic/s=1024'
    """
    model = f"{row['model']}/" if row.get("model") is not None else ""
    return f"{model}{row['dataset']}/{row['mode']}/s={int(row['solve_budget'])}"


def cell_metrics(summary) -> list[tuple[str, int, dict[str, float]]]:
    """(cell name, think budget, finite numbers) for each row of a summary frame."""
    return [
        (cell_name(row), int(row["think_budget"]), numbers({k: v for k, v in row.items() if k not in CELL_KEY}))
        for row in summary.to_dict(orient="records")
    ]


def samples_table(samples, rows: int = TABLE_ROWS):
    """The first sample of each problem and cell (``sample_index`` 0), at most ``rows`` of them, with
    the columns of :data:`SAMPLE_TABLE_COLUMNS` the frame has."""
    first = samples[samples["sample_index"] == 0] if len(samples) else samples
    return first[[c for c in SAMPLE_TABLE_COLUMNS if c in samples.columns]].head(rows).reset_index(drop=True)


def report_results(names: tuple[str, ...], out: Path, summary, samples, config: dict, prefix: str = "eval/") -> None:
    """An eval's or sweep's results to each reporter in ``names`` (see the module docstring)."""
    out = Path(out)
    if TENSORBOARD in names:
        _tensorboard_results(out, summary, samples, prefix)
    if WANDB in names:
        _wandb_results(out, summary, samples, config, prefix)


def _tensorboard_results(out: Path, summary, samples, prefix: str) -> None:
    from e1.store import atomic_write

    def write(folder: Path) -> None:
        reporter = TensorBoardReporter(out, log_dir=folder)
        try:
            for cell, think, values in cell_metrics(summary):
                reporter.log(values, think, prefix=f"{prefix}{cell}/")
            reporter.text(f"{prefix}summary", markdown_table(summary))
            reporter.text(f"{prefix}samples", markdown_table(samples_table(samples)))
        finally:
            reporter.close()

    _summary_writer_class()  # the package is checked before any folder is touched
    atomic_write(out / TENSORBOARD, write, directory=True)


def _wandb_results(out: Path, summary, samples, config: dict, prefix: str) -> None:
    reporter = WandbReporter(out, config)
    try:
        reporter.summary(
            {
                f"{prefix}{cell}/t={think}/{name}": value
                for cell, think, values in cell_metrics(summary)
                for name, value in values.items()
            }
        )
        reporter.table(f"{prefix}summary", summary)
        reporter.table(f"{prefix}samples", samples_table(samples))
    finally:
        reporter.close()


def markdown_table(frame) -> str:
    """A frame as a markdown table (TensorBoard's text tab renders it); texts clipped to :data:`TEXT_CLIP`."""

    def cell(value) -> str:
        text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        text = text if len(text) <= TEXT_CLIP else text[:TEXT_CLIP] + "…"
        return text.replace("|", "\\|").replace("\n", "<br>")

    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)
