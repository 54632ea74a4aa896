"""The routes of `e1 view`: the page, its static files, and JSON read from the runs on request.

    GET /api/runs                      every run: id, name, kind, model, what its samples hold
    GET /api/curves                    every summary cell of every run (accuracy, interval, tokens, n)
    GET /api/samples?run=0&mode=...    a page of samples without texts (offset, limit ≤ 200), with counts
    GET /api/list?run=0&mode=...       the samples with their problem preview, answer and gold (≤ 50,000)
    GET /api/samples?run=0&dataset=d&problem_id=p&text=1    one problem's samples with their texts
    GET /api/problems?run=0&dataset=d  the problem ids a filter keeps
    GET /api/problem?run=0&dataset=d&problem_id=p&mode=m&think=t&solve=s   the prompt (of that cell) or problem statement
    GET /api/metrics                   every training run's metrics by step

Sample filters: model, dataset, mode, think, solve (budgets), correct, forced (true/false),
problem_id, sample_index. Handlers are plain functions: Starlette runs them in a thread, so a
parquet read never stalls the server.
"""

from __future__ import annotations

import functools
from pathlib import Path

from e1.errors import E1Error
from e1.view import tables
from e1.view.runs import Run

STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def routes(runs: list[Run]) -> list:
    from starlette.routing import Route

    api = Api(runs)
    return [
        Route("/", api.index),
        Route("/static/{name}", api.static),
        Route("/api/runs", _json(api.runs)),
        Route("/api/curves", _json(api.curves)),
        Route("/api/samples", _json(api.samples)),
        Route("/api/list", _json(api.sample_list)),
        Route("/api/problems", _json(api.problems)),
        Route("/api/problem", _json(api.problem)),
        Route("/api/metrics", _json(api.metrics)),
        Route("/favicon.ico", _no_icon),
    ]


def _no_icon(request):
    from starlette.responses import Response

    return Response(status_code=204)


def _json(handler):
    """A handler's value as JSON; a bad query is HTTP 400 with one line, never a traceback."""
    from starlette.responses import JSONResponse

    @functools.wraps(handler)
    def endpoint(request):
        try:
            return JSONResponse(handler(request.query_params))
        except READ_ERRORS as err:  # OSError: a part compacted away meanwhile
            return JSONResponse({"error": _line(err)}, 400)

    return endpoint


# what a bad query or a damaged run raises (pyarrow's errors subclass these): one line, never a traceback
READ_ERRORS = (E1Error, ValueError, KeyError, IndexError, TypeError, OSError, ArithmeticError, NotImplementedError)
INT64 = 2**63


def _line(err: BaseException) -> str:
    message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)  # KeyError quotes itself
    return (str(message).strip().splitlines() or [type(err).__name__])[0][:300]


def _text(query, name: str) -> str | None:
    value = query.get(name)
    return value if value not in (None, "") else None


def _int(query, name: str) -> int | None:
    value = _text(query, name)
    if value is None:
        return None
    if (
        not (value.lstrip("-").isascii() and value.lstrip("-").isdigit())
        or len(value) > 20
        or not (-INT64 <= int(value) < INT64)
    ):  # a budget is an int64 column: 10**26 matches nothing and fails the scan
        raise ValueError(f"{name} must be a whole number below 2^63, got {value[:30]!r}")
    return int(value)


def _flag(query, name: str) -> bool | None:
    value = _text(query, name)
    if value not in (None, "true", "false", "1", "0"):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return None if value is None else value in ("true", "1")


def sample_filter(query) -> tables.SampleFilter:
    return tables.SampleFilter(
        model=_text(query, "model"),
        dataset=_text(query, "dataset"),
        mode=_text(query, "mode"),
        think=_int(query, "think"),
        solve=_int(query, "solve"),
        correct=_flag(query, "correct"),
        forced=_flag(query, "forced"),
        problem_id=_text(query, "problem_id"),
        sample_index=_int(query, "sample_index"),
    )


class Api:
    def __init__(self, runs: list[Run]):
        self.known = runs

    def run(self, query) -> Run:
        index = _int(query, "run")
        if index is None or not 0 <= index < len(self.known):
            raise ValueError(f"run must be one of 0..{len(self.known) - 1}")
        return self.known[index]

    def index(self, request):
        from starlette.responses import FileResponse

        return FileResponse(Path(__file__).parent / "static" / "index.html", media_type="text/html")

    def static(self, request):
        from starlette.responses import FileResponse, PlainTextResponse

        name = request.path_params["name"]
        if name == "plotly.min.js":  # the copy the plotly package ships: charts work offline
            import plotly

            return FileResponse(Path(plotly.__file__).parent / "package_data" / name, media_type="text/javascript")
        path = Path(__file__).parent / "static" / name
        if "/" in name or path.suffix not in STATIC_TYPES or not path.is_file():
            return PlainTextResponse("not found", 404)
        return FileResponse(path, media_type=STATIC_TYPES[path.suffix])

    def runs(self, query) -> list[dict]:
        """Every run; one whose files cannot be read is listed with its ``error`` and nothing to show,
        and the others load as usual."""
        listed = []
        for i, run in enumerate(self.known):
            entry = {
                "id": i,
                "name": run.name,
                "kind": run.kind,
                "model": run.model(),
                "facets": tables.EMPTY_FACETS,
                "curves": False,
                "metrics": False,
                "error": _unreadable(run),
            }
            if entry["error"] is None:
                entry.update(
                    facets=tables.facets(run), curves=run.summary_file is not None, metrics=run.metrics_file is not None
                )
            listed.append(entry)
        return listed

    def readable(self) -> list[tuple[int, Run]]:
        """The runs whose files read (/api/runs names what is wrong with the others)."""
        return [(i, run) for i, run in enumerate(self.known) if _unreadable(run) is None]

    def curves(self, query) -> list[dict]:
        return [dict(point, run_id=i) for i, run in self.readable() for point in tables.curve_points(run)]

    def samples(self, query):
        run, where = self.run(query), sample_filter(query)
        if _flag(query, "text"):
            return {"rows": tables.problem_samples(run, where)}
        return tables.sample_page(run, where, offset=_int(query, "offset") or 0, limit=_int(query, "limit") or 50)

    def sample_list(self, query) -> dict:
        return tables.sample_list(self.run(query), sample_filter(query))

    def problems(self, query) -> list[str]:
        return tables.problem_ids(self.run(query), sample_filter(query))

    def problem(self, query) -> dict:
        dataset, problem_id = _text(query, "dataset"), _text(query, "problem_id")
        if dataset is None or problem_id is None:
            raise ValueError("give dataset and problem_id")
        return tables.problem_text(self.run(query), dataset, problem_id, cell=sample_filter(query))

    def metrics(self, query) -> list[dict]:
        return [tables.metrics(run) for _, run in self.readable() if run.metrics_file is not None]


def _unreadable(run: Run) -> str | None:
    """What is wrong with a run's files, in one line (None: its samples, summary and metrics read)."""
    try:
        tables.facets(run)  # cached while the files are unchanged
        tables.curve_points(run)
        if run.metrics_file is not None:
            tables.metrics(run)
    except READ_ERRORS as err:
        return _line(err)
    return None
