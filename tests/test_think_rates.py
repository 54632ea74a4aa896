"""How often the model thought: every cell's four think rates, read from each sample's ``think_end`` by one
definition (:func:`e1.report.metrics.thinking_kinds`), on generated samples (odd ``think_end`` values
included) and on a real run of the tiny model whose prompts leave thinking open, closed or to the model."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine import THINK_ENDS, Mode, Sampling
from e1.report.metrics import THINK_RATES, summarize
from e1.report.ui import summary_table

RATES = list(THINK_RATES.values())
ODD_ENDS = [None, "", "OPEN", "prefilled ", "weird", "natural\n"]
TEXTS = [None, "", " ", "\n\n", "\u2028", "x", " 2 + 3 = 5.\n"]


def expected_kind(end, text) -> str:
    """The definition, restated per sample from docs/results.md."""
    if end in ("prefilled", "unopened"):
        return end
    if end not in THINK_ENDS:
        return "unknown"
    return "empty" if not (text or "").strip() else "thought"


def samples(rows) -> pd.DataFrame:
    frame = pd.DataFrame(
        [
            {
                "dataset": "d",
                "problem_id": f"p{i % 3}",
                "sample_index": i // 3,
                "mode": mode,
                "think_budget": 4,
                "solve_budget": 4,
                "think_tokens": 1,
                "solve_tokens": 1,
                "forced": end == "budget",
                "finish_reason": "stop",
                "extracted_answer": "1",
                "correct": True,
                "reward": 1.0,
                "tests_passed": math.nan,
                "think_end": end,
                "think_text": text,
            }
            for i, (mode, end, text) in enumerate(rows)
        ]
    )
    return frame.astype({"think_end": "string", "think_text": "string"})


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["elastic", "nothinking"]),
        st.sampled_from([*THINK_ENDS, *ODD_ENDS]),
        st.sampled_from(TEXTS),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(rows=ROWS)
def test_the_rates_are_shares_of_the_known_samples_and_sum_to_one(rows):
    summary = summarize(samples(rows)).set_index("mode")
    for mode, cell in summary.iterrows():
        kinds = [expected_kind(end, text) for m, end, text in rows if m == mode]
        known = [kind for kind in kinds if kind != "unknown"]
        for kind, column in THINK_RATES.items():
            value = cell[column]
            if not known:
                assert math.isnan(value)
            else:
                assert value == known.count(kind) / len(known) and 0 <= value <= 1
        if known:
            assert math.isclose(sum(cell[c] for c in RATES), 1.0)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.just("elastic"), st.sampled_from(THINK_ENDS), st.sampled_from(TEXTS)), min_size=1, max_size=12
    )
)
def test_samples_that_say_how_thinking_ended_never_give_nan(rows):
    summary = summarize(samples(rows))
    assert not summary[RATES].isna().any().any()


def columns_of(summary) -> list[str]:
    table = summary_table(summary.assign(model="m")).table()
    return [str(column.header) for column in table.columns]


def test_the_terminal_shows_a_rate_only_where_it_differs():
    thought = [("elastic", "natural", "x")] * 3
    same = summarize(samples(thought + [("nothinking", "natural", "y")] * 3))
    assert not {"thought", "empty", "prefilled", "unopened"} & set(columns_of(same))
    differs = summarize(samples(thought + [("nothinking", "prefilled", "")] * 3))
    shown = columns_of(differs)
    assert {"thought", "prefilled"} <= set(shown) and not {"empty", "unopened"} & set(shown)


def test_a_real_run_reports_how_often_the_tiny_model_thought(tiny_engine):
    """Prompts that leave thinking open (cut at t = 0: empty), closed (prefilled) and to the model (unopened
    unless the random model writes a marker): each sample's think_end, and the cell's rates from them."""
    from e1.data.prompts import build_prompt

    opened = build_prompt(tiny_engine.tokenizer, "What is 2 + 3?")
    assert opened.endswith("<think>\n")
    prompts = {"open": opened, "closed": opened + "\n</think>\n\n", "absent": opened.removesuffix("<think>\n")}
    greedy = Sampling(temperature=1.0, seed=1, max_tokens=24)
    markers = tiny_engine.markers
    rows = []
    for name, prompt in prompts.items():
        mode = Mode.parse("elastic") if name == "open" else Mode.parse("none")
        for c in tiny_engine.generate([prompt], Budget(0, 6), mode, greedy, n=4):
            if name == "absent":
                wrote = {markers.start_ids[-1], markers.end_ids[-1]} & set(c.token_ids)
                assert (c.think_end == "unopened") == (not wrote)
            else:
                assert c.think_end == {"open": "budget", "closed": "prefilled"}[name]
            rows.append((name, c.think_end, c.think_text))
    summary = summarize(samples(rows)).set_index("mode")
    assert summary.loc["open", "empty_think_rate"] == 1.0 and summary.loc["closed", "prefilled_rate"] == 1.0
    unopened = sum(end == "unopened" for name, end, _ in rows if name == "absent") / 4
    assert summary.loc["absent", "unopened_rate"] == unopened
