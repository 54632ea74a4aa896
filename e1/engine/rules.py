"""The budget rules, each written once, for every executor: a host row (:class:`~e1.engine.row_state.RowState`,
run by the transformers engine, vLLM's runner V1 processor, ``e1 serve`` and the API replay) calls them on Python
numbers, runner V2's device step (:func:`e1.engine.vllm.v2_processor.step`) on tensors over its slots, and the
API's two-call path (:mod:`e1.engine.api.plain`) on texts.

    due = end_due(at_cut(think, limit), think, grace_at, sentence_end)   # ints -> bool, or [R] tensors -> [R]

A rule uses only what Python numbers and tensors share: comparisons, ``&``, ``|``, arithmetic (never ``not``,
``and``, ``~``: they differ between the two). What they do not share (``where``, ``minimum``, ``expm1``, a
division that may be by zero, ``matches``) comes in an ``ops`` namespace: :data:`SCALAR`, or :func:`torch_ops`
for the device step. The forced end's texts are sequences, ids (tuples) or characters (str) alike.

Two rules are about ids rather than counts. Marker matching: the last ids written (the new one last) are
matched against one pattern table (:func:`marker_patterns`; ``ops.matches``: a bool per pattern, or an [R]
tensor each); :func:`marker_hits` reads the hits as whether they complete the end or start marker, and
:func:`partial_end` as how much of the end marker they end with. The forced queue: the end's template walked
by a pointer (:func:`end_queue`), one id per pop, jumping over what a partly written marker skips
(:func:`queue_jump`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

# in runner V2's pattern table (right-aligned, one row per pattern): any id (left of a shorter pattern), and no id
# (the last column of a pattern that matches nothing: an empty one)
ANY, NEVER = -1, -2


def ends_with_each(ids: tuple, patterns) -> tuple[bool, ...]:
    """Per pattern: whether ``ids`` (the last ids written, the new one last) end with it; an empty one never."""
    return tuple(0 < len(p) <= len(ids) and ids[-len(p) :] == p for p in patterns)


# ``ops`` for Python numbers (a host row); the device step passes torch's where/minimum/expm1 and true division
SCALAR = SimpleNamespace(
    where=lambda cond, a, b: a if cond else b,
    minimum=min,
    expm1=math.expm1,
    div=lambda a, b: a / b if b else math.inf,  # soft with start=1: t - begin is 0, progress 1 (as x / 0 in float)
    matches=ends_with_each,
)


def torch_ops() -> SimpleNamespace:
    """The same ops for tensors (runner V2's step: [R] each)."""
    import torch

    def where(cond, a, b):
        if isinstance(cond, bool):  # a rule's constant: picked at once
            return a if cond else b
        # an int picked in one op (torch.where would first make a tensor of each number: two ops more)
        if type(a) is int and type(b) is int and b == 0:
            return cond * a
        if type(a) is int and torch.is_tensor(b) and b.dtype in (torch.int64, torch.int32):
            return b.masked_fill(cond, a)
        return torch.where(cond, a, b)

    return SimpleNamespace(
        where=where,
        minimum=lambda a, b: a.clamp(max=b),
        expm1=torch.expm1,
        div=torch.true_divide,
        matches=_tensor_matches,
    )


def _tensor_matches(ids, marks):
    """``ops.matches`` on runner V2's tables: ``ids`` [R, w] (ANY left of a short history) against each slot's
    patterns ``marks`` [R, K, w] (right-aligned, ANY left of a shorter one, NEVER: none): an [R] bool per pattern."""
    return ((ids[:, None, :] == marks) | (marks == ANY)).all(dim=2).unbind(1)  # K x [R]


# s1's forced texts (e1.engine.markers encodes them; the API's two-call path writes them)
ANSWER_TEXT, NEWLINE_TEXT, WAIT_TEXT = "Final Answer:", "\n", "Wait"


def at_cut(think, limit):
    """Thinking reached the cut: ``t``, or soft's ceiling (``limit``, :meth:`Mode.think_limit`)."""
    return think >= limit


def end_due(cut, think, grace_at, sentence_end):
    """The end marker is due after a thinking id: at the cut (``cut``, :func:`at_cut`), once the id ended a
    sentence or the grace window ran out (``grace_at`` = cut + grace: without a window, at the cut itself)."""
    return cut & (sentence_end | (think >= grace_at))


def wait_replaces(free, waits, end_hit, think, wait_below):
    """s1's wait=k: the end marker the model just completed (``end_hit``) becomes "Wait", while thinking with
    nothing forced (``free``), waits left, and the thinking so far below ``wait_below`` (t - the "Wait" ids)."""
    return free & (waits > 0) & end_hit & (think < wait_below)


def over_cap(think, solve, cap):
    """truncate: ``t + s`` caps the whole output, thinking and solution together."""
    return think + solve >= cap


def end_bias(free, think, begin, span, strength, rate, scale, ops=SCALAR, shaped=True):
    """Soft's bias on the end marker's first logit (:meth:`Mode.bias_curve`): 0 up to ``begin`` thinking ids (or
    where not ``free``), then ``strength * p``, ``p = (think - begin) / span`` at most 1 (``span = t - begin``),
    shaped ``expm1(rate * p) / scale`` where ``rate > 0`` (``scale = expm1(rate)``; ``shaped``: any row may be)."""
    progress = ops.minimum(ops.div(think - begin, span), 1.0)
    if shaped:
        progress = ops.where(rate > 0, ops.expm1(rate * progress) / scale, progress)
    return ops.where(free & (think > begin), strength * progress, 0.0)


class EndParts(NamedTuple):
    """What a forced end writes, in this order, as ids or as texts: the start marker (if thinking never opened),
    the mode's exit text, s1's line break, the end marker, s1's answer prompt ("\\n" "Final Answer:")."""

    start: tuple | str
    exit: tuple | str
    lines: tuple | str
    end: tuple | str
    after: tuple | str

    @property
    def spans(self) -> tuple[int, int, int]:
        """Where the start marker ends (``ls``), the end marker starts (``at_end``) and the queue stops (``stop``),
        in the template ``start | exit | lines | end | after`` that :func:`end_queue` walks."""
        ls = len(self.start)
        at_end = ls + len(self.exit) + len(self.lines)
        return ls, at_end, at_end + len(self.end) + len(self.after)


def end_parts(mode, start, exit_text, newline, end, answer) -> EndParts:
    """A forced end's parts from the markers (ids, or texts: then ``newline`` "\\n", ``answer`` "Final Answer:"):
    the mode decides s1's line breaks and answer prompt."""
    lines = newline if mode.answer_prompt and mode.answer_lines else newline[:0]
    after = lines + answer if mode.answer_prompt else answer[:0]
    return EndParts(start, exit_text, lines, end, after)


def marker_patterns(end, start, width: int = 0) -> tuple[tuple, ...]:
    """The one table the last ids are matched against (``ops.matches``), in this order: the end marker, the start
    marker, then each proper prefix of the end marker ``end[:k]``, k = 1 .. width - 1 (``width``: at least the
    longer marker's ids; ``()``, which matches nothing, where k reaches ``len(end)`` and for no start marker)."""
    width = max(width, len(end), len(start))
    return (tuple(end), tuple(start), *(tuple(end[:k]) if k < len(end) else () for k in range(1, width)))


def marker_hits(hits):
    """Whether the last ids complete the end marker and the start marker, from ``hits``: whether they end with each
    of :func:`marker_patterns`' patterns, in its order (bools, or [R] tensors)."""
    return hits[0], hits[1]


def partial_end(hits, ops=SCALAR):
    """How many ids of the end marker the last ids end with, from ``hits`` (:func:`marker_hits`'): its longest
    proper prefix (0: none), where a forced end resumes the marker (:func:`end_queue`)."""
    partial = 0
    for k, hit in enumerate(hits[2:], 1):  # the longer prefix wins
        partial = ops.where(hit, k, partial)
    return partial


def end_queue(opened, partial, ls, at_end, stop, ops=SCALAR):
    """The forced end as a queue over the template (:attr:`EndParts.spans`): pointers ``(qp, qj, qt, qe)``, the
    ids ``template[qp:qe]`` skipping from ``qj`` to ``qt`` (:func:`queue_jump`), i.e. ``[first, ls)`` then
    ``[resume, stop)``. The start marker only if thinking never ``opened``; when the last ids are a proper prefix
    of the end marker (``partial`` ids of it), the rest of the marker with neither exit text nor line break."""
    return queue_start(opened, ls), ls, ops.where(partial > 0, at_end + partial, ls), stop


def queue_start(opened, ls):
    """:func:`end_queue`'s ``qp``: past the start marker once thinking opened (alone where no id of the end
    marker can have been written: a marker of one id, which never jumps)."""
    return ls * opened


def queue_jump(qp, qj, qt, ops=SCALAR):
    """The queue's pointer after each move (a new queue, a pop: ``qp + 1``): where it reached ``qj`` it goes on at
    ``qt``. A queue ends once ``qp`` reaches its ``qe``."""
    return ops.where(qp == qj, qt, qp)


def queue_walk(qp, qj, qt, qe):
    """The template positions a queue's pointers (:func:`end_queue`) force, in order, as pops move them."""
    qp = queue_jump(qp, qj, qt)
    while qp < qe:
        yield qp
        qp = queue_jump(qp + 1, qj, qt)


def forced_end(parts: EndParts, opened, partial=0):
    """The forced end's ids (a tuple; or a text, a str) in order: the template as :func:`end_queue`'s pointers
    walk it."""
    template = parts.start + parts.exit + parts.lines + parts.end + parts.after
    items = [template[at] for at in queue_walk(*end_queue(opened, partial, *parts.spans))]
    return "".join(items) if isinstance(template, str) else tuple(items)
