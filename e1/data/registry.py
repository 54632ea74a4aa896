"""The benchmark registry: one frozen :class:`Benchmark` per dataset, registered by its family module.

A family module (``e1/data/aime.py``, ...) only declares data::

    register(Benchmark(name="math500", hub_id="HuggingFaceH4/MATH-500", split="test",
                       description="MATH-500 ...", expected_rows=500, fields=Fields(id="unique_id")))

and the rest of e1 looks benchmarks up by name:

    >>> import e1.data  # registers the built-in families
    >>> get_benchmark("math500").hub_id
    'HuggingFaceH4/MATH-500'

A benchmark turns one source record into canonical values with ``to_row`` (default
:func:`math_row`: problem and answer). Code datasets pass their own ``to_row`` that also
returns their ``extra_columns`` (the answer is then the tests as JSON, see ``e1/data/code.py``).

Most benchmarks are read with ``datasets.load_dataset(hub_id, config, split)``. One whose
source needs more (hub files read directly, several configs, a date window, a Python
package) gives a ``load`` function instead; its ``options`` are the settings that function
takes (``e1 data prepare livecodebench --release v6``), each with a default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from e1.data import schema
from e1.errors import DataError, did_you_mean
from e1.names import Name, Registry

# a dataset's name: results are keyed by it and its prepared file is named by it (matched whole: e1.names)
DATASET_NAME = Name(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", "use letters, digits, '.', '_' or '-', a letter or digit first"
)


class RowError(Exception):
    """A source record without a usable value in ``field``; the caller adds file and row."""

    def __init__(self, field: str, problem: str, blank: bool = False):
        super().__init__(f"field '{field}' {problem}")
        self.field = field
        self.blank = blank  # the field exists but holds nothing (hub rows like this are skipped)


@dataclass(frozen=True)
class Fields:
    """Which source fields hold the problem, the answer and (when there is one) a stable id."""

    problem: str = "problem"
    answer: str = "answer"
    id: str | None = None  # None: ids are f"{name}-{row_index}"


def field_text(record: Mapping[str, Any], field: str, render: Callable[[Any], str] = schema.render_answer) -> str:
    """The rendered, non-empty value of ``record[field]``, else :class:`RowError`."""
    if field not in record:
        raise RowError(field, "is missing")
    text = render(record[field])
    if not text:
        raise RowError(field, "is empty", blank=True)
    return text


def math_row(record: Mapping[str, Any], fields: Fields) -> dict[str, str]:
    """Default ``to_row``: the problem and the answer (floats and lists rendered as text)."""
    return {schema.PROBLEM: field_text(record, fields.problem), schema.ANSWER: field_text(record, fields.answer)}


# record -> {problem, answer, *extra_columns}, and optionally id (else taken from Fields.id)
RowMapper = Callable[[Mapping[str, Any], Fields], Mapping[str, Any]]
Loader = Callable[["Benchmark", Mapping[str, str]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Option:
    """A setting of a benchmark's ``load`` function, e.g. LiveCodeBench's release."""

    name: str  # as the loader sees it; the CLI spells it --name-with-dashes
    default: str
    help: str


@dataclass(frozen=True)
class Benchmark:
    """One dataset: where it lives on the hub, how its fields map, and which reward scores it."""

    name: str
    hub_id: str | None  # None only for local files prepared with --from
    split: str | None
    description: str
    expected_rows: int | None = None
    config: str | None = None
    fields: Fields = Fields()
    task: str = "math"
    task_version: int = 1
    extra_columns: tuple[str, ...] = ()  # columns ``to_row`` returns beyond problem and answer
    to_row: RowMapper = math_row
    load: Loader | None = None  # reads the source records; None: datasets.load_dataset(hub_id, config, split)
    options: tuple[Option, ...] = ()  # settings ``load`` takes, with defaults
    prompt: str | None = None  # prompt style in e1/data/prompts.py; None: the task's own
    origin: str | None = None  # where the data comes from when it is not the hub (shown instead of hub_id)

    def __post_init__(self) -> None:
        if not DATASET_NAME.matches(self.name):
            raise DataError(f"bad dataset name '{self.name}'", hint="use letters, digits, '.', '_' or '-'")
        if self.task_version < 1:
            raise DataError(f"{self.name}: task_version must be >= 1, got {self.task_version}")
        clash = set(self.extra_columns) & set(schema.COLUMNS)
        if clash:
            raise DataError(f"{self.name}: extra_columns repeat canonical columns {sorted(clash)}")
        if self.options and self.load is None:
            raise DataError(f"{self.name}: options need a load function that takes them")

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of this benchmark's prepared parquet, in order."""
        return schema.COLUMNS + self.extra_columns

    @property
    def source(self) -> str:
        """Where the data comes from, for messages and tables: ``hub_id`` plus the config if any."""
        if self.hub_id is None:
            return self.origin or "local file"
        return f"{self.hub_id} ({self.config})" if self.config else self.hub_id

    @property
    def prompt_style(self) -> str:
        return self.prompt or self.task

    def resolve_options(self, given: Mapping[str, str] | None = None) -> dict[str, str]:
        """The defaults of ``options`` updated with ``given``; a name it does not take is a DataError."""
        values = {option.name: option.default for option in self.options}
        unknown = sorted(set(given or {}) - set(values))
        if unknown:
            flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
            takes = ", ".join("--" + name.replace("_", "-") for name in values) or "no options"
            raise DataError(f"{self.name} does not take {flags}", hint=f"{self.name} takes {takes}")
        return values | dict(given or {})


_REGISTRY: Registry = Registry("benchmark", DataError, DATASET_NAME)


def register(benchmark: Benchmark) -> Benchmark:
    """Add ``benchmark`` to the registry and return it; a name another benchmark holds is refused."""
    _REGISTRY[benchmark.name] = benchmark
    return benchmark


def benchmark_names() -> list[str]:
    """Registered names, sorted."""
    return sorted(_REGISTRY)


def benchmarks() -> list[Benchmark]:
    """Registered benchmarks, sorted by name."""
    return [_REGISTRY[name] for name in benchmark_names()]


def is_registered(name: str) -> bool:
    return name in _REGISTRY


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark called ``name``; a typo gets a DataError naming the closest ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise DataError(
            f"unknown dataset '{name}'", hint=did_you_mean(name, benchmark_names(), "known datasets:")
        ) from None
