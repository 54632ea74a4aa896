"""What the viewer reads from a run's parquet files, and only that.

A page of the sample browser reads the key and count columns of the rows its filter keeps
(pyarrow pushes the filter into the scan; the text columns are never touched); texts are read
only for one problem's samples (a sample shown, or one side of a comparison). Curves come from
``summary.parquet`` (one row per cell), training curves from ``metrics.parquet``.

    rows = sample_page(run, SampleFilter(mode="elastic", forced=True), offset=0, limit=50)
    shown = problem_samples(run, SampleFilter(dataset="aime", problem_id="60", mode="elastic"))
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from e1.data import PROBLEM
from e1.view.runs import Run

ORDER = ["model", "dataset", "problem_id", "sample_index", "mode", "think_budget", "solve_budget"]
INDEX = ORDER + ["think_tokens", "solve_tokens", "forced", "correct", "finish_reason", "reward"]
FACETS = ["model", "dataset", "mode", "think_budget", "solve_budget"]
CURVE_FIELDS = [
    "model",
    "dataset",
    "mode",
    "think_budget",
    "solve_budget",
    "accuracy",
    "accuracy_ci_low",
    "accuracy_ci_high",
    "mean_total_tokens",
    "mean_think_tokens",
    "forced_rate",
    "think_rate",
    "empty_think_rate",
    "prefilled_rate",
    "unopened_rate",
    "problems",
    "samples_per_problem",
]
PAGE_MAX, PROBLEM_SAMPLES_MAX = 200, 64
# the sample list the page searches and sorts by itself: short texts (the model's answer, the gold, the
# problem's first PREVIEW_CHARS), never the thinking or the solution; at most LIST_MAX rows (it says so)
LIST = INDEX + ["extracted_answer", "gold"]
LIST_MAX, PREVIEW_CHARS = 50_000, 240
EMPTY_FACETS = {"samples": 0, "models": [], "datasets": [], "modes": [], "budgets": []}


@dataclass(frozen=True)
class SampleFilter:
    """Which samples: every field left None matches all (``think``/``solve`` are the budgets)."""

    model: str | None = None
    dataset: str | None = None
    mode: str | None = None
    think: int | None = None
    solve: int | None = None
    correct: bool | None = None
    forced: bool | None = None
    problem_id: str | None = None
    sample_index: int | None = None

    def expression(self, columns: list[str]):
        """A pyarrow filter over the columns a file has (a sweep's model column, say); None: keep all."""
        import pyarrow.dataset as ds

        column = {"think": "think_budget", "solve": "solve_budget"}
        terms = [
            ds.field(column.get(f.name, f.name)) == getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None and column.get(f.name, f.name) in columns
        ]
        return functools.reduce(lambda a, b: a & b, terms) if terms else None


def _stamp(run: Run) -> tuple:
    """What changes when a run's files do: cached reads are keyed by it, so a growing run stays current."""
    return tuple((str(p), p.stat().st_mtime_ns) for p in run.sample_files if p.exists())


def facets(run: Run) -> dict:
    """The models, datasets, modes and budgets a run's samples hold (each sorted), and their count."""
    return _facets(run, _stamp(run))


@functools.lru_cache(maxsize=64)
def _facets(run: Run, stamp: tuple) -> dict:
    if not run.sample_files:
        return EMPTY_FACETS
    table = run.store.table(FACETS)
    columns = table.column_names
    cells = table.group_by(columns).aggregate([]).to_pandas()
    given = [str(m) for m in run.config().get("models") or []]  # a sweep's models in the order given (base first)
    models = (
        sorted(map(str, cells["model"].unique()), key=lambda m: (given.index(m) if m in given else len(given), m))
        if "model" in cells
        else [run.model()]
    )
    budgets = cells[["think_budget", "solve_budget"]].drop_duplicates().sort_values(["think_budget", "solve_budget"])
    return {
        "samples": table.num_rows,
        "models": [str(m) for m in models],
        "datasets": sorted(map(str, cells["dataset"].unique())),
        "modes": sorted(map(str, cells["mode"].unique())),
        "budgets": [[int(t), int(s)] for t, s in budgets.itertuples(index=False)],
    }


def sample_page(run: Run, where: SampleFilter, offset: int = 0, limit: int = 50) -> dict:
    """One page of the samples ``where`` keeps, without their texts: the rows in results order,
    how many match, and how many of those are correct and forced."""
    import pyarrow.compute as pc

    table = run.store.table(INDEX, where.expression(run.store.names()))
    order = [(c, "ascending") for c in ORDER if c in table.column_names]
    page = table.sort_by(order).slice(max(0, offset), max(0, min(limit, PAGE_MAX))) if table.num_rows else table
    return {
        "total": table.num_rows,
        "correct": int(pc.sum(table["correct"]).as_py() or 0),
        "forced": int(pc.sum(table["forced"]).as_py() or 0),
        "offset": offset,
        "rows": records(with_model(page.to_pandas(), run)),
    }


def sample_list(run: Run, where: SampleFilter = SampleFilter()) -> dict:
    """The samples ``where`` keeps, in results order, each with its problem (a preview), the model's
    answer and the gold, for the page to search, sort and page through; ``truncated`` when more
    than :data:`LIST_MAX` matched (the first ones are listed)."""
    table = run.store.table(LIST, where.expression(run.store.names()))
    order = [(c, "ascending") for c in ORDER if c in table.column_names]
    listed = table.sort_by(order).slice(0, LIST_MAX) if table.num_rows else table
    frame = with_model(listed.to_pandas(), run)
    previews = problem_previews(run)
    frame["problem"] = [previews.get((str(d), str(p))) for d, p in zip(frame["dataset"], frame["problem_id"])]
    for column in ("extracted_answer", "gold"):
        if column in frame:
            frame[column] = [_preview(v) for v in frame[column]]
    return {"total": table.num_rows, "truncated": table.num_rows > LIST_MAX, "rows": records(frame)}


def _preview(value) -> str | None:
    import pandas as pd

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    line = " ".join(str(value).split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def problem_previews(run: Run) -> dict[tuple[str, str], str]:
    """(dataset, problem id) → the problem's first words: its statement from the run's local dataset,
    else the prompt stored with its samples (one scan of the stored prompts, sample 0 of each cell)."""
    found: dict[tuple[str, str], str] = {}
    names = run.store.names()
    if "prompt" in names:
        stored = run.store.table(["dataset", "problem_id", "prompt"], ds_field("prompt").is_valid())
        for d, p, prompt in zip(*(stored[c].to_pylist() for c in ("dataset", "problem_id", "prompt"))):
            found.setdefault((str(d), str(p)), _preview(prompt))
    for path in _dataset_files(run):
        found.update({key: _preview(text) for key, text in _problems(str(path), path.stat().st_mtime_ns).items()})
    return found


def problem_samples(run: Run, where: SampleFilter) -> list[dict]:
    """Every column of one problem's samples (texts included), in results order; ``where`` must
    name the problem, so a request never reads more than one problem's texts."""
    if where.problem_id is None or where.dataset is None:
        raise ValueError("texts are read one problem at a time: give dataset and problem_id")
    table = run.store.table(where=where.expression(run.store.names()))
    order = [(c, "ascending") for c in ORDER if c in table.column_names]
    return records(with_model(table.sort_by(order).slice(0, PROBLEM_SAMPLES_MAX).to_pandas(), run))


def problem_ids(run: Run, where: SampleFilter) -> list[str]:
    """The problems ``where`` keeps, in results order (ids only)."""
    table = run.store.table(["problem_id"], where.expression(run.store.names()))
    return sorted({str(v) for v in table["problem_id"].to_pylist()}, key=_natural)


def _natural(text: str) -> tuple:
    import re

    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def with_model(frame, run: Run):
    return frame if "model" in frame.columns else frame.assign(model=run.model())


def records(frame) -> list[dict]:
    """Rows as JSON-ready dicts (NaN becomes null, numpy scalars plain numbers)."""
    return json.loads(frame.to_json(orient="records", force_ascii=False)) if len(frame) else []


def curve_points(run: Run) -> list[dict]:
    """A run's summary cells (accuracy with its interval, tokens, n), one per model × dataset × mode × budget."""
    import pyarrow.parquet as pq

    if run.summary_file is None:
        return []
    present = pq.read_schema(run.summary_file).names
    if "accuracy" not in present:  # a summary written before rates became fractions
        return []
    frame = run.store.labelled(  # think rates of a summary written before their vocabulary was recorded: unknown
        pq.read_table(run.summary_file, columns=[c for c in CURVE_FIELDS if c in present]).to_pandas(),
        source=run.summary_file,
    )
    return records(with_model(frame, run).assign(run=run.name))


def metrics(run: Run) -> dict:
    """A training run's metrics.parquet: its numeric columns by step."""
    import pandas as pd

    frame = pd.read_parquet(run.metrics_file).sort_values("step")
    frame = frame[
        [
            c
            for c in frame.columns
            if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
        ]
    ]
    return {"run": run.name, "columns": list(frame.columns), "rows": records(frame)}


def problem_text(run: Run, dataset: str, problem_id: str, cell: SampleFilter | None = None) -> dict:
    """What the model was asked: the prompt stored with the problem's samples (the one of ``cell``
    when given: prompts stating the budget differ by cell), else the problem statement from the
    run's dataset if it is on this machine (never downloaded), else nothing."""
    names = run.store.names()
    if "prompt" in names:
        problem = SampleFilter(dataset=dataset, problem_id=problem_id)
        within = replace(cell, dataset=dataset, problem_id=problem_id) if cell is not None else problem
        for chosen in (within, problem):  # the cell's prompt, else any of the problem's
            expression = chosen.expression(names) & ds_field("prompt").is_valid()
            stored = run.store.table(["prompt"], expression)["prompt"].to_pylist()[:1]
            if stored:
                return {"text": stored[0], "source": "prompt"}
    for path in _dataset_files(run):
        text = _problems(str(path), path.stat().st_mtime_ns).get((dataset, problem_id))
        if text is not None:
            return {"text": text, "source": f"problem statement from {path.name} (the prompt itself is not stored)"}
    return {"text": None, "source": "not stored: neither the prompt nor the run's dataset is on this machine"}


def ds_field(name: str):
    import pyarrow.dataset as ds

    return ds.field(name)


def _dataset_files(run: Run) -> list[Path]:
    """The local files of the datasets the run's config names (given files, or prepared parquet files),
    only where they lie under the folder given to e1 view or in this machine's data directory: a
    config names any path, and the viewer serves only what it was pointed at."""
    from e1.data import default_data_dir, prepared_path

    config = run.config()
    specs = config.get("datasets") or [config.get("data")]
    specs = specs if isinstance(specs, list) else [specs]
    roots = (run.root or run.path, default_data_dir())
    found = []
    for spec in [str(s) for s in specs if s]:
        candidates = [Path(spec).expanduser().absolute()]
        if "/" not in spec:
            candidates += [
                prepared_path(spec, Path(str(config["data_dir"]))) if config.get("data_dir") else None,
                prepared_path(spec),
            ]
        allowed = [path for path in candidates if path is not None and _under(path, roots) and path.is_file()]
        found.extend(allowed[:1])
    return found


def _under(path: Path, roots) -> bool:
    from e1.errors import E1Error
    from e1.store import inside

    for root in roots:
        try:
            inside(root, path)
            return True
        except E1Error:
            continue
    return False


@functools.lru_cache(maxsize=16)
def _problems(path: str, stamp: int) -> dict:
    """(dataset, id) → problem statement for one local dataset file (ids and statements only)."""
    import pyarrow.parquet as pq

    from e1.data import DATASET, ID, load_dataset

    wanted = [DATASET, ID, PROBLEM]
    if path.endswith(".parquet") and set(wanted) <= set(pq.read_schema(path).names):
        frame = pq.read_table(path, columns=wanted).to_pandas()  # not the answers (a code set's tests)
    else:
        frame = load_dataset(path)[wanted]
    return {(str(d), str(i)): str(p) for d, i, p in frame.itertuples(index=False)}
