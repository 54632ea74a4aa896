"""Every name gate matches the whole name (e1.names): a name with a newline, a space or a control
character at either end is refused wherever a name becomes a column, a path, a registry key, a
field or a task; Python's ``$`` would let ``reward\\n`` through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.data import Benchmark
from e1.data.fields import extra_fields, row_task
from e1.data.registry import DATASET_NAME, RowError
from e1.engine.modes import MODE_NAME, Mode, register
from e1.errors import ConfigError, DataError, E1Error
from e1.names import NAME, Registry
from e1.store import SAMPLE_COLUMNS

# what may stick to a name's ends: Python's `$` matches before a final "\n"; the rest are lookalikes
EDGES = st.sampled_from(["\n", "\r\n", " ", "\t", "\r", "\x00", "\x0b", "\x0c", "\x1f", "\x85", "\u2028", "\xa0"])
names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,30}", fullmatch=True)


def decorated(name: str, edge: str, where: str) -> str:
    return {"end": name + edge, "start": edge + name, "both": edge + name + edge}[where]


@settings(max_examples=60, deadline=None)
@given(name=names, edge=EDGES, where=st.sampled_from(["end", "start", "both"]))
def test_no_gate_takes_a_name_with_anything_at_its_ends(name, edge, where):
    bad = decorated(name, edge, where)
    mode = name.lower().replace("_", "-")  # a mode's name: a lower-case word, dashes allowed
    lower = decorated(mode, edge, where)
    assert NAME.matches(name) and not NAME.matches(bad) and not DATASET_NAME.matches(bad)
    assert MODE_NAME.matches(mode) and not MODE_NAME.matches(lower)
    with pytest.raises(DataError, match="cannot be a column name|one of e1's own"):  # a file's field
        extra_fields([{bad: 1}], consumed=set(), source="p.jsonl")
    with pytest.raises(RowError):  # a row's task
        row_task({"task": bad}, "math")
    with pytest.raises(DataError, match="bad dataset name"):  # a benchmark (its prepared file's name)
        Benchmark(name=bad, hub_id="x/y", split="test", description="d")
    with pytest.raises(ConfigError, match="is not a name"):  # a registry's key
        Registry("prompt style")[bad] = str.upper
    with pytest.raises(ConfigError, match="is not a name"):  # a mode's name
        register(type("Odd", (Mode,), {"name": lower, "summary": "odd"}))


@pytest.mark.parametrize("column", ["reward", "solution_text", "problem_id", "mode"])
def test_e1_own_columns_with_a_final_newline_are_refused_not_carried(column):
    """The reported case: a field ``reward\\n`` passed and landed in samples.parquet as ``_6``."""
    assert column in SAMPLE_COLUMNS
    with pytest.raises(DataError) as info:
        extra_fields([{"problem": "p", column + "\n": 1}], consumed={"problem"}, source="p.jsonl")
    assert "\n" not in info.value.message and repr(column + "\n") in info.value.message


def test_the_mode_names_of_the_registry_are_names():
    """A mode registered under a name that is no lower-case word is one line, not a ValueError."""
    with pytest.raises(E1Error) as info:
        register(type("Odd", (Mode,), {"name": "odd\n", "summary": "odd"}))
    assert "'odd\\n'" in info.value.message


# characters str.isdigit takes that are no ASCII digit: int() refuses some (superscripts) and reads others
OTHER_DIGITS = st.characters(categories=["Nd", "No"]).filter(lambda c: c.isdigit() and not c.isascii())


@settings(max_examples=40, deadline=None)
@given(digit=OTHER_DIGITS, where=st.integers(0, 2))
def test_a_whole_number_is_ascii_digits_wherever_one_is_typed(digit, where):
    """``--k 1,²`` was a ValueError ("please report it"); ``cuda:²`` too: a whole number is 0-9 only."""
    from e1.engine.load_options import check_device
    from e1.eval.settings import parse_ks

    number = "16"[:where] + digit + "16"[where:]
    with pytest.raises(ConfigError, match="give whole numbers"):
        parse_ks(f"1,{number}")
    for kind in ("cpu", "cuda"):
        with pytest.raises(ConfigError, match="unknown device"):
            check_device(f"{kind}:{number}")
