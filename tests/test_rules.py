"""Each rule of :mod:`e1.engine.rules` is one function for both kinds of executor: on Python numbers (a host
``RowState``) and on tensors (runner V2's step), it decides alike, row by row, over generated counts; the id
rules (marker matching, the forced queue's walk) also as their plain statement says. (The executors themselves
are compared in tests/test_vllm_v2_processor.py and tests/test_forced_end_api.py.)"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.engine import rules
from e1.engine.modes import Mode
from e1.engine.vllm.v2_slots import match_rows, pad

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
    assert rules.partial_end(rules.SCALAR.matches(tail, rules.marker_patterns(ids.end, ids.start))) == partial
    # the rest of the marker, neither exit text nor line break: "<think>" (not opened), "nk>", then the answer
    assert rules.forced_end(ids, opened, partial) == (() if opened else ids.start) + ids.end[partial:] + ids.after
    assert rules.forced_end(ids, opened) == (() if opened else ids.start) + ids.exit + ids.lines + ids.end + ids.after


IDS = st.integers(1, 3)  # few ids: markers overlap themselves and the tails often
MARKER = st.lists(IDS, min_size=1, max_size=4).map(tuple)


def brute_marks(tail: tuple, end: tuple, start: tuple) -> tuple[bool, bool, int]:
    """Marker matching stated plainly: the tail ends with the end marker, with the start marker, and the longest
    k < len(end) with tail[-k:] == end[:k] (0: none)."""
    ends = lambda ids: 0 < len(ids) <= len(tail) and tail[len(tail) - len(ids) :] == ids  # noqa: E731
    return ends(end), ends(start), max((k for k in range(1, len(end)) if ends(end[:k])), default=0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(MARKER, MARKER | st.just(()), st.lists(IDS, max_size=7).map(tuple)), min_size=1, max_size=8))
def test_marker_matching_is_one_rule_on_numbers_and_on_tensors(rows_):
    """Invariant: ``marker_hits`` and ``partial_end`` of ``ops.matches`` against ``marker_patterns`` are the plain
    statement, on a host row's tuples and on runner V2's tables (each row its own markers, padded to the widest,
    ANY left of a short history), row by row."""
    width = max(max(len(end), len(start)) for end, start, _ in rows_)
    marks = torch.tensor([match_rows(end, start, width) for end, start, _ in rows_])  # [R, width + 1, width]
    ids = torch.tensor(
        [pad(list(tail[max(0, len(tail) - width) :]), width, rules.ANY, right=True) for *_, tail in rows_]
    )
    hits = TORCH.matches(ids, marks)
    (end_hit, start_hit), partial = rules.marker_hits(hits), rules.partial_end(hits, TORCH)
    for k, (end, start, tail) in enumerate(rows_):
        want = brute_marks(tail, end, start)
        hits = rules.SCALAR.matches(tail, rules.marker_patterns(end, start))
        assert (*rules.marker_hits(hits), rules.partial_end(hits)) == want, (end, start, tail)
        assert (bool(end_hit[k]), bool(start_hit[k]), int(partial[k] if torch.is_tensor(partial) else 0)) == want


PART = st.lists(st.integers(10, 99), max_size=3).map(tuple)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(PART, PART, PART, MARKER, PART, st.booleans(), st.data()), min_size=1, max_size=8))
def test_the_forced_queue_is_one_pointer_walk_on_numbers_and_on_tensors(rows_):
    """Invariant: a forced end's queue (``end_queue``'s pointers, moved by ``queue_jump`` after each pop) forces,
    on a host row and on runner V2's [R] pointers, the plain statement: the start marker unless thinking opened,
    then the rest of a partly written end marker (``partial`` ids of it written), else the exit text, the line
    break and the marker, then what follows it."""
    parts, opened, partial = [], [], []
    for start, exit_ids, lines, end, after, is_open, data in rows_:
        parts.append(rules.EndParts(start, exit_ids, lines, end, after))
        opened.append(is_open)
        partial.append(data.draw(st.integers(0, len(end) - 1)))
    wants = [
        (() if is_open else p.start) + (p.end[k:] if k else p.exit + p.lines + p.end) + p.after
        for p, is_open, k in zip(parts, opened, partial)
    ]
    assert [rules.forced_end(p, o, k) for p, o, k in zip(parts, opened, partial)] == wants  # numbers
    templates = [p.start + p.exit + p.lines + p.end + p.after for p in parts]
    template = torch.tensor([pad(list(t), 20, 0, right=False) for t in templates])  # [R, T]
    ls, at_end, stop = (torch.tensor(column) for column in zip(*(p.spans for p in parts)))
    qp, qj, qt, qe = rules.end_queue(torch.tensor(opened), torch.tensor(partial), ls, at_end, stop, TORCH)
    qp = rules.queue_jump(qp, qj, qt, TORCH)  # as runner V2's step: a new queue, then one pop a step
    forced = [[] for _ in parts]
    for _ in range(template.shape[1]):  # each pop moves a pointer on: a queue is at most its template
        popping = qp < qe
        for row in popping.nonzero().flatten().tolist():
            forced[row].append(int(template[row, qp[row]]))
        qp = rules.queue_jump(qp + popping, qj, qt, TORCH)
    assert not bool((qp < qe).any()) and [tuple(f) for f in forced] == wants  # tensors
