"""What `e1 elo` rates: per-problem attempts from an e1 run directory, its samples.parquet, or a
JSON file ``{"1971A": [true, false, ...]}``; and the JSON reader shared with the contest files.

    attempts = load_results(Path("runs/code-1k"), mode="elastic")   # {"1971A": [False, True, ...]}
"""

from __future__ import annotations

import json
from pathlib import Path

from e1.errors import ConfigError, DataError

_RESULTS_HINT = 'expected {"1971A": [true, false, ...], ...}, or pass an e1 run directory'


def read_json(path: Path, results: bool = False):
    """A contest file (malformed: fetch it again) or, ``results``, the user's results file (fix it)."""
    if not path.is_file():
        raise DataError(f"missing contest file {path}", hint="run `e1 elo fetch --contests ... --out DIR` first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        what = "--results file" if results else "contest file"
        raise DataError(
            f"{what} {path}: malformed JSON ({err})",
            hint=_RESULTS_HINT if results else "delete it and run `e1 elo fetch` again",
        ) from None


def load_results(
    path: Path,
    dataset: str | None = None,
    mode: str | None = None,
    think: int | None = None,
    solve: int | None = None,
) -> dict[str, list[bool]]:
    """Per-problem attempts ``{"1971A": [False, True, ...]}`` from a run dir, parquet or JSON file.

    A parquet holding several (dataset, mode, think_budget, solve_budget) groups needs
    ``dataset``, ``mode``, ``think`` and/or ``solve`` to pick one.
    """
    from e1.store import SAMPLES, SampleStore

    path = Path(path)
    if path.is_dir() or path.name == SAMPLES:  # a run: read as every reader of a run reads it (parts included)
        run = path if path.is_dir() else path.parent
        from e1.engine import Mode

        store = SampleStore(run, legacy=Mode.legacy)
        if not store.files():
            raise DataError(
                f"no results at {run / SAMPLES}", hint="pass an e1 run directory, samples.parquet or a JSON file"
            )
        samples = store.read()
    elif not path.is_file():
        raise DataError(f"no results at {path}", hint="pass an e1 run directory, samples.parquet or a JSON file")
    elif path.suffix == ".json":
        return _results_from_json(path)
    else:
        samples = _read_parquet(path)
    return _results_from_samples(
        path, samples, {"dataset": dataset, "mode": mode, "think_budget": think, "solve_budget": solve}
    )


def _results_from_json(path: Path) -> dict[str, list[bool]]:
    results = read_json(path, results=True)
    if not isinstance(results, dict) or not all(
        isinstance(attempts, list) and all(isinstance(ok, bool) for ok in attempts) for attempts in results.values()
    ):
        raise DataError(f"--results file {path} is malformed", hint=_RESULTS_HINT)
    return results


def _read_parquet(path: Path):
    """A parquet file of samples that is not a run's (a run is read by :class:`e1.store.SampleStore`),
    through the one parquet gate (:func:`e1.data.read_parquet_table`)."""
    from e1.data import read_parquet_table

    return read_parquet_table(path).to_pandas()


def _results_from_samples(path: Path, samples, wanted: dict[str, object]) -> dict[str, list[bool]]:
    from e1.store import GROUP_KEY

    missing = {"problem_id", "sample_index", "correct"} - set(samples.columns)
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    for column, value in wanted.items():
        if value is not None:
            if column not in samples.columns:
                raise ConfigError(f"{path} has no {column} column to filter on")
            samples = samples[samples[column] == value]
    group_columns = [column for column in GROUP_KEY if column in samples.columns]
    groups = samples[group_columns].drop_duplicates()
    if group_columns and len(groups) > 1:
        listed = "; ".join(" ".join(f"{c}={row[c]}" for c in group_columns) for _, row in groups.iterrows())
        raise ConfigError(
            f"{path} holds several runs ({listed})", hint="choose one with --dataset/--mode/--think/--solve"
        )
    if samples.empty:
        raise DataError(f"{path}: no samples left after filtering")
    samples = samples.sort_values(["problem_id", "sample_index"])
    return {str(pid): [bool(ok) for ok in rows["correct"]] for pid, rows in samples.groupby("problem_id", sort=True)}
