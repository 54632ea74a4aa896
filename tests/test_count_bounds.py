"""A stored row holds no more thinking or solution tokens than its mode lets e1 decode at its budgets
(e1.store.results.check_counts, the samples gate; each mode's bound is its own: Mode.count_bounds).

Bounds by hand, from each mode's module and RowState's counting: elastic and budget-forcing cut thinking
at t (a grace window's tokens past it), soft at floor(ceiling * t) (+ grace), each solution stops at s;
nothinking thinks 0 (its prompt closed thinking) and solves at most t + s;
truncate bounds only t + s over the whole output and none nothing, so neither count is theirs to bound.
A row whose counts an API counted for itself (think_end null) is not e1's count, and is not bounded."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.engine import Mode  # noqa: F401  the modes load (as in every command that reads samples): the gate's bounds
from e1.errors import ResultsError
from e1.store import SampleStore
from tests.test_view import sample_rows

MODES = st.sampled_from(
    [
        "elastic",
        "elastic:grace=8",
        "budget-forcing",
        "budget-forcing:wait=2",
        "soft",
        "soft:ceiling=2",
        "truncate",
        "none",
        "early-exit",
        "nothinking",
    ]
)


def _bound(mode: str, t: int, s: int) -> tuple[int | None, int | None]:
    """The most (think, solve) tokens ``mode`` writes at (t, s), derived by hand (see the module's docstring)."""
    name, _, options = mode.partition(":")
    if name in ("truncate", "none"):
        return None, None
    if name == "nothinking":  # the prompt closed thinking: no thinking, the whole t + s for the solution
        return 0, t + s
    grace = 8 if options == "grace=8" else 0
    think = math.floor((2.0 if options == "ceiling=2" else 1.5) * t) if name == "soft" else t
    return think + grace, s


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    mode=MODES,
    t=st.integers(0, 40),
    s=st.integers(1, 40),
    extra_think=st.integers(-5, 20),
    extra_solve=st.integers(-5, 20),
    counted=st.booleans(),
    index=st.integers(0, 15),
)
def test_a_row_over_its_modes_bounds_is_refused_naming_the_column_and_the_row(
    tmp_path_factory, mode, t, s, extra_think, extra_solve, counted, index
):
    rows = sample_rows()  # within every bound: elastic thinks t, solves at most s; truncate writes nothing more
    row = rows[index]
    most_think, most_solve = _bound(mode, t, s)
    think = max(0, (most_think if most_think is not None else t) + extra_think)
    solve = max(0, (most_solve if most_solve is not None else s) + extra_solve)
    row.update(mode=mode, think_budget=t, solve_budget=s, think_tokens=think, solve_tokens=solve)
    row["think_end"] = "budget" if counted else None
    out = tmp_path_factory.mktemp("bounds")
    store = SampleStore(out)
    over = [
        column
        for column, value, most in (("think_tokens", think, most_think), ("solve_tokens", solve, most_solve))
        if counted and most is not None and value > most
    ]
    if not over:
        store.append(rows)
        assert len(store.read()) == 16
        return
    with pytest.raises(ResultsError) as refused:
        store.append(rows)
    line = refused.value.message
    assert "\n" not in line and over[0] in line and f"problem {row['problem_id']}, sample {row['sample_index']}" in line
    assert not store.parts()  # refused before anything was written


def test_a_stored_row_edited_over_its_bound_is_refused_when_read(tmp_path):
    store = SampleStore(tmp_path)
    store.append(sample_rows())
    store.compact()
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "samples.parquet")
    elastic = frame.index[frame["mode"] == "elastic"][0]
    frame.loc[elastic, "think_tokens"] = frame.loc[elastic, "think_budget"] + 1
    frame.to_parquet(tmp_path / "samples.parquet", index=False)
    with pytest.raises(ResultsError, match="think_tokens .* over the .* that mode elastic writes"):
        SampleStore(tmp_path).read()
