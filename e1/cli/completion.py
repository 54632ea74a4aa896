"""Tab completion of option values: each closed set offered from the registry that defines it.

    BackendOpt = Annotated[str, typer.Option("--backend", autocompletion=complete_backends)]

``e1 eval --backend <TAB>`` offers auto, hf, vllm, openai, gemini, anthropic; ``--modes elastic,tr<TAB>``
completes the last item of a comma-separated list (``elastic,truncate``); ``--datasets <TAB>`` offers
the registered benchmarks and the data files (and folders) under the text typed so far.

The values are not checked here: the library's gate for each set (``check_backend``, ``Mode.parse``,
``backend_name``, ...) refuses a bad one in one line with the closest names, wherever the value came
from (a flag, a config file, Python). Every lookup is a light import, so completion answers at once
(no torch, transformers or vLLM: tests/test_cli.py checks it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

MAX_FILES = 200  # a folder of thousands of files still answers at once


def mode_names() -> tuple[str, ...]:
    """The decoding modes' names: the one place the CLI reads them."""
    from e1.engine import mode_names as names

    return names()


def backend_names() -> tuple[str, ...]:
    from e1.engine import BACKEND_NAMES

    return BACKEND_NAMES


def train_backend_names() -> tuple[str, ...]:
    from e1.engine import LOCAL_BACKENDS

    return LOCAL_BACKENDS


def dtype_names() -> tuple[str, ...]:
    from e1.engine import DTYPES

    return DTYPES


def train_dtype_names() -> tuple[str, ...]:
    from e1.grpo import TRAIN_DTYPES as DTYPES

    return DTYPES


def sandbox_names() -> tuple[str, ...]:
    from e1.sandbox import BACKEND_NAMES

    return BACKEND_NAMES


def algo_names() -> tuple[str, ...]:
    from e1.grpo import ALGOS

    return ALGOS


def export_formats() -> tuple[str, ...]:
    from e1.report import FORMATS

    return FORMATS


def _starting(values: Iterable[str], incomplete: str) -> list[str]:
    return [value for value in values if value.startswith(incomplete)]


def one_of(values: Callable[[], Iterable[str]]) -> Callable[[str], list[str]]:
    """A completion callback for an option that takes one of ``values()``.

    >>> one_of(lambda: ("hf", "vllm", "openai"))("v")
    ['vllm']
    """

    def complete(incomplete: str) -> list[str]:
        return _starting(values(), incomplete)

    return complete


def comma_list(values: Callable[[str], Iterable[str]]) -> Callable[[str], list[str]]:
    """A completion callback for a comma-separated list: completes the item after the last comma,
    keeping the ones before it (the shell replaces the whole word). ``values(item)`` offers what the
    item may be.

    >>> comma_list(lambda item: _starting(("elastic", "truncate", "soft"), item))("elastic,t")
    ['elastic,truncate']
    """

    def complete(incomplete: str) -> list[str]:
        done, _, item = incomplete.rpartition(",")
        prefix = done + "," if done else ""
        return [prefix + value for value in values(item)]

    return complete


def data_files(incomplete: str) -> list[str]:
    """The data files e1 reads (.parquet, .jsonl, .json, .csv) and the folders (with a trailing
    slash) whose paths start with ``incomplete``; hidden ones only when asked for with a dot."""
    from e1.data import DATA_SUFFIXES

    folder, slash, start = incomplete.rpartition("/")
    found = []
    try:
        with os.scandir(os.path.expanduser(folder + slash) if slash else ".") as entries:
            for entry in entries:
                if not entry.name.startswith(start) or (entry.name.startswith(".") and not start.startswith(".")):
                    continue
                path = folder + slash + entry.name  # as typed: relative, absolute or from ~
                if entry.is_dir():
                    found.append(path + "/")
                elif entry.name.endswith(DATA_SUFFIXES):
                    found.append(path)
                if len(found) >= MAX_FILES:
                    break
    except OSError:  # no such folder, or not readable: nothing to offer
        return []
    return sorted(found)


def dataset_names(incomplete: str) -> list[str]:
    """Registered benchmarks starting with ``incomplete``, then data files and folders."""
    from e1.data import benchmark_names

    return _starting(benchmark_names(), incomplete) + data_files(incomplete)


complete_backends = one_of(backend_names)
complete_train_backends = one_of(train_backend_names)
complete_dtypes = one_of(dtype_names)
complete_train_dtypes = one_of(train_dtype_names)
complete_sandboxes = one_of(sandbox_names)
complete_algos = one_of(algo_names)
complete_formats = one_of(export_formats)
complete_mode = one_of(mode_names)
complete_modes = comma_list(lambda item: _starting(mode_names(), item))
complete_datasets = comma_list(dataset_names)
complete_dataset = dataset_names  # e1 train --data: one name or file
