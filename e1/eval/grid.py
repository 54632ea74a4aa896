"""A run folder's grid (datasets × modes × budgets): read from what the folder holds, and grown by e1 sweep.

    previous = check_run_dir(out, config.to_json(), RUN_IDENTITY, kind="eval")
    check_grid(out, previous, config.to_json())            # e1 eval: the same grid, or one line
    config = grown(out, previous, config)                  # e1 sweep: held cells ∪ the new ones

The grid ``config.json`` records is believed only as far as the stored rows agree: every cell that
``samples.parquet`` (with its parts) and ``summary.parquet`` hold must be one of its cells, or the
folder is refused in one line (:func:`check_held`). A sweep that is given more budgets, modes or
datasets grows into the union: each computed cell is kept as it is and only the new ones are drawn.
"""

from __future__ import annotations

from pathlib import Path

from e1.budget import Budget
from e1.engine import Mode
from e1.errors import E1Error, ResultsError
from e1.store import GROUP_KEY, MODE_FORMAT, MODE_FORMAT_KEY, SUMMARY, SampleStore, held_datasets, read_parquet


def check_grid(out: Path, previous: dict | None, current: dict, command: str = "e1 eval", grow: bool = False) -> None:
    """Refuse a folder whose stored rows disagree with its ``config.json`` (:func:`check_held`); then,
    unless ``grow`` (a sweep grown by :func:`grown`), other datasets, budgets or modes than it holds, with
    the way to get them. Datasets: what its run recorded (:func:`held_datasets`)."""
    from e1.data import dataset_names

    if previous is None:  # no record: the rows the folder holds (if any) are its grid
        check_held(out, current, recorded_by=None)
        return
    previous = _today(previous)
    check_held(out, previous)
    if grow:
        return
    more = "; e1 sweep runs several budgets and modes in one folder, and grows" if command == "e1 eval" else ""
    held = ", ".join(held_datasets(out, previous))  # empty: the folder holds no results of any dataset
    grids = [("datasets", held, ", ".join(dataset_names(current["datasets"])))] if held else []
    grids += [
        (key, text(previous[key]), text(current[key]))
        for key, text in (("budgets", budgets_text), ("modes", lambda modes: ", ".join(sorted(modes))))
        if key in previous
    ]
    for key, was, now in grids:
        if was != now:
            raise ResultsError(
                f"{out} holds a run of {key} {was}, not {now}",
                hint=f"leave out --out for a new run folder (or pass another); {command} into {out} with the same "
                f"{key} resumes it{more if key != 'datasets' else ''}",
            )


def _today(record: dict) -> dict:
    """A record's modes as today's texts say them (a folder written before :data:`MODE_FORMAT`)."""
    if record.get(MODE_FORMAT_KEY, 1) < MODE_FORMAT and isinstance(record.get("modes"), list):
        return {**record, "modes": [Mode.legacy(m) for m in record["modes"]]}
    return record


def held_cells(out: Path) -> set[tuple[str, str, int, int]]:
    """(dataset, mode, think budget, solve budget) of every row the folder's samples and summary hold."""
    store = SampleStore(out, legacy=Mode.legacy)
    frames = [store.read(columns=GROUP_KEY)]
    if (Path(out) / SUMMARY).is_file():
        frames.append(store.labelled(read_parquet(Path(out) / SUMMARY, columns=GROUP_KEY)))
    cells = set()
    for frame in frames:
        if set(GROUP_KEY) <= set(frame.columns):
            cells.update((str(d), str(m), int(t), int(s)) for d, m, t, s in frame[GROUP_KEY].itertuples(index=False))
    return cells


def check_held(out: Path, record: dict, recorded_by: str | None = "config.json") -> None:
    """Every cell the folder holds is one of the grid its ``config.json`` records, else one line: an edited
    record would have the next run add a second grid beside the first. A record without budgets or modes
    (an edit; e1 always writes both) holds none of them. ``recorded_by`` None: the folder has no record,
    and ``record`` is the run asked for (a folder of rows without a config.json is no blank one)."""
    budgets, modes = _recorded(out, record, "budgets"), _recorded(out, record, "modes")
    names = set(held_datasets(out, record)) if "dataset_fingerprints" in record else None
    for dataset, mode, think, solve in sorted(held_cells(out)):
        for key, ok, value in (
            ("budgets", (think, solve) in (budgets or ()), f"t={think} s={solve}"),
            ("modes", mode in (modes or ()), mode),
            ("datasets", names is None or dataset in names, dataset),
        ):
            if not ok:
                raise ResultsError(
                    f"{out}/config.json records {key} that its samples disagree with (they hold {value})"
                    if recorded_by
                    else f"{out} holds samples of {key} {value} and no config.json naming them",
                    hint="restore config.json as e1 wrote it, or use another --out",
                )


def _recorded(out: Path, record: dict, key: str) -> set | None:
    """The budgets ((think, solve) pairs) or modes (texts) ``record`` names; None when it names none;
    a value e1 does not write there is refused in one line."""
    if key not in record:
        return None
    value = record[key]
    try:
        if not isinstance(value, list) or (key == "modes" and not all(isinstance(m, str) for m in value)):
            raise TypeError(key)
        if key == "modes":
            return {str(Mode.parse(m)) for m in value}
        return {(_count(b["think"]), _count(b["solve"])) for b in value}
    except (TypeError, KeyError, ValueError, E1Error):
        raise ResultsError(
            f"{out}/config.json records {key} e1 did not write ({str(value)[:60]})",
            hint="restore config.json as e1 wrote it, or use another --out",
        ) from None


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def budgets_text(budgets: list) -> str:
    """``t=512 s=1024, t=1024 s=1024`` for config.json's budget records, sorted."""
    pairs = sorted({(int(b["think"]), int(b["solve"])) for b in budgets})
    return ", ".join(f"t={t} s={s}" for t, s in pairs)


def grown(out: Path, previous: dict | None, settings):
    """``settings`` (an :class:`e1.eval.run.EvalConfig`) over the union of the grid the folder holds and
    its own: the held budgets, modes and datasets first, then the new ones. A held dataset the request
    leaves out is found under the spec the record names; one that is not there now is refused in one line."""
    from dataclasses import replace

    from e1.data import dataset_names

    if previous is None:
        return settings
    previous = _today(previous)
    _recorded(out, previous, "budgets"), _recorded(out, previous, "modes")  # a record e1 wrote (check_held)
    budgets = [Budget(int(b["think"]), int(b["solve"])) for b in previous.get("budgets", ())]
    modes = [Mode.parse(m) for m in previous.get("modes", ())]
    datasets, named = list(settings.datasets), set(dataset_names(settings.datasets))
    for name in held_datasets(out, previous):
        if name not in named:
            specs = [s for s in previous.get("datasets", ()) if name in dataset_names([s])]
            if not specs:
                raise ResultsError(
                    f"{out} holds a run of datasets {', '.join(held_datasets(out, previous))}, not "
                    f"{', '.join(sorted(named))}",
                    hint=f"add {name} to --datasets to grow the sweep, or pass another --out",
                )
            datasets.append(specs[0])
            named.update(dataset_names(specs[:1]))
    return replace(
        settings,
        budgets=tuple(dict.fromkeys([*budgets, *settings.budgets])),
        modes=tuple(dict.fromkeys([*modes, *settings.modes])),
        datasets=tuple(dict.fromkeys(datasets)),
    )
