"""Datasets for e1: a registry of benchmarks, one canonical problem table, and preparation.

    >>> from e1.data import benchmark_names, get_benchmark
    >>> benchmark_names()  # doctest: +NORMALIZE_WHITESPACE
    ['aime', 'aime25', 'amc', 'codeforces', 'deepcoder', 'deepscaler', 'digits', 'digits-train', 'gpqa-diamond',
     'gsm8k', 'humaneval', 'humanevalplus', 'livecodebench', 'math500', 'minerva', 'mmlu-pro', 'olympiad_bench',
     'taco']
    >>> get_benchmark("amc").hub_id
    'AI-MO/aimo-validation-amc'
    >>> from e1.data import load_dataset
    >>> load_dataset("aime").head()   # doctest: +SKIP

Each benchmark family registers itself in its own module (``aime.py``, ``livecodebench.py``, ...);
adding one is a new module plus an import line below. Code datasets (task ``code``) store
their tests as JSON in ``answer`` (``e1/data/code.py``). Importing this package is light:
pandas and datasets load only when a dataset is prepared or read.
"""

from e1.data.digits_task import ALPHABET, DigitSumTask
from e1.data.fields import carried_fields
from e1.data.identity import fingerprint, load_datasets
from e1.data.include import (
    import_plugin,
    include_fingerprints,
    load_includes,
    plugin_source,
    record_includes,
    recorded_code,
)
from e1.data.json_values import lone_surrogate
from e1.data.preparation import (
    Prepared,
    dataset_names,
    default_data_dir,
    load_dataset,
    prepare,
    prepare_benchmark,
    prepare_file,
    prepared_names,
    prepared_path,
    prepared_source,
)
from e1.data.prompts import PromptOptions, build_prompt
from e1.data.records import DATA_SUFFIXES, read_parquet_table
from e1.data.registry import (
    Benchmark,
    Fields,
    Option,
    benchmark_names,
    benchmarks,
    get_benchmark,
    is_registered,
    register,
)
from e1.data.schema import DATASET, ID, PROBLEM, THINK_END, THINK_START, CompletionText

# Benchmark families: importing a module registers its benchmarks.
from e1.data import aime, amc, deepscaler, math500, minerva, olympiad_bench  # noqa: E402,F401  isort: skip
from e1.data import codeforces, deepcoder, humaneval, humanevalplus, livecodebench, taco  # noqa: E402,F401  isort: skip
from e1.data import gpqa, gsm8k, mmlu_pro  # noqa: E402,F401  isort: skip
from e1.data import digits  # noqa: E402,F401  isort: skip

__all__ = [
    "lone_surrogate",
    "DATA_SUFFIXES",
    "ALPHABET",
    "DATASET",
    "ID",
    "PROBLEM",
    "THINK_END",
    "THINK_START",
    "Benchmark",
    "CompletionText",
    "DigitSumTask",
    "Fields",
    "Option",
    "Prepared",
    "PromptOptions",
    "benchmark_names",
    "benchmarks",
    "build_prompt",
    "carried_fields",
    "dataset_names",
    "default_data_dir",
    "fingerprint",
    "get_benchmark",
    "is_registered",
    "load_dataset",
    "load_datasets",
    "import_plugin",
    "include_fingerprints",
    "load_includes",
    "plugin_source",
    "prepare",
    "prepare_benchmark",
    "prepare_file",
    "prepared_names",
    "prepared_path",
    "prepared_source",
    "read_parquet_table",
    "record_includes",
    "recorded_code",
    "register",
]
