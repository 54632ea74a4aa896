"""`e1 view`: a local web app over run directories — curves, samples, side by side, training metrics.

    e1 view runs/sweep runs/e1-1k runs/demo      # then open http://127.0.0.1:8765/
    e1 view runs/sweep --bundle share/sweep      # a static folder: open share/sweep/index.html

:mod:`e1.view.runs` finds the runs under the given folders, :mod:`e1.view.tables` reads their
parquet files (only the columns and rows a request needs), :mod:`e1.view.server` serves them
with Starlette and uvicorn; the page (``static/``) draws with Plotly, whose bundled
``plotly.min.js`` is served from the installed package, so nothing is fetched from the network;
:mod:`e1.view.bundle` writes the same page with its data precomputed, as a static folder.
"""

from e1.view.server import ViewConfig, bundle_runs, serve

__all__ = ["ViewConfig", "bundle_runs", "serve"]
