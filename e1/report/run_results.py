"""A finished e1 eval or sweep directory as the exporters (:mod:`e1.report.export`) read it.

    run = load_run(Path("runs/sweep"))      # config, and one Cell per model × dataset × mode × budget
    for cell in run.of(run.models[0]):
        cell.task, cell.summary["accuracy"], len(cell.samples)

A cell's *task* name is ``<dataset>_<mode>_t<t>_s<s>`` (:func:`task_name`: distinct cells get
distinct names, safe in the file names lm-eval and lighteval parse).
"""

from __future__ import annotations

import hashlib
import json
import numbers
import re
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from e1.engine import Mode
from e1.errors import ConfigError
from e1.store import CONFIG, SAMPLES, SUMMARY, SampleStore, read_parquet

SAMPLE_FIELDS = [
    "dataset",
    "problem_id",
    "sample_index",
    "mode",
    "think_budget",
    "solve_budget",
    "think_text",
    "solution_text",
    "extracted_answer",
    "gold",
    "correct",
    "forced",
    "think_tokens",
    "solve_tokens",
    "prompt",
    "think_end",  # how thinking ended (older files: absent): output_text, the exports' per-sample record
]


@dataclass(frozen=True)
class Cell:
    """One model's results on one cell: its summary row and its samples (sorted by problem, then sample)."""

    model: str
    dataset: str
    mode: str
    think: int
    solve: int
    summary: dict
    samples: object  # DataFrame

    @property
    def task(self) -> str:
        return task_name(self.dataset, self.mode, self.think, self.solve)

    def problems(self):
        """(doc_id, problem_id, the problem's samples) in the run's order."""
        for doc_id, (problem_id, rows) in enumerate(self.samples.groupby("problem_id", sort=False)):
            yield doc_id, str(problem_id), rows


@dataclass(frozen=True)
class RunResults:
    """A run directory as the exporters read it: its config and one :class:`Cell` per model and cell."""

    path: Path
    config: dict
    cells: tuple[Cell, ...]
    date: str  # when the run's results were written (summary.parquet's time), ISO 8601 in UTC

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(cell.model for cell in self.cells))

    def of(self, model: str) -> list[Cell]:
        return [cell for cell in self.cells if cell.model == model]

    @property
    def date_id(self) -> str:
        """The date as lm-eval and lighteval put it in file names (no ':' and no '_')."""
        return self.date.replace(":", "-")

    def generation_kwargs(self, cell: Cell) -> dict:
        sampling = self.config.get("sampling") or {}
        return {
            "temperature": sampling.get("temperature"),
            "top_p": sampling.get("top_p"),
            "top_k": sampling.get("top_k"),
            "do_sample": bool(sampling.get("temperature")),
            "max_gen_toks": self.max_new_tokens(cell),
            "think_budget": cell.think,
            "solve_budget": cell.solve,
            "mode": cell.mode,
            "seed": sampling.get("seed"),
        }

    def max_new_tokens(self, cell: Cell) -> int:
        """The most tokens a sample of ``cell`` may write: its mode's worst case at the cell's budget
        (``t + s`` and what the mode adds: a grace window, thinking past t; the forced marker ids are
        the tokenizer's and not counted), or the sampling's ``max_tokens`` for a mode with no budget."""
        from e1.budget import Budget
        from e1.engine import Markers, Mode

        no_ids = Markers("", "", (), (), frozenset(), 0, (), ())
        worst = Mode.parse(cell.mode).worst_case(Budget(cell.think, cell.solve), no_ids)
        return int(worst) if worst is not None else int((self.config.get("sampling") or {}).get("max_tokens") or 0)

    def source(self, dataset: str) -> str:
        """Where the run's ``dataset`` came from: ``hub <id>`` or a mirror of it, ``file <path>`` for a
        local file (given as such, or prepared under a name with ``e1 data prepare --from``), or
        ``unknown`` when its prepared copy is gone or predates e1 recording it."""
        from e1.data import (
            DATA_SUFFIXES,
            default_data_dir,
            prepared_path,
            prepared_source,
        )

        specs = [str(s) for s in self.config.get("datasets") or [self.config.get("data")] if s]
        for spec in specs:
            given = Path(spec).expanduser()
            if given.suffix in DATA_SUFFIXES and given.stem == dataset:
                return f"file {given.absolute()}"
        data_dir = self.config.get("data_dir")
        path = prepared_path(dataset, Path(str(data_dir)) if data_dir else default_data_dir())
        recorded = prepared_source(path) if path.is_file() else {}
        return str(recorded.get("source") or "unknown")


def task_name(dataset: str, mode: str, think: int, solve: int) -> str:
    """A cell's task name, safe in file names (lm-eval's ``samples_<task>_<date>``: no '/', ':' or '|');
    a mode whose text had to change gets a checksum of it, so distinct cells never share a name.

    >>> task_name("aime", "elastic", 1024, 1024)
    'aime_elastic_t1024_s1024'
    >>> task_name("aime", "elastic:exit=qwen", 512, 1024)
    'aime_elastic-exit=qwen-4a8da02f_t512_s1024'
    """

    def safe(text: str) -> str:
        cleaned = re.sub(r"[^A-Za-z0-9.=+-]+", "-", text).strip("-") or "x"
        return cleaned if cleaned == text else f"{cleaned}-{zlib.crc32(text.encode()):08x}"

    return f"{safe(dataset)}_{safe(mode)}_t{int(think)}_s{int(solve)}"


def model_folder(model: str) -> str:
    """A model id as a visible folder name, as lm-eval sanitizes it (``org/name`` -> ``org__name``),
    after dropping a local path's empty, ``.`` and ``..`` parts and leading dots (``./tiny`` ->
    ``tiny``, never the hidden ``.__tiny``); a hub id is sanitized exactly as lm-eval does.

    >>> model_folder("Salesforce/E1-Math-1.5B"), model_folder("./tiny"), model_folder("/abs/.ckpt/step_2")
    ('Salesforce__E1-Math-1.5B', 'tiny', 'abs__ckpt__step_2')
    """
    parts = [part.lstrip(".") for part in str(model).split("/")]
    kept = "/".join(part for part in parts if part) or "model"
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", kept)


def load_run(path: Path) -> RunResults:
    """The results of an e1 eval or sweep directory; anything else is refused in one line."""
    path = Path(path)
    hint = "pass a directory written by e1 eval or e1 sweep: it holds config.json, samples.parquet and summary.parquet"
    if not path.is_dir():
        raise ConfigError(f"{path}: no such run directory", hint=hint)
    missing = [name for name in (CONFIG, SAMPLES, SUMMARY) if not (path / name).is_file()]
    if missing:
        raise ConfigError(f"{path} is not a finished e1 eval or sweep run (no {', '.join(missing)})", hint=hint)
    try:
        config = json.loads((path / CONFIG).read_text())
    except ValueError as err:
        raise ConfigError(f"cannot read {path / CONFIG}: {err}", hint=hint) from None
    if not isinstance(config, dict):
        raise ConfigError(f"cannot read {path / CONFIG}: not a JSON object", hint=hint)
    store = SampleStore(path, legacy=Mode.legacy)  # read as every reader of a run (old runs' labels as today's)
    samples, summary = store.read(), store.labelled(read_parquet(path / SUMMARY))
    if "model" not in samples.columns:  # an eval run: one model, named in its config
        samples, summary = (
            samples.assign(model=str(config.get("model", ""))),
            summary.assign(model=str(config.get("model", ""))),
        )
    stamp = datetime.fromtimestamp((path / SUMMARY).stat().st_mtime, tz=timezone.utc).replace(microsecond=0)
    return RunResults(path, config, _cells(samples, summary), stamp.isoformat().replace("+00:00", ""))


def _cells(samples, summary) -> tuple[Cell, ...]:
    """One cell per model × dataset × mode × budget the *samples* hold, in summary order first (a run
    that grew new budgets after its summary was written exports them too). Every number is computed
    from the samples by :func:`e1.report.metrics.summarize`, as e1 eval computes it: ``summary.parquet``
    gives only the order, so an edited or damaged summary never changes an export."""
    from e1.report.metrics import summarize

    key = ["model", "dataset", "mode", "think_budget", "solve_budget"]
    kept = samples[[c for c in SAMPLE_FIELDS + ["model", "reward", "finish_reason"] if c in samples.columns]]
    groups = {k: rows for k, rows in kept.groupby(key, sort=False)}
    computed = {tuple(row[c] for c in key): row for row in summarize(samples, by=key).to_dict(orient="records")}
    order = {k: i for i, k in enumerate(dict.fromkeys(_keys(summary, key)))}
    cells = []
    for k in sorted(groups, key=lambda k: (k not in order, order.get(k, 0), k)):
        rows = groups[k].sort_values(["problem_id", "sample_index"], kind="stable")
        cells.append(Cell(str(k[0]), str(k[1]), str(k[2]), int(k[3]), int(k[4]), computed[k], rows))
    return tuple(cells)


def _keys(summary, key: list[str]) -> list[tuple]:
    """The cells ``summary.parquet`` lists, in its order (none when its key columns are not all there)."""
    if not set(key) <= set(summary.columns):
        return []
    return [tuple(row) for row in summary[key].itertuples(index=False)]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text(value) -> str:
    """A text cell as a string: '' for a missing one (None, NaN, pd.NA)."""
    import pandas as pd

    return "" if value is None or pd.isna(value) else str(value)


def output_text(row: dict, end_marker: str) -> str:
    """A sample's whole output as the model wrote it: thinking, the end marker, the solution; thinking
    that never ended (``think_end`` ``open``, or ``unopened``: never begun) has no end marker after it (one the
    model never wrote would make its text read as a finished thought with a solution after it). Where
    ``think_end`` is unknown (an API that reports none, an older file's row read as unknown:
    :mod:`e1.store.think_ends`), thinking ended where the solution began: a solution text or token."""
    think, solution = text(row.get("think_text")), text(row.get("solution_text"))
    end, solved = row.get("think_end"), row.get("solve_tokens")
    if isinstance(end, str) and end:
        ended = end not in ("open", "unopened")
    else:
        ended = bool(solution) or bool(isinstance(solved, numbers.Real) and solved > 0)
    if not ended:
        return think + solution
    return f"{think}{end_marker}{solution}" if think else solution


def first_prompt(rows) -> str:
    """The prompt stored with a problem's samples ('' for a run written before prompts were stored)."""
    if "prompt" not in rows.columns:
        return ""
    stored = rows["prompt"].dropna()
    return str(stored.iloc[0]) if len(stored) else ""


def accuracy_stderr(rows) -> float:
    """The standard error of avg@n over problems: the std of per-problem accuracy / sqrt(problems)."""
    per_problem = rows.groupby("problem_id")["correct"].mean()
    return float(per_problem.std(ddof=1) / len(per_problem) ** 0.5) if len(per_problem) > 1 else 0.0
