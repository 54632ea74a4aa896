"""The per-row phase state of budgeted decoding, shared by every backend.

A backend asks each row for :meth:`RowState.forced_token` before sampling (a forced token
overrides the model's choice: the transformers backend feeds it into the running KV cache,
the vLLM backend masks the logits to it), then hands the token the model sampled to
:meth:`RowState.accept`, which returns the token actually appended. Everything about
budgets, markers and modes lives here, once.

    state = RowState(Budget(think=4, solve=8), Mode(), markers, prompt_thinking=PROMPT_OPEN, max_new_tokens=64)
    while not state.done:
        forced = state.forced_token()
        state.accept(forced if forced is not None else sample())

Counting: ``think_tokens`` are the tokens the model wrote while thinking (a natural end
marker included, "Wait" insertions included, a grace window's tokens included); a *forced*
end marker (with the mode's exit text, and s1's "Final Answer:") is counted in neither
``think_tokens`` nor ``solve_tokens``; the solution's EOS counts as a solution token, as
``max_tokens`` counts it in every serving engine.

Texts: :meth:`RowState.split` gives the thinking (s1's forced "Wait"s included: the model thinks on
from them) and the solution the model wrote, nothing forced in it; :meth:`RowState.forced_text_ids`
gives the forced texts that are neither thinking nor a marker (the exit text, s1's "Final Answer:"),
kept apart so that no reward ever scores them as the model's answer.

Mode ``soft`` adds one thing a backend must do: add :meth:`RowState.end_bias` to the logit of the
end marker's first token before sampling (:meth:`Mode.end_bias`, a pure function of the thinking
count, ``t`` and the mode, so both backends add the very same float). ``stop=`` patterns are
checked here after each thinking token, through a matcher the backend builds (:mod:`e1.engine.stop`).
A mode's notes (:meth:`Mode.notes`, texts an option forces into the thinking at given thinking counts,
``notes`` as ids) are queued like "Wait": forced, counted as thinking, due once thinking reaches their count.
Why thinking ended is kept in ``think_end`` (:data:`THINK_ENDS`): natural, budget, pattern, trial (early-exit),
open (it never ended), prefilled (the prompt closed it) or unopened (left to the model, never opened).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from itertools import compress
from typing import TYPE_CHECKING

from e1.budget import Budget
from e1.engine import rules
from e1.engine.markers import PROMPT_CLOSED, PROMPT_OPEN, PROMPT_THINKING, Markers
from e1.engine.modes import Mode
from e1.engine.rules import EndParts, at_cut, end_due, end_parts, forced_end, over_cap, wait_replaces

if TYPE_CHECKING:
    from e1.engine.stop import StopPattern

THINK, SOLVE, DONE = "think", "solve", "done"
# what each appended token is, for splitting the text: thinking, a marker, s1's forced answer prompt, solution,
# the end of sequence, a mode's forced exit text
T_THINK, T_MARKER, T_ANSWER, T_SOLVE, T_EOS, T_EXIT = range(6)
_FORCED_TEXT_KINDS = frozenset({T_EXIT, T_ANSWER})  # forced, neither thinking nor marker: never the model's answer
_PART_KINDS = (T_MARKER, T_EXIT, T_EXIT, T_MARKER, T_ANSWER)  # each of EndParts' texts, once forced
# How thinking ended (Completion.think_end, the samples' think_end), defined here once: the model's own
# marker, the budget (t, or soft's ceiling), a stop pattern, a confident early-exit trial, not at all (EOS
# or the room ran out while thinking); or it never began: the prompt closed it (the chat template's empty
# block, nothinking's prefilled box), or the prompt left it to the model, which never opened it
NATURAL, BUDGET, PATTERN, TRIAL, OPEN = "natural", "budget", "pattern", "trial", "open"
PREFILLED, UNOPENED = "prefilled", "unopened"
THINK_ENDS = (NATURAL, BUDGET, PATTERN, TRIAL, OPEN, PREFILLED, UNOPENED)
NO_HITS = (False, False)  # rules.marker_hits of ids that end with no pattern


@lru_cache(maxsize=4096)
def thinking_limits_from(limit: int | None, cap: int | None) -> float:
    """The least thinking count at which the cut (at ``limit``; None: no thinking budget) or truncate's ``cap`` can
    hold (inf: neither), found once per budget by bisecting their rules (each true from some count on)."""
    cut = bisect_left(range(limit + 1), True, key=lambda k: at_cut(k, limit)) if limit is not None else math.inf
    capped = bisect_left(range(cap + 1), True, key=lambda k: over_cap(k, 0, cap)) if cap is not None else math.inf
    return min(cut, capped)


def worst_case_tokens(budget: Budget, mode: Mode, markers: Markers, exit_ids: tuple[int, ...] = ()) -> int:
    """The most tokens a row can write in ``mode`` (:meth:`Mode.worst_case`); mode ``none``, which has
    no budget of its own, counts ``t + s`` and the forced tokens as elastic would."""
    worst = mode.worst_case(budget, markers, exit_ids)
    return worst if worst is not None else budget.total + len(markers.start_ids) + len(markers.end_ids) + len(exit_ids)


class RowState:
    """``exit_ids``: the mode's exit text, forced before the end marker at ``t``; ``sentence_ends``:
    the ids that end a sentence, for the mode's grace window (see :class:`~e1.engine.base.Mode`);
    ``stop``: the mode's stop pattern (:class:`~e1.engine.stop.StopPattern`); each row scans its own thinking text;
    ``notes``: ``(thinking count, ids)`` pairs, counts rising, each forced into the thinking once it reaches the count.
    Build one with :func:`e1.engine.row_engine.build_state` (the one builder every caller uses)."""

    # trial answers (early-exit, e1.engine.early_exit_state), none here: whether the next token is a trial
    # answer's (the backend decodes it greedily and passes its probability), how many cache
    # columns a just-ended trial leaves to mask, and what the trials cost
    trial_answering = False
    rollback = 0
    restart = False  # early-exit recipe=deer: the last id was held for a trial (a vLLM request ends there)
    trial_decoded = 0
    trials: tuple = ()

    def __init__(
        self,
        budget: Budget,
        mode: Mode,
        markers: Markers,
        prompt_thinking: str,
        max_new_tokens: int,
        exit_ids: tuple[int, ...] = (),
        sentence_ends: frozenset[int] = frozenset(),
        stop: StopPattern | None = None,
        notes: tuple[tuple[int, tuple[int, ...]], ...] = (),
    ):
        if prompt_thinking not in PROMPT_THINKING:
            raise ValueError(f"prompt_thinking must be one of {PROMPT_THINKING}, got {prompt_thinking!r}")
        self.budget, self.mode, self.markers = budget, mode, markers
        self.exit_ids, self.sentence_ends, self.stop = tuple(exit_ids), sentence_ends, stop
        self._scan = stop.scanner() if stop is not None else None  # this row's view of its thinking text
        self.think_limit = mode.think_limit(budget)  # t, or soft's ceiling floor(ceiling * t)
        self.grace_at = self.think_limit + mode.grace  # at or past it a grace window forces the end anyway
        self.wait_below = budget.think - len(markers.wait_ids)  # "Wait" replaces a natural end only below it
        # notes count against thinking's own budget: a mode without one (truncate, none) has none
        self.notes = tuple((at, tuple(ids)) for at, ids in notes if ids and at < self.think_limit and mode.separate)
        self._notes = list(reversed(self.notes))  # the notes not yet due, the next one last
        self.opened = prompt_thinking in (PROMPT_OPEN, PROMPT_CLOSED)
        self._completes = frozenset(ids[-1] for ids in (markers.end_ids, markers.start_ids) if ids)  # ids matched after
        self.total_cap = mode.output_cap(budget)  # truncate: t + s over the whole output
        self.max_new_tokens = max_new_tokens if self.total_cap is None else min(max_new_tokens, self.total_cap)
        self.budgeted = mode.separate  # thinking has its own budget t
        self.tokens: list[int] = []
        self.forced: list[bool] = []
        self.kinds: list[int] = []
        self.phase = THINK
        self.think_tokens = self.solve_tokens = 0
        self._think_from = thinking_limits_from(self.think_limit if self.budgeted else None, self.total_cap)
        self.closed = self.was_forced = False
        self.waits_left = mode.wait
        self.finish_reason = ""
        self.think_end = OPEN
        self._queue: deque[tuple[int, int]] = deque()  # forced (token, kind) still to append
        if prompt_thinking == PROMPT_CLOSED:  # the template ended thinking (Qwen3, thinking off): all solution
            self.closed, self.phase, self.think_end = True, SOLVE, PREFILLED
        elif self.budgeted and self.think_limit == 0:
            self._force_end()

    @property
    def done(self) -> bool:
        return self.phase == DONE

    def forced_token(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def queued(self) -> list[tuple[int, int]]:
        """The forced (token, kind) pairs still to append, first due first."""
        return list(self._queue)

    def end_bias(self) -> float:
        """What to add to the logit of the end marker's first token before the next sample (soft;
        0 otherwise): :meth:`Mode.end_bias` of the thinking written so far, while thinking and nothing is forced."""
        if self.phase != THINK or self._queue:
            return 0.0
        return self.mode.end_bias(self.think_tokens, self.budget.think)

    def tokens_before_forcing(self) -> int:
        """How many more tokens can be appended before a forced token (or the end) could be due:
        a backend that sees tokens late (vLLM's logits processor) need only catch up then.
        Thinking: the budget t, or a natural end at the next token followed by s solution
        tokens, whichever comes first; solving: the rest of s; always the room left."""
        if self._queue or self.done:
            return 1
        room = self.max_new_tokens - len(self.tokens)
        if self.phase == THINK:
            if not self.budgeted:
                return max(1, room)
            if self.stop is not None or self.end_bias():
                return 1  # a pattern may match at any token; a bias changes every step
            bias_start = self.mode.bias_start(self.budget.think)
            if bias_start is not None and bias_start > self.think_tokens:
                room = min(room, bias_start - self.think_tokens)
            return max(1, min(self._next_limit() - self.think_tokens, 1 + self.budget.solve, room))
        left = self.budget.solve - self.solve_tokens if self.budgeted else room
        return max(1, min(left, room))

    def follow(self, ids) -> int:
        """Take ``ids`` (another row's output for the same prompt, model and sampling) as this row's
        own samples for as long as this row would append them unchanged: stop before a forced token
        is due, once the row is done, before a token soft would draw with a bias (its distribution
        differs from the other row's), and just after an id the row replaced (s1's "Wait"). Returns
        how many ids were taken. Every id taken was drawn from the very distribution this row would
        have drawn it from (the histories are equal up to it), so the row stays an exact sample;
        this is what lets one trajectory serve every budget of a sweep (:mod:`e1.eval.shared`).

            state.follow(unconstrained.token_ids)   # elastic t: the first t ids, then the marker is due
        """
        taken = 0
        for token in ids:
            if self.done or self._queue or self.end_bias():
                break
            taken += 1
            if self.accept(token) != token:
                break
        return taken

    def accept(self, sampled: int) -> int:
        """Append the next token (the queued forced one if any, else ``sampled``); return it."""
        if self.waits_left and not self._queue:
            self._replace_end_with_wait(sampled)  # a natural end may become "Wait", queued
        if self._queue:
            token, kind = self._queue.popleft()
            self._append(token, kind, forced=True)
            if kind == T_THINK:  # an inserted "Wait" or note is thinking (its text is matched from the next sample on)
                self.think_tokens += 1
                if self._scan is not None:
                    self._scan.push(token)
                if not self._queue and at_cut(self.think_tokens, self.think_limit):  # a complete "Wait" at the cut
                    self._force_end()
                elif not self._queue:
                    self._note_due()
            elif not self._queue:  # the forced marker (and answer prompt) is complete
                self.closed, self.phase = True, SOLVE
        elif self.phase == THINK:
            self._append(sampled, T_THINK, forced=False)
            self._after_think(sampled)
        else:
            self._append(sampled, T_EOS if sampled in self.markers.eos_ids else T_SOLVE, forced=False)
            self._after_solve(sampled)
        if self.phase != DONE and len(self.tokens) >= self.max_new_tokens:  # the phase, not .done: one call less per id
            self._finish("length")
        return self.tokens[-1]

    def extend(self, ids: Sequence[int]) -> int:
        """``accept`` each of ``ids`` in turn until the row is done; returns how many were taken.
        The same records as the loop, at C speed: between events the ids are plain thinking or
        solution tokens, appended as one slice and counted arithmetically. An event is an id
        that can change the phase (EOS, the last id of a marker) or a count that reaches a limit
        (t, s, the room); it, a queued forced token, and a grace window go through ``accept``."""
        ids = ids if isinstance(ids, list) else list(ids)
        at, n = 0, len(ids)
        nexts: dict[int, int] = {}  # special id -> its next position at or after `at` (n: none)
        while at < n and not self.done:
            run = self._plain_run(n - at)
            if run:
                run = min(run, self._next_special(ids, at, nexts) - at)
            if run > 0:
                self._append_run(ids, at, run)
                at += run
            else:
                self.accept(ids[at])
                at += 1
        return at

    def plain_ahead(self) -> int:
        """How many more thinking ids could be appended that change nothing but the counts, provided
        none is in :meth:`phase_ids` (0: the next id must go through :meth:`accept`; a stop pattern is
        the holder's to check). A backend that sees each row's ids step by step (vLLM's logits processor)
        may hold such ids back, count them (soft's bias is a function of the count alone), push them to
        :attr:`scanner` itself, and hand them over at once with :meth:`append_held`."""
        return self._limit_run(self.max_new_tokens) if self.phase == THINK else 0

    def free_run(self) -> int:
        """How many ids the model may sample from here before a forced token could be due (0: one is due,
        or the row is done), provided none of them is in :meth:`phase_ids`. A backend that cannot force
        (vLLM with a drafter, :mod:`e1.engine.drafter`) ends a request there or at such an id, and appends
        the forced ids itself. For modes :func:`~e1.engine.drafter.drafted_refusal` lets run: no bias,
        stop pattern or grace window acts between the limits."""
        if self._queue or self.done:
            return 0
        return self._limit_run(self.max_new_tokens) + 1

    def phase_ids(self) -> set[int]:
        """The ids that can change the phase now: EOS, and while thinking the end marker's last id and,
        before thinking opened, the start marker's last id (of a marker written by the model)."""
        specials = set(self.markers.eos_ids)
        if self.phase == THINK:
            specials.add(self.markers.end_ids[-1])
            if not self.opened:
                specials.add(self.markers.start_ids[-1])
        return specials

    @property
    def scanner(self):
        """This row's stop scanner (:class:`~e1.engine.stop.StopScanner`; None without a pattern)."""
        return self._scan

    def append_held(self, ids: list[int], matched: bool = False) -> None:
        """Append thinking ids held back under :meth:`plain_ahead` (none in :meth:`phase_ids`, checked by
        the holder, who also pushed each to :attr:`scanner`); ``matched``: the last one's push matched,
        so the end marker is queued, as :meth:`accept` of those ids one by one would have left the row."""
        if ids:
            self._append_run(ids, 0, len(ids))
        if matched:
            self._force_end(PATTERN)

    def _plain_run(self, most: int) -> int:
        """How many ids can be appended in a row before a count could reach a limit (0: none)."""
        if self.phase == THINK and self.stop is not None:
            return 0  # the pattern is checked after every thinking token
        return self._limit_run(most)

    def _limit_run(self, most: int) -> int:
        """``_plain_run`` without the stop pattern: ids appendable before a count could reach a limit."""
        if self._queue:
            return 0  # a forced token is due: one at a time
        room = self.max_new_tokens - len(self.tokens) - 1
        if self.phase == THINK:
            limit = self._next_limit() if self.budgeted else self.total_cap
            count = self.think_tokens
        else:
            limit = self.budget.solve if self.budgeted else self.total_cap
            count = self.solve_tokens + (self.think_tokens if self.total_cap is not None else 0)
        left = room if limit is None else min(room, limit - count - 1)
        return max(0, min(most, left))

    def _next_special(self, ids: list[int], at: int, nexts: dict[int, int]) -> int:
        """The first position at or after ``at`` of an id that can change the phase."""
        specials = self.phase_ids()
        for token in specials:
            if nexts.get(token, -1) < at:
                try:
                    nexts[token] = ids.index(token, at)
                except ValueError:
                    nexts[token] = len(ids)
        return min(nexts[token] for token in specials)

    def _append_run(self, ids: list[int], at: int, run: int) -> None:
        """Append ``ids[at:at + run]``, none of them special and no limit reached: plain tokens of this phase."""
        self.tokens.extend(ids[at : at + run])
        self.forced.extend([False] * run)
        if self.phase == THINK:
            self.kinds.extend([T_THINK] * run)
            self.think_tokens += run
        else:
            self.kinds.extend([T_SOLVE] * run)
            self.solve_tokens += run

    def _append(self, token: int, kind: int, forced: bool) -> None:
        self.tokens.append(token)
        self.kinds.append(kind)
        self.forced.append(forced)

    def _after_think(self, token: int) -> None:
        self.think_tokens += 1
        end_hit, start_hit = rules.marker_hits(self._hits()) if token in self._completes else NO_HITS
        if token in self.markers.eos_ids:
            self.kinds[-1] = T_EOS
            self._finish("stop")
        elif end_hit:
            self._relabel_tail(len(self.markers.end_ids), T_MARKER)
            self.closed, self.phase, self.think_end = True, SOLVE, NATURAL
        elif start_hit and not self.opened:
            self._relabel_tail(len(self.markers.start_ids), T_MARKER)
            self.opened = True
            if self._scan is not None:  # the marker's text is not thinking: match what follows it
                self._scan = self.stop.scanner()
        elif self.phase == THINK and self._scan is not None and self._scan.push(token):
            self._force_end(PATTERN)
            return
        if self.phase != THINK:
            return
        if self.think_tokens >= self._think_from:  # the cut or the cap may hold (thinking_limits_from)
            cut = self.budgeted and at_cut(self.think_tokens, self.think_limit)  # a grace window may wait past it
            if cut and end_due(cut, self.think_tokens, self.grace_at, token in self.sentence_ends):
                return self._force_end()
            if self.total_cap is not None and over_cap(self.think_tokens, self.solve_tokens, self.total_cap):
                return self._finish("length")
        if self._notes and not self._queue:
            self._note_due()

    def _next_limit(self) -> int:
        """The thinking count at which a forced token may next be due: the cut, or the next note's count."""
        return min(self.think_limit, self._notes[-1][0]) if self._notes else self.think_limit

    def _note_due(self) -> None:
        """Queue the note due at this thinking count (the last of those reached, if several were passed),
        if it fits before the cut (as "Wait": the cut still bounds the thinking)."""
        due = None
        while self._notes and self._notes[-1][0] <= self.think_tokens:
            due = self._notes.pop()
        if due is not None and self.think_tokens + len(due[1]) < self.think_limit:
            self._queue.extend((t, T_THINK) for t in due[1])

    def _after_solve(self, token: int) -> None:
        self.solve_tokens += 1
        if token in self.markers.eos_ids:
            self._finish("stop")
        elif self.budgeted and self.solve_tokens >= self.budget.solve:
            self._finish("length")
        elif self.total_cap is not None and over_cap(self.think_tokens, self.solve_tokens, self.total_cap):
            self._finish("length")

    def _finish(self, reason: str) -> None:
        if self.think_end == OPEN and not self.opened and not self.was_forced:
            self.think_end = UNOPENED  # left to the model, which never wrote the start marker
        self.phase, self.finish_reason = DONE, reason
        self._queue.clear()

    def _force_end(self, why: str = BUDGET) -> None:
        """Queue the forced end (:func:`e1.engine.rules.forced_end`, the walk runner V2's step makes too): the exit
        text and the end marker, or the rest of a partly written marker, and s1's "Final Answer:". A stop pattern
        (``why`` PATTERN) ended thinking by its content, not for lack of budget: no exit text."""
        parts = self.end_parts()
        if why != BUDGET:
            parts = parts._replace(exit=())
        partial = rules.partial_end(self._hits())
        if partial:
            self._relabel_tail(partial, T_MARKER)
        kinds = EndParts(*((kind,) * len(part) for kind, part in zip(_PART_KINDS, parts)))
        self._queue.extend(zip(forced_end(parts, self.opened, partial), forced_end(kinds, self.opened, partial)))
        self.was_forced, self.think_end = True, why

    def end_parts(self) -> EndParts:
        """What a forced end writes (:func:`e1.engine.rules.end_parts`) as this row's ids: ``_force_end`` and
        runner V2's slot template (``vllm.v2_slots.export``) both cut their queues from these."""
        markers = self.markers
        return end_parts(
            self.mode, markers.start_ids, self.exit_ids, markers.newline_ids, markers.end_ids, markers.answer_ids
        )

    def _replace_end_with_wait(self, token: int) -> bool:
        """s1's wait=k: a natural end of thinking becomes "Wait" while waits are left and fit in t."""
        if token not in self._completes:  # the common case: no marker is completed, the rule is false
            return False
        end_hit, _ = rules.marker_hits(self._hits(token))  # the model completes the end marker
        free = self.phase == THINK and not self._queue
        if not wait_replaces(free, self.waits_left, end_hit, self.think_tokens, self.wait_below):
            return False
        self.waits_left -= 1
        self._queue.extend((t, T_THINK) for t in self.markers.wait_ids)
        return True

    def _hits(self, *more: int) -> tuple[bool, ...]:
        """Which marker patterns (:func:`e1.engine.rules.marker_patterns`, runner V2's table too) the ids written,
        then ``more`` (an id about to be), end with: the last ones, as many as patterns (more than the longest)."""
        patterns = rules.marker_patterns(self.markers.end_ids, self.markers.start_ids)
        return rules.ends_with_each((*self.tokens[len(more) - len(patterns) :], *more), patterns)

    def _relabel_tail(self, k: int, kind: int) -> None:
        self.kinds[-k:] = [kind] * k

    def split(self) -> tuple[list[int], list[int]]:
        """(thinking ids without markers, s1's "Wait"s included; the solution ids the model wrote, without
        EOS and without anything forced): the two texts of a record and of a served reply."""
        think = list(compress(self.tokens, map(T_THINK.__eq__, self.kinds)))  # compress, map: C loops
        solution = list(compress(self.tokens, map(T_SOLVE.__eq__, self.kinds)))
        return think, solution

    def forced_text_ids(self) -> list[int]:
        """The forced ids that are neither thinking nor a marker, in order: the mode's exit text and
        s1's answer prompt (``Completion.forced_text``; the model conditioned on them, it did not write them)."""
        return list(compress(self.tokens, map(_FORCED_TEXT_KINDS.__contains__, self.kinds)))
