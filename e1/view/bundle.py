"""`e1 view RUNS --bundle OUT`: the viewer as a static folder, to share or open without e1.

    write_bundle(find_runs([Path("runs/sweep")]), Path("share/sweep"))   # open share/sweep/index.html

The folder holds the page (``index.html``, ``static/`` with its script, style and Plotly) and
``data/``: what the API would answer, precomputed, as script files (``e1Bundle.put(key, json)``),
because a page opened from ``file://`` may load scripts but not fetch JSON. ``data/index.js`` has
the runs, curves, training metrics and every run's sample list; ``data/r<run>/p<k>.js`` one
problem's samples with their texts, loaded when the page opens that problem. Nothing is copied
from the runs: only the values the viewer shows are written, so the folder holds no file of a run
(nor a dataset file a config names); a folder already holding something else is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from e1.errors import ConfigError
from e1.store import check_out, check_writable, inside, write_text
from e1.view import tables
from e1.view.routes import STATIC_TYPES, Api
from e1.view.runs import Run

MARKER = "e1-bundle.json"  # a folder holding it is a bundle e1 wrote, and may be written again
BUNDLE_TAG = "<!-- bundle -->"


def write_bundle(runs: list[Run], out: Path) -> list[Path]:
    """Write the bundle of ``runs`` into ``out`` (absent, empty, or an earlier bundle); returns the files."""
    out = _check_folder(check_out(out, "--bundle"))
    api = Api(runs)
    readable = api.readable()
    problems: dict[str, dict[str, int]] = {}
    written = []
    for run_id, run in readable:
        keys, files = _problem_files(run_id, run)
        problems[str(run_id)] = keys
        for name, value in files:
            written.append(_script(out, f"r{run_id}/{name}", value))
    index = {"runs": api.runs({}), "curves": api.curves({}), "metrics": api.metrics({}), "problems": problems,
             "lists": {str(i): tables.sample_list(run) for i, run in readable}}
    written.append(_script(out, "index", index))
    written += _assets(out)
    written.append(write_text(json.dumps({"runs": [run.name for run in runs]}) + "\n", out / MARKER))
    return written


def _check_folder(out: Path) -> Path:
    check_writable(out, "--bundle")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ConfigError(f"--bundle {out} already holds files that are not an e1 view bundle",
                          hint="name a new or empty folder")
    if (out / "data").is_dir():
        shutil.rmtree(out / "data")  # an earlier bundle's data: runs may have been dropped since
    return out


def _problem_files(run_id: int, run: Run) -> tuple[dict[str, int], list[tuple[str, dict]]]:
    """``dataset\\0problem_id`` → k, and each problem's file ``p<k>``: its samples with their texts,
    and what the viewer shows as its problem when no sample of the cell stored a prompt."""
    frame = tables.with_model(run.store.read(), run)
    order = [c for c in tables.ORDER if c in frame.columns]
    keys, files = {}, []
    for k, ((dataset, problem_id), rows) in enumerate(frame.sort_values(order).groupby(["dataset", "problem_id"], sort=False)):
        keys[f"{dataset}\u0000{problem_id}"] = k
        fallback = tables.problem_text(run, str(dataset), str(problem_id))
        files.append((f"p{k}", {"rows": tables.records(rows), "problem": fallback}))
    return keys, files


def _script(out: Path, key: str, value) -> Path:
    """``data/<key>.js``: one call that hands the page its value (ASCII JSON: nothing in it can end the call)."""
    body = json.dumps(value, ensure_ascii=True, allow_nan=False, default=str)
    return write_text(f"e1Bundle.put({json.dumps(key)}, {body});\n", inside(out, "data", f"{key}.js"))


def _assets(out: Path) -> list[Path]:
    import plotly

    static = Path(__file__).parent / "static"
    written = []
    for path in sorted(static.iterdir()):
        if path.suffix in STATIC_TYPES and path.name != "index.html":
            written.append(write_text(path.read_text(encoding="utf-8"), inside(out, "static", path.name)))
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    written.append(write_text(plotly_js.read_text(encoding="utf-8"), inside(out, "static", "plotly.min.js")))
    page = (static / "index.html").read_text(encoding="utf-8")
    if BUNDLE_TAG not in page:
        raise RuntimeError("index.html lost its bundle tag")  # a broken checkout, not a user error
    loader = '<script src="static/bundle.js"></script>\n  <script src="data/index.js"></script>'
    written.append(write_text(page.replace(BUNDLE_TAG, loader), out / "index.html"))
    return written
