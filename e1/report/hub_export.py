"""A run's results for the Hugging Face Hub: ``.eval_results/<dataset>.yaml`` and a README.md model-index
per model (registered hub datasets only), and the one gate of a ``--push`` repository id.

    written, skipped = hub(load_run(Path("runs/sweep")), Path("card"))   # e1 export --format hub
    check_repo_id("my-org/E1-Math-1.5B")

A dataset is named on the Hub only when the run's rows came from its registered hub dataset
(:func:`_hub_benchmark`): a local file prepared under the name ``aime`` is not HuggingFaceH4/aime_2024.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from e1 import __version__
from e1.errors import ConfigError
from e1.report.run_results import Cell, RunResults, model_folder
from e1.store import file_name, inside, write_text


def _registered(dataset: str):
    from e1.data import get_benchmark, is_registered

    return get_benchmark(dataset) if is_registered(dataset) else None


def _hub_benchmark(run: RunResults, dataset: str):
    """The registered benchmark ``dataset`` names, only when the run's rows came from its hub dataset
    (or a mirror of it): a local file prepared under the name ``aime`` is not HuggingFaceH4/aime_2024."""
    benchmark = _registered(dataset)
    source = run.source(dataset)
    return benchmark if benchmark is not None and source.startswith(("hub ", "mirror ")) else None


def hub(run: RunResults, out: Path) -> tuple[list[Path], list[str]]:
    """``.eval_results/<dataset>.yaml`` and a README.md model-index per model (registered hub datasets only)."""
    written, skipped = [], []
    for model in run.models:
        by_dataset: dict[str, list] = {}
        for cell in run.of(model):
            benchmark = _hub_benchmark(run, cell.dataset)
            if benchmark is None or benchmark.hub_id is None:
                skipped.append(
                    f"skipped {cell.dataset} (not read from a registered hub dataset: the Hub cannot name it)"
                )
                continue
            by_dataset.setdefault(cell.dataset, []).append((cell, benchmark))
        folder = inside(out, file_name(model_folder(model)))
        for dataset, cells in by_dataset.items():
            written.append(
                _eval_results_yaml(run, cells, inside(folder, ".eval_results", file_name(f"{dataset}.yaml")))
            )
        if by_dataset:
            written.append(
                _model_card(
                    run, model, [c for cells in by_dataset.values() for c in cells], inside(folder, "README.md")
                )
            )
    if not written:
        raise ConfigError(
            "nothing to export to the hub: none of the run's datasets is a registered hub dataset",
            hint="the Hub names a benchmark by its hub id (`e1 data list` shows them); for other data use lm-eval or lighteval",
        )
    return written, list(dict.fromkeys(skipped))


def _notes(cell: Cell) -> str:
    n = int(cell.summary["samples_per_problem"])
    thought = float(cell.summary.get("think_rate", math.nan))  # NaN where how thinking ended is unknown
    rate = f", thought in {100 * thought:.0f}% of samples" if math.isfinite(thought) else ""
    return f"e1 {cell.mode}: think {cell.think} + solve {cell.solve} tokens, avg@{n}{rate}"


def _eval_results_yaml(run: RunResults, cells: list, path: Path) -> Path:
    import yaml
    from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml

    entries = [
        EvalResultEntry(
            dataset_id=benchmark.hub_id,
            task_id=benchmark.config or "default",
            value=round(100 * float(cell.summary["accuracy"]), 2),
            date=run.date,
            notes=_notes(cell),
        )
        for cell, benchmark in cells
    ]
    return write_text(yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False), path)


def _model_card(run: RunResults, model: str, cells: list, path: Path) -> Path:
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    results = [
        EvalResult(
            task_type="text-generation",
            dataset_type=benchmark.hub_id,
            dataset_name=cell.dataset,
            dataset_config=benchmark.config,
            dataset_split=benchmark.split,
            metric_type="accuracy",
            metric_value=round(100 * float(cell.summary["accuracy"]), 2),
            metric_name=_notes(cell),
        )
        for cell, benchmark in cells
    ]
    data = ModelCardData(model_name=model, eval_results=results)
    card = ModelCard(
        f"---\n{data.to_yaml()}\n---\n\n# {markdown_text(model)}\n\nEvaluated with e1 {__version__} "
        f"(Elastic Reasoning under token budgets).\n"
    )
    return write_text(str(card), path)


def markdown_text(text: str) -> str:
    r"""``text`` shown as itself in Markdown and HTML: on one line, entities for ``& < > " '``, and a
    backslash before each character Markdown (or the Hub's math) would read as markup.

    >>> markdown_text("org/m_1 <script>")
    'org/m\\_1 &lt;script&gt;'
    """
    import html

    line = " ".join(str(text).split())  # a newline would end the heading and start markup of its own
    return html.escape(re.sub(r"([\\`*_\[\]#|~$])", r"\\\1", line), quote=True)


# ---- pushing to the Hub ------------------------------------------------------------------------

HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def check_repo_id(repo: str) -> str:
    """The one gate for ``--push``: an ``owner/name`` the Hub accepts (letters, digits, ``. _ -``, each part
    at most 96 characters, no ``--`` or ``..``), checked by huggingface_hub's own validator as well.

    >>> check_repo_id("my-org/E1-Math-1.5B")
    'my-org/E1-Math-1.5B'
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    hint = "name the model repository as owner/name, e.g. my-org/E1-Math-1.5B"
    repo = str(repo)
    if not HUB_REPO.fullmatch(repo) or "--" in repo or ".." in repo or repo.endswith(".git"):
        raise ConfigError(f"--push {repo[:100]!r} is not a hub repository id", hint=hint)
    try:
        validate_repo_id(repo)
    except HFValidationError as err:
        raise ConfigError(
            f"--push {repo!r} is not a hub repository id: {str(err).splitlines()[0][:200]}", hint=hint
        ) from None
    return repo
