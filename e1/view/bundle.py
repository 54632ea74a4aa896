"""`e1 view RUNS --bundle OUT`: the viewer as a static folder, to share or open without e1.

    write_bundle(find_runs([Path("runs/sweep")]), Path("share/sweep"))   # open share/sweep/index.html

The folder holds the page (``index.html``, ``static/`` with its script, style and Plotly) and
``data/``: what the API would answer, precomputed, as script files (``e1Bundle.put(key, json)``),
because a page opened from ``file://`` may load scripts but not fetch JSON. ``data/index.js`` has
the runs, curves, training metrics and every run's sample list; ``data/r<run>/p<k>.js`` one
problem's samples with their texts, loaded when the page opens that problem. Nothing is copied
from the runs: only the values the viewer shows are written, so the folder holds no file of a run
(nor a dataset file a config names); a folder already holding something else is refused. The marker
``e1-bundle.json`` lists every file the bundle wrote: writing again replaces those and removes those
no longer written (:func:`e1.store.remove_owned`), and never touches a file the user added beside them
(one at a name the bundle writes is refused in one line). The marker stamps each file as the bundle
left it (:func:`e1.store.stamps`): a file the user changed since, or a symlink, folder or pipe now at its
name, is the user's, refused in the same line, never replaced.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from e1.errors import ConfigError, E1Error
from e1.store import check_out, check_writable, inside, owned_names, read_manifest, remove_owned, stamps, write_text
from e1.view import tables
from e1.view.routes import STATIC_TYPES, Api
from e1.view.runs import Run

MARKER = "e1-bundle.json"  # a folder holding it is a bundle e1 wrote, and may be written again
BUNDLE_TAG = "<!-- bundle -->"


def write_bundle(runs: list[Run], out: Path) -> list[Path]:
    """Write the bundle of ``runs`` into ``out`` (absent, empty, or an earlier bundle); returns the files."""
    out = check_out(out, "--bundle")
    owned = _check_folder(out)
    api = Api(runs)
    readable = api.readable()
    problems: dict[str, dict[str, int]] = {}
    put = _Writer(out, owned, [run.name for run in runs])
    for run_id, run in readable:
        keys, files = _problem_files(run_id, run)
        problems[str(run_id)] = keys
        for name, value in files:
            _script(put, f"r{run_id}/{name}", value)
    index = {
        "runs": api.runs({}),
        "curves": api.curves({}),
        "metrics": api.metrics({}),
        "problems": problems,
        "lists": {str(i): tables.sample_list(run) for i, run in readable},
    }
    _script(put, "index", index)
    _assets(put)
    remove_owned(out, sorted(owned - put.names() - {MARKER}))  # an earlier bundle's files not written now
    return [*put.written, put.mark(put.names())]


_DATA = re.compile(r"data/index\.js|data/r\d+/p\d+\.js")  # the data files _script names


def _writes(name: str) -> bool:
    """Whether a bundle writes a file named ``name`` (relative to its folder)."""
    static = name.startswith("static/") and name[len("static/") :] in _asset_names()
    return name == "index.html" or static or bool(_DATA.fullmatch(name))


@functools.cache
def _asset_names() -> tuple[str, ...]:
    """The viewer's files a bundle copies into ``static/``."""
    static = Path(__file__).parent / "static"
    return (
        *sorted(p.name for p in static.iterdir() if p.suffix in STATIC_TYPES and p.name != "index.html"),
        "plotly.min.js",
    )


def _check_folder(out: Path) -> set[str]:
    """The files an earlier bundle in ``out`` wrote (none for an absent or empty folder); a folder
    holding files that are no bundle is refused."""
    check_writable(out, "--bundle")
    if not (out.is_dir() and any(out.iterdir())):
        return set()
    if stamps(out, [MARKER])[MARKER] is None:  # no regular file at the marker's name (never opened)
        raise ConfigError(
            f"--bundle {out} already holds files that are not an e1 view bundle", hint="name a new or empty folder"
        )
    marker = read_manifest(out / MARKER) or {}
    if isinstance(marker.get("stamps"), dict):  # those still as the bundle left them: one changed since is the user's
        return (owned_names(out, marker) or set()) | {MARKER}
    listed = marker.get("files") if isinstance(marker.get("files"), list) else None
    found = stamps(out, [p.relative_to(out).as_posix() for p in out.rglob("*")])  # a bundle from before the stamps
    regular = {name for name, stamp in found.items() if stamp is not None}
    return {name for name in regular if _writes(name) and (listed is None or name in listed)} | {MARKER}


class _Writer:
    """Writes a bundle's files under ``out``: a path where anything but a file the bundle wrote, as it left
    it, lies is refused (and the marker then names what is e1's so far, so that the next write knows the
    files this one replaced)."""

    def __init__(self, out: Path, owned: set[str], runs: list[str]):
        self.out, self.owned, self.runs, self.written = out, owned, runs, []

    def names(self) -> set[str]:
        return {path.relative_to(self.out).as_posix() for path in self.written}

    def mark(self, names: set[str]) -> Path:
        """The marker: the runs, and each file of ``names`` with its stamp."""
        files = sorted(names - {MARKER})
        record = {"runs": self.runs, "files": files, "stamps": stamps(self.out, files)}
        return write_text(json.dumps(record) + "\n", self.out / MARKER)

    def __call__(self, text: str, *parts: str) -> Path:
        try:
            path = inside(self.out, *parts)  # through a symlinked folder: refused
            name = path.relative_to(self.out).as_posix()
            if os.path.lexists(path) and name not in self.owned:
                raise ConfigError(
                    f"--bundle {self.out}: {name} is not a file e1 wrote (or it changed since): e1 will not replace it",
                    hint="move it out of the folder, or name a new one",
                )
        except E1Error:
            if self.written:
                self.mark(self.owned | self.names())
            raise
        self.written.append(write_text(text, path))
        return path


def _problem_files(run_id: int, run: Run) -> tuple[dict[str, int], list[tuple[str, dict]]]:
    """``dataset\\0problem_id`` → k, and each problem's file ``p<k>``: its samples with their texts,
    and what the viewer shows as its problem when no sample of the cell stored a prompt."""
    frame = tables.with_model(run.store.read(), run)
    order = [c for c in tables.ORDER if c in frame.columns]
    keys, files = {}, []
    for k, ((dataset, problem_id), rows) in enumerate(
        frame.sort_values(order).groupby(["dataset", "problem_id"], sort=False)
    ):
        keys[f"{dataset}\u0000{problem_id}"] = k
        fallback = tables.problem_text(run, str(dataset), str(problem_id))
        files.append((f"p{k}", {"rows": tables.records(rows), "problem": fallback}))
    return keys, files


def _script(put: _Writer, key: str, value) -> Path:
    """``data/<key>.js``: one call that hands the page its value (ASCII JSON: nothing in it can end the call)."""
    body = json.dumps(value, ensure_ascii=True, allow_nan=False, default=str)
    return put(f"e1Bundle.put({json.dumps(key)}, {body});\n", "data", f"{key}.js")


def _assets(put: _Writer) -> None:
    import plotly

    static = Path(__file__).parent / "static"
    for name in _asset_names():
        path = Path(plotly.__file__).parent / "package_data" / name if name == "plotly.min.js" else static / name
        put(path.read_text(encoding="utf-8"), "static", name)
    page = (static / "index.html").read_text(encoding="utf-8")
    if BUNDLE_TAG not in page:
        raise RuntimeError("index.html lost its bundle tag")  # a broken checkout, not a user error
    loader = '<script src="static/bundle.js"></script>\n  <script src="data/index.js"></script>'
    put(page.replace(BUNDLE_TAG, loader), "index.html")
