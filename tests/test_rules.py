"""Each rule of :mod:`e1.engine.rules` is one function for both kinds of executor: on Python numbers (a host
``RowState``) and on tensors (runner V2's step), it decides alike, row by row, over generated counts. (The
executors themselves are compared in tests/test_vllm_v2_processor.py and tests/test_forced_end_api.py.)"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.engine import rules
from e1.engine.modes import Mode

TORCH = rules.torch_ops()
COUNT = st.integers(0, 40)


def rows(values):
    """The generated rows as one tensor per argument (a batch), and as the rows themselves."""
    return [torch.tensor(column) for column in zip(*values)], values


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(COUNT, COUNT, st.integers(0, 8), st.booleans(), COUNT, COUNT), min_size=1, max_size=16))
def test_the_count_rules_decide_alike_on_numbers_and_tensors(values):
    (think, limit, grace, sentence, waits, solve), batch = rows(values)
    cut = rules.at_cut(think, limit)
    due = rules.end_due(cut, think, limit + grace, sentence)
    wait = rules.wait_replaces(sentence, waits, cut, think, limit + grace)
    cap = rules.over_cap(think, solve, limit)
    for k, (t, lim, g, s, w, sol) in enumerate(batch):
        c = rules.at_cut(t, lim)
        assert bool(cut[k]) == c and bool(due[k]) == rules.end_due(c, t, lim + g, s)
        assert bool(wait[k]) == rules.wait_replaces(s, w, c, t, lim + g) and bool(cap[k]) == rules.over_cap(t, sol, lim)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(COUNT, st.booleans()), min_size=1, max_size=16),
    st.integers(0, 30),
    st.sampled_from([0.0, 0.3, 0.8, 1.0]),
    st.sampled_from([0.0, 4.0, 8.0]),
    st.sampled_from(["linear", "exp"]),
)
def test_soft_bias_is_the_same_float_on_numbers_and_tensors(values, t, start, strength, shape):
    mode = Mode.parse(f"soft:start={start}:strength={strength}:shape={shape}")
    begin, strength, rate = mode.bias_curve(t)
    (think, free), batch = rows(values)
    curve = [torch.full_like(think, x, dtype=torch.float64) for x in (begin, t - begin, strength, rate)]
    scale = torch.full_like(curve[0], math.expm1(rate) if rate else 1.0)
    bias = rules.end_bias(free, think.to(torch.float64), *curve, scale, ops=TORCH)
    host = torch.tensor(
        [mode.end_bias(count, t) if row_free else 0.0 for count, row_free in batch], dtype=torch.float64
    )
    # linear: the very float64; exp: torch's expm1 and libm's may differ in the last float64 bit (found here,
    # as on main), never as the float32 the logits get (V1's table holds float32 too)
    same = torch.equal(bias, host) if rate == 0 else torch.equal(bias.float(), host.float())
    assert same, (bias, host)


@given(st.sampled_from(["elastic", "budget-forcing", "budget-forcing:answer=inline"]), st.booleans(), st.data())
def test_the_forced_end_is_one_cut_of_ids_and_of_texts(name, opened, data):
    """The same cut of ids and of texts: a text the tokenizer spells one character per id gives its ids' text."""
    mode = Mode.parse(name)
    text = rules.end_parts(mode, "<think>", data.draw(st.text("ab .", max_size=5)), "\n", "</think>", "Final Answer:")
    ids = rules.EndParts(*(tuple(map(ord, part)) for part in text))
    assert "".join(map(chr, rules.forced_end(ids, opened))) == rules.forced_end(text, opened)
    partial = data.draw(st.integers(1, len(text.end) - 1))  # a proper prefix of "</think>" written already
    tail = tuple(map(ord, "x" + text.end[:partial]))
    assert rules.partial_end(tail, ids.end) == partial
    # the rest of the marker, neither exit text nor line break: "<think>" (not opened), "nk>", then the answer
    assert rules.forced_end(ids, opened, partial) == (() if opened else ids.start) + ids.end[partial:] + ids.after
    assert rules.forced_end(ids, opened) == (() if opened else ids.start) + ids.exit + ids.lines + ids.end + ids.after
