"""What a dataset is, to tell runs apart: its name (the ``dataset`` column results are keyed by)
and a fingerprint of its problems.

    datasets = load_datasets(["a/probs.jsonl", "aime"], data_dir=None)   # {name: canonical frame}
    fingerprints = {name: fingerprint(frame) for name, frame in datasets.items()}

Results rows are keyed by dataset name, so two different datasets under one name would mix:
:func:`load_datasets` refuses them (``a/probs.jsonl`` and ``b/probs.jsonl`` are both "probs"),
naming both and how to name them apart, and keeps one copy of a dataset given twice
(``probs.jsonl,./probs.jsonl``). A run directory records each dataset's :func:`fingerprint`
so that a problems file edited (or a benchmark prepared again) between two runs into one
``--out`` is refused instead of mixing old answers with new ones
(:func:`e1.store.run_identity.check_datasets`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e1.data import schema
from e1.errors import DataError

if TYPE_CHECKING:
    import pandas as pd


def fingerprint(frame: pd.DataFrame) -> str:
    """A hash of a canonical frame's problems: every column of every row, rows in id order (so
    the same problems listed in another order are the same dataset), values as JSON."""
    digest = hashlib.sha256()
    columns = sorted(frame.columns)
    digest.update(json.dumps(columns).encode())
    rows = frame.assign(_id=frame[schema.ID].astype(str)).sort_values("_id", kind="stable")[columns]
    for row in rows.itertuples(index=False, name=None):
        digest.update(json.dumps(row, default=_plain, ensure_ascii=False).encode() + b"\n")
    return "sha256:" + digest.hexdigest()[:24]


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)  # numpy arrays and scalars


def load_datasets(specs: Sequence[str], data_dir: Path | None = None) -> dict[str, pd.DataFrame]:
    """Each spec's canonical frame (:func:`e1.data.load_dataset`), keyed by dataset name; a
    DataError when two specs hold different datasets under one name."""
    from e1.data.preparation import load_dataset

    datasets: dict[str, pd.DataFrame] = {}
    sources: dict[str, tuple[str, str]] = {}  # name -> (first spec, its fingerprint)
    for spec in dict.fromkeys(specs):
        for name, frame in _by_name(load_dataset(spec, data_dir)):
            digest = fingerprint(frame)
            if name not in sources:
                datasets[name], sources[name] = frame, (spec, digest)
            elif sources[name][1] != digest:
                raise DataError(
                    f"--datasets {sources[name][0]} and {spec} are two different datasets named '{name}'",
                    hint=_rename_hint(name, (spec, sources[name][0])),
                )
    return datasets


def _rename_hint(name: str, specs: tuple[str, str]) -> str:
    file = next((spec for spec in specs if Path(spec).expanduser().is_file()), None)
    if file is None:
        return "results are keyed by dataset name: prepare one of them under another name (e1 data prepare --name)"
    return (
        f"results are keyed by dataset name: name one apart, e.g. e1 data prepare --from {file} "
        f"--name {name}-2, then pass --datasets {name}-2"
    )


def _by_name(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """A canonical frame split by its ``dataset`` column (a prepared file names one dataset)."""
    names = list(dict.fromkeys(frame[schema.DATASET].astype(str)))
    if len(names) == 1:
        return [(names[0], frame)]
    return [(name, frame[frame[schema.DATASET].astype(str) == name].reset_index(drop=True)) for name in names]
