"""A run's results in the formats the field reads: lm-evaluation-harness, lighteval, the Hugging Face Hub.

    written = export(Path("runs/eval"), "lm-eval")      # -> runs/eval/export/lm-eval/<model>/...
    written = export(Path("runs/sweep"), "hub", out=Path("card"))

Every cell of a run (dataset × mode × think budget × solve budget) becomes one *task* named
``<dataset>_<mode>_t<t>_s<s>`` (:func:`task_name`: distinct cells get distinct names), per model
(a sweep exports each of its models):

- ``lm-eval``: what lm-eval's ``EvaluationTracker`` writes under ``--output_path``:
  ``<model>/results_<date>.json`` (``results`` with ``exact_match,none`` = avg@n accuracy and its
  standard error over problems, ``pass@1``, ``pass@k``, ``maj@k``, tokens and forced rate;
  ``configs``, ``versions``, ``n-shot``, ``higher_is_better``, ``n-samples``, ``config``) and
  ``<model>/samples_<task>_<date>.jsonl``, one line per problem (``doc_id``, ``doc``, ``target``,
  ``arguments``, ``resps``: the n outputs, ``filtered_resps``: the extracted answers, ``metrics``).
- ``lighteval``: what lighteval's tracker saves: ``results/<model>/results_<date>.json`` and
  ``details/<model>/<date>/details_<task>|0_<date>.parquet``, one row per problem with its
  ``doc`` (a lighteval ``Doc``), ``model_response`` (a ``ModelResponse``: the n outputs, their
  thinking as ``reasonings``) and ``metric``.
- ``hub``: ``<model>/.eval_results/<dataset>.yaml`` (the Hub's eval-results format: one entry per
  cell, the accuracy in percent as leaderboards show it, the cell in ``notes``) and the same
  results as the ``model-index`` of ``<model>/README.md``; only datasets registered with a hub
  id can be named there (others are listed as skipped).

The prompt is the one the model saw (``samples.parquet``'s ``prompt``), when the run stored it.
Each file goes through e1's atomic writers (a kill leaves no half file).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from e1 import __version__
from e1.errors import ConfigError, did_you_mean
from e1.report.hub_export import _hub_benchmark, _registered, check_repo_id, hub
from e1.report.run_results import (
    Cell,
    RunResults,
    accuracy_stderr,
    first_prompt,
    load_run,
    model_folder,
    output_text,
    sha256,
    task_name,
    text,
)
from e1.store import (
    FINGERPRINTS,
    atomic_write,
    check_out,
    check_writable,
    file_name,
    inside,
    write_json,
    write_text,
)

FORMATS = ("lm-eval", "lighteval", "hub")
EXPORT_DIR = "export"
__all__ = ["EXPORT_DIR", "FORMATS", "check_repo_id", "export", "load_run", "model_folder", "task_name"]


def export(run_dir: Path, fmt: str, out: Path | None = None) -> tuple[list[Path], list[str]]:
    """Write ``run_dir``'s results in format ``fmt`` (:data:`FORMATS`) under ``out`` (default
    ``run_dir/export/<fmt>``); returns the files written and notes: what was skipped, and each
    registered dataset name whose data did not come from its hub dataset (with where it came from)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}", hint=did_you_mean(fmt, FORMATS))
    if out is not None:
        check_writable(check_out(out))  # --out FILE: one line naming the option
    run = load_run(run_dir)
    out = Path(out) if out is not None else Path(run_dir) / EXPORT_DIR / fmt
    writer = {"lm-eval": lm_eval, "lighteval": lighteval, "hub": hub}[fmt]
    written, notes = writer(run, out)
    return written, _provenance_notes(run) + notes


def _provenance_notes(run: RunResults) -> list[str]:
    """A line per dataset named like a registered benchmark whose rows came from elsewhere."""
    notes = []
    for dataset in dict.fromkeys(cell.dataset for cell in run.cells):
        registered = _registered(dataset)
        if registered is not None and registered.hub_id and _hub_benchmark(run, dataset) is None:
            notes.append(
                f"{dataset}: the run's data came from {run.source(dataset)}, not the hub's {registered.hub_id}: "
                "exported under that source, not the hub's name"
            )
    return notes


# summary.parquet column -> (lm-eval / lighteval metric name, higher is better)
METRICS = {
    "accuracy": ("exact_match", True),
    "pass_at_1": ("pass@1", True),
    "mean_think_tokens": ("think_tokens", False),
    "mean_solve_tokens": ("solve_tokens", False),
    "forced_rate": ("forced_rate", False),
    # how often the model thought (e1.report.metrics.think_rates; left out where NaN: think_end unknown)
    "think_rate": ("think_rate", False),
    "empty_think_rate": ("empty_think_rate", False),
    "prefilled_rate": ("prefilled_rate", False),
    "unopened_rate": ("unopened_rate", False),
}


def _metrics(cell: Cell) -> dict[str, tuple[float, bool]]:
    """A cell's numbers by metric name: the fixed ones, pass@k and maj@k at the run's k."""
    row, found = cell.summary, {}
    for column, (name, higher) in METRICS.items():
        found[name] = (row[column], higher)
    k = int(row["k"])
    found[f"pass@{k}"], found[f"maj@{k}"] = (row["pass_at_k"], True), (row["maj_at_k"], True)
    return {
        name: (float(value), higher)
        for name, (value, higher) in found.items()
        if value is not None and math.isfinite(float(value))
    }


def _version(dataset: str) -> int:
    """The benchmark's task version (1 for a dataset given as a file)."""
    benchmark = _registered(dataset)
    return benchmark.task_version if benchmark is not None else 1


def _end_marker(run: RunResults) -> str:
    return run.config.get("think_end") or "</think>"


# ---- lm-evaluation-harness -------------------------------------------------------------------


def lm_eval(run: RunResults, out: Path) -> tuple[list[Path], list[str]]:
    written = []
    for model in run.models:
        folder = inside(out, file_name(model_folder(model)))
        cells = run.of(model)
        for cell in cells:
            lines = [json.dumps(doc, ensure_ascii=False) for doc in _lm_eval_docs(run, cell)]
            path = inside(folder, file_name(f"samples_{cell.task}_{run.date_id}.jsonl"))
            written.append(write_text("\n".join(lines) + "\n", path))
        written.append(
            write_json(_lm_eval_results(run, model, cells), inside(folder, file_name(f"results_{run.date_id}.json")))
        )
    return written, []


def _lm_eval_results(run: RunResults, model: str, cells: list[Cell]) -> dict:
    results, configs, higher = {}, {}, {}
    for cell in cells:
        metrics = _metrics(cell)
        results[cell.task] = {
            "name": cell.task,
            "alias": cell.task,
            "sample_len": int(cell.summary["problems"]),
            **{f"{name},none": value for name, (value, _) in metrics.items()},
            "exact_match_stderr,none": accuracy_stderr(cell.samples),
        }
        higher[cell.task] = {name: better for name, (_, better) in metrics.items()}
        benchmark = _hub_benchmark(run, cell.dataset)
        source = run.source(cell.dataset)
        configs[cell.task] = {
            "task": cell.task,
            "tag": ["e1"],
            "dataset_path": benchmark.hub_id if benchmark else source.removeprefix("file "),
            "dataset_name": benchmark.config if benchmark else None,
            "test_split": benchmark.split if benchmark else None,
            "output_type": "generate_until",
            "repeats": int(cell.summary["samples_per_problem"]),
            "num_fewshot": 0,
            "generation_kwargs": run.generation_kwargs(cell),
            "metadata": {
                "version": _version(cell.dataset),
                "e1_source": source,
                "e1_fingerprint": (run.config.get(FINGERPRINTS) or {}).get(cell.dataset),
            },
        }
    tasks = [cell.task for cell in cells]
    return {
        "results": results,
        "group_subtasks": {task: [] for task in tasks},
        "configs": configs,
        "versions": {cell.task: _version(cell.dataset) for cell in cells},
        "n-shot": {task: 0 for task in tasks},
        "higher_is_better": higher,
        "n-samples": {
            c.task: {"original": int(c.summary["problems"]), "effective": int(c.summary["problems"])} for c in cells
        },
        "config": {
            "model": "e1",
            "model_args": f"pretrained={model}",
            "batch_size": str(run.config.get("batch_size")),
            "random_seed": (run.config.get("sampling") or {}).get("seed"),
            "gen_kwargs": None,
        },
        "date": _timestamp(run.date),
        "model_name": model,
        "model_name_sanitized": model_folder(model),
        "system_instruction": (run.config.get("prompt") or {}).get("system"),
        "e1_version": __version__,
    }


def _lm_eval_docs(run: RunResults, cell: Cell):
    """One lm-eval sample record per problem: its n outputs are the repeats of one request."""
    kwargs = run.generation_kwargs(cell)
    for doc_id, problem_id, rows in cell.problems():
        records = rows.to_dict(orient="records")
        prompt, target = first_prompt(rows), str(records[0]["gold"])
        doc = {
            "id": problem_id,
            "dataset": cell.dataset,
            "prompt": prompt,
            "answer": target,
            "e1": measured(cell, records),
        }
        outputs = [output_text(r, _end_marker(run)) for r in records]
        yield {
            "doc_id": doc_id,
            "doc": doc,
            "target": target,
            "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": kwargs}},
            "resps": [outputs],
            "filtered_resps": [[text(r["extracted_answer"]) for r in records]],
            "filter": "none",
            "metrics": ["exact_match", "think_tokens", "solve_tokens", "forced_rate"],
            "doc_hash": sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False)),
            "prompt_hash": sha256(prompt),
            "target_hash": sha256(target),
            **_problem_metrics(rows),
        }


def _problem_metrics(rows) -> dict[str, float]:
    """A problem's per-sample scores averaged over its samples (lm-eval's extra keys are floats)."""
    return {
        "exact_match": float(rows["correct"].mean()),
        "think_tokens": float(rows["think_tokens"].mean()),
        "solve_tokens": float(rows["solve_tokens"].mean()),
        "forced_rate": float(rows["forced"].astype(bool).mean()),
    }


def measured(cell: Cell, records: list[dict]) -> dict:
    """What e1 measured of a problem's samples, beside the format's own fields: the cell (mode, t, s)
    and, per sample in ``resps`` order, its index, thinking and solution tokens, whether e1 forced the
    end of thinking, how thinking ended (``think_end``, "" where unknown), and whether it was right."""
    per_sample = {
        "sample_index": int,
        "think_tokens": int,
        "solve_tokens": int,
        "forced": bool,
        "think_end": text,
        "correct": bool,
    }
    return {
        "mode": cell.mode,
        "think_budget": cell.think,
        "solve_budget": cell.solve,
        **{name: [kind(r.get(name)) for r in records] for name, kind in per_sample.items()},
    }


def _timestamp(date: str) -> float:
    from datetime import datetime, timezone

    return datetime.fromisoformat(date).replace(tzinfo=timezone.utc).timestamp()


# ---- lighteval -------------------------------------------------------------------------------


def lighteval(run: RunResults, out: Path) -> tuple[list[Path], list[str]]:
    written = []
    for model in run.models:
        cells = run.of(model)
        folder = inside(out, "details", *_model_folders(model), file_name(run.date_id))
        for cell in cells:
            path = inside(folder, file_name(f"details_{cell.task}|0_{run.date_id}.parquet"))
            written.append(_details_parquet(run, cell, path))
        written.append(
            write_json(
                _lighteval_results(run, model, cells),
                inside(out, "results", *_model_folders(model), file_name(f"results_{run.date_id}.json")),
            )
        )
    return written, []


def _model_folders(model: str) -> list[str]:
    """lighteval's folders for a model: one per part of its name (``org/name`` -> ``org``, ``name``;
    an absolute path's leading '/' and '.' parts dropped, any other part as a safe file name)."""
    return [file_name(part) for part in model.strip("/").split("/") if part not in ("", ".")] or [file_name(model)]


def _details_parquet(run: RunResults, cell: Cell, path: Path) -> Path:
    """The cell's details as lighteval saves them: a ``datasets.Dataset`` of (doc, metric, model_response)."""
    from datasets import Dataset

    rows = []
    for _, problem_id, samples in cell.problems():
        records = samples.to_dict(orient="records")
        prompt = first_prompt(samples)
        doc = {
            "query": prompt,
            "choices": [str(records[0]["gold"])],
            "gold_index": 0,
            "instruction": None,
            "images": None,
            "specific": {"dataset": cell.dataset, "problem_id": problem_id, **measured(cell, records)},
            "unconditioned_query": None,
            "original_query": None,
            "id": problem_id,
            "task_name": f"{cell.task}|0",
            "fewshot_samples": [],
            "sampling_methods": [],
            "fewshot_sorting_class": None,
            "generation_size": run.max_new_tokens(cell),
            "stop_sequences": None,
            "use_logits": False,
            "num_samples": len(records),
            "generation_grammar": None,
        }
        response = {
            "input": prompt,
            "input_tokens": [],
            "text": [output_text(r, _end_marker(run)) for r in records],
            "output_tokens": [],
            "text_post_processed": [text(r["extracted_answer"]) for r in records],
            "reasonings": [text(r["think_text"]) for r in records],
            "logprobs": [],
            "argmax_logits_eq_gold": [],
            "logits": None,
            "unconditioned_logprobs": None,
            "truncated_tokens_count": 0,
            "padded_tokens_count": 0,
        }
        rows.append({"doc": doc, "model_response": response, "metric": _problem_metrics(samples)})
    dataset = Dataset.from_list(rows)
    dataset = dataset.select_columns(sorted(dataset.column_names))  # as lighteval orders them
    return atomic_write(path, lambda tmp: _quietly(lambda: dataset.to_parquet(str(tmp))))


def _quietly(write) -> None:
    """``write()`` without datasets' progress bar (one line of e1's own per file says what was written)."""
    from datasets.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        write()
    finally:
        if shown:
            logging.enable_progress_bar()


def _lighteval_results(run: RunResults, model: str, cells: list[Cell]) -> dict:
    results = {}
    for cell in cells:
        metrics = {name: value for name, (value, _) in _metrics(cell).items()}
        results[f"{cell.task}|0"] = {**metrics, "exact_match_stderr": accuracy_stderr(cell.samples)}
    names = sorted({name for values in results.values() for name in values})
    results["all"] = {
        name: sum(v[name] for v in results.values() if name in v) / sum(1 for v in results.values() if name in v)
        for name in names
    }
    return {
        "config_general": {
            "model_name": model,
            "lighteval_sha": None,
            "e1_version": __version__,
            "start_time": _timestamp(run.date),
            "generation_parameters": _generation_parameters(run, cells),
        },
        "results": results,
        "versions": {f"{cell.task}|0": _version(cell.dataset) for cell in cells},
        "config_tasks": {
            f"{cell.task}|0": {
                "name": cell.task,
                "generation_size": run.max_new_tokens(cell),
                **run.generation_kwargs(cell),
            }
            for cell in cells
        },
        "summary_tasks": {
            f"{cell.task}|0": {
                "hashes": {},
                "truncated": 0,
                "non_truncated": int(cell.summary["problems"]),
                "padded": 0,
                "non_padded": int(cell.summary["problems"]),
            }
            for cell in cells
        },
        "summary_general": {
            "hashes": {},
            "truncated": 0,
            "non_truncated": sum(int(c.summary["problems"]) for c in cells),
            "padded": 0,
            "non_padded": sum(int(c.summary["problems"]) for c in cells),
        },
    }


def _generation_parameters(run: RunResults, cells: list[Cell]) -> dict:
    """The run's sampling as lighteval names it, with the most tokens any of its cells may write
    (``max_new_tokens``), not the engine's ``max_tokens`` (it bounds only a mode with no budget)."""
    sampling = {k: v for k, v in (run.config.get("sampling") or {}).items() if k != "max_tokens"}
    return {**sampling, "max_new_tokens": max(run.max_new_tokens(cell) for cell in cells)}
