"""The runs under the folders given to `e1 view`: what each is and which of its files to read.

A folder is a run when it holds ``config.json`` beside results: ``curves.parquet`` (a sweep),
``samples.parquet`` or ``samples/part-*.parquet`` (an eval run, finished or not), or
``metrics.parquet`` (a training run). A demo folder is a folder of such runs, so folders are
searched a few levels down; a sweep's per-model eval runs (``models/``) repeat its own samples
and are skipped, as are checkpoints and datasets.

    runs = find_runs([Path("runs/demo")])   # sft, e1, cosine (train); eval/base-none, ...; curves (sweep)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from e1.errors import ConfigError
from e1.store import CONFIG, SAMPLES, SUMMARY, SampleStore

CURVES, METRICS, PARTS = "curves.parquet", "metrics.parquet", "samples"
_SKIP = {"checkpoints", "data", "tensorboard", "wandb", PARTS}
MAX_DEPTH = 4


@dataclass(frozen=True)
class Run:
    """One run directory as the viewer sees it; ``name`` is its path as typed (unique among the runs)."""

    name: str
    path: Path
    root: Path | None = None  # the folder given to e1 view it was found under (None: ``path`` itself)

    @property
    def store(self) -> SampleStore:
        """The run's samples, read as every reader of a run reads them (duplicates dropped)."""
        from e1.engine import Mode

        return SampleStore(self.path, legacy=Mode.legacy)

    @property
    def kind(self) -> str:
        if (self.path / CURVES).exists():
            return "sweep"
        return "train" if (self.path / METRICS).exists() else "eval"

    @property
    def sample_files(self) -> list[Path]:
        """``samples.parquet`` and the parts of an unfinished run (a resumed run may have both)."""
        return self.store.files()

    @property
    def summary_file(self) -> Path | None:
        return self.path / SUMMARY if (self.path / SUMMARY).is_file() else None

    @property
    def metrics_file(self) -> Path | None:
        return self.path / METRICS if (self.path / METRICS).is_file() else None

    def config(self) -> dict:
        try:
            config = json.loads((self.path / CONFIG).read_text())
        except (OSError, ValueError):
            return {}
        return config if isinstance(config, dict) else {}

    def model(self) -> str:
        """The model an eval or training run used ('' if its config does not say)."""
        return str(self.config().get("model", ""))


def is_run(path: Path) -> bool:
    if not (path / CONFIG).is_file():
        return False
    results = (CURVES, METRICS, SAMPLES, SUMMARY)
    return any((path / name).is_file() for name in results) or any((path / PARTS).glob("part-*.parquet"))


def find_runs(paths: list[Path]) -> list[Run]:
    """Every run in or under ``paths``, in the order given (a folder's runs sorted by path)."""
    runs: dict[Path, Run] = {}
    for given in paths:
        root = Path(given).expanduser()
        if not root.is_dir():
            raise ConfigError(
                f"{given}: no such directory", hint="pass run directories written by e1 eval, sweep, train or demo"
            )
        found = [Run(_name(given, folder.relative_to(root)), folder, root) for folder in _walk(root, 0)]
        if not found:
            raise ConfigError(
                f"{given}: no e1 run in it (no config.json beside samples, curves or metrics)",
                hint="pass a directory written by e1 eval, sweep, train or demo",
            )
        for run in found:
            runs.setdefault(run.path.resolve(), run)
    return list(runs.values())


def _walk(folder: Path, depth: int):
    if is_run(folder):
        yield folder
    if depth >= MAX_DEPTH or (folder / CURVES).is_file():  # a sweep's models/ repeat its samples
        return
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if child.name not in _SKIP and not child.name.startswith("."):
            yield from _walk(child, depth + 1)


def _name(given: Path, relative: Path) -> str:
    base = str(given).rstrip("/") or "/"
    return base if str(relative) == "." else f"{base}/{relative.as_posix()}"
