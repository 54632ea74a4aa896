"""The V1 processor's rows (:class:`~e1.engine.vllm.processor.BudgetProcessor`): each request's
:class:`_Row` (its RowState, fed the ids vLLM wrote, and the token it forces), and the stepping path,
:class:`_Stepping`: the rows looked at every step while they think plainly, as arrays, with the
end-marker bias of each (mode, t) tabulated in :class:`_BiasTable`. Runner V2's slots are
:mod:`e1.engine.vllm.v2_slots`."""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from e1.engine.row_state import RowState

ARGMAX = -2  # _Row.forced: force the best token (a trial answer's greedy pick)
_LAST = itemgetter(-1)


class _Row:
    __slots__ = ("check_at", "eos", "fed", "held", "output", "scanned", "state")

    def __init__(self, state: RowState, output: list[int], eos: int):
        self.state, self.output, self.fed, self.eos, self.check_at = state, output, 0, eos, 0
        self.held = None  # on the stepping path (_Stepping): the output length checked so far
        self.scanned = 0  # on the stepping path: the output length its stop scanner has been given

    def catch_up(self) -> None:
        """Feed the ids vLLM appended since the last check (a forced id comes back as sampled), and
        note when the state must be looked at next: until then no forced token can be due, so the
        per-step work is skipped (the same ids are fed in the same order, only later)."""
        output, state = self.output, self.state
        try:
            ready = output.index(-1, self.fed)  # -1: an async scheduling placeholder, filled in later
        except ValueError:
            ready = len(output)
        if ready > self.fed and not state.done:
            self.fed += state.extend(output[self.fed : ready])  # RowState.accept for each, at C speed
        self.check_at = self.next_check() if self.fed == len(output) else 0

    def next_check(self) -> int:
        """The output length from which the row is looked at again: the current one while a token is forced
        or a bias added (vLLM samples a partial prefill's row and discards the id: the step after it needs
        the same), else the one at which a forced token could be due."""
        if self.forced() is not None or self.state.end_bias():
            return self.fed
        return self.fed + self.state.tokens_before_forcing()

    def forced(self) -> int | None:
        """The token to force (ARGMAX: the best one; a trial answer is greedy), None: sample freely.
        A just-ended trial (early-exit) ends the request with EOS: vLLM cannot roll it back, so the
        driver (e1.engine.vllm.vllm_engine) replays the ids and starts the next request from the real prefix; so does
        an id held for a trial (recipe=deer: the trial comes before it, and vLLM has written it)."""
        state = self.state
        if state.done or state.rollback or state.restart:
            return self.eos
        return ARGMAX if state.trial_answering else state.forced_token()

    def steppable(self) -> bool:
        """Whether the row may go on the stepping path now: it is looked at every step (soft's bias or
        a stop pattern), all its ids are fed, nothing is forced, and plain thinking ids can follow."""
        state = self.state
        return (
            self.fed == len(self.output) > 0
            and (state.stop is not None or bool(state.end_bias()))
            and state.plain_ahead() > 0
        )

    def release(self, upto: int, matched: bool = False) -> None:
        """Leave the stepping path: hand the held ids ``output[fed:upto]`` to the state (``matched``:
        the last one's push to the scanner matched) and look at the row again as ``catch_up`` would have
        after them: this very step if it has more ids (or a forced id or a bias is due now), else at its next id."""
        self.state.append_held(self.output[self.fed : upto], matched)
        self.fed, self.held = upto, None
        self.check_at = 0 if matched else self.next_check()


class _Stepping:
    """The rows looked at every step while they think plainly (soft's bias window, a stop pattern), as
    arrays: their new ids are checked, counted and their bias gathered for all rows in a few array
    operations. Each step a row takes one id that is no phase id (``RowState.phase_ids``) and stays
    within ``RowState.plain_ahead``; the ids are held back and handed to the state when it leaves
    (``_Row.release``), so the state is fed the same ids in the same order, as ``catch_up`` would. A row
    with a stop pattern gives its scanner only the ids that can start or complete a match (its pattern's
    quiet table, looked up for all rows at once: ``_woken``); the quiet ones in between are handed over in
    one call (``StopScanner.skip``) when the scanner next needs its text, or when the row leaves."""

    def __init__(self, rows: list[tuple[int, _Row]], table) -> None:
        count = len(rows)
        self.rows = [row for _, row in rows]
        self.outputs = [row.output for row in self.rows]
        self.index = np.fromiter((i for i, _ in rows), np.int64, count)
        self.held = np.fromiter((row.held for row in self.rows), np.int64, count)
        self.until = np.fromiter((row.fed + row.state.plain_ahead() for row in self.rows), np.int64, count)
        self.base = np.fromiter((row.state.think_tokens - row.fed for row in self.rows), np.int64, count)
        self.column = np.fromiter((row.state.markers.end_ids[0] for row in self.rows), np.int64, count)
        specials = [sorted(row.state.phase_ids()) for row in self.rows]
        width = max(map(len, specials), default=1)
        self.specials = np.full((count, width), -2, np.int64)  # [R, S] each row's phase ids, padded
        for r, ids in enumerate(specials):
            self.specials[r, : len(ids)] = ids
        places = [table.place(row.state) for row in self.rows]
        self.offset = np.fromiter((o for o, _ in places), np.int64, count)
        self.steady = np.fromiter((k for _, k in places), np.int64, count)
        scanners = [row.state.scanner for row in self.rows]
        self.scanned = np.fromiter((row.scanned for row in self.rows), np.int64, count)
        # [R] no id of this step need reach the row's scanner if it is quiet (True: no stop pattern at all)
        self.idle = np.fromiter((scan is None or getattr(scan, "idle", False) for scan in scanners), bool, count)
        tables: dict[int, tuple[np.ndarray, list[int]]] = {}  # one group per quiet table (a pattern, a tokenizer)
        for r, scan in enumerate(scanners):
            if scan is not None and getattr(scan, "quiet", None) is not None:
                tables.setdefault(id(scan.quiet), (scan.quiet, []))[1].append(r)
        self.tables = [(quiet, np.array(rows, np.int64)) for quiet, rows in tables.values()]
        self.scanning = any(scan is not None for scan in scanners)
        self.gone: set[int] = set()  # the positions of the rows that left

    def write_back(self) -> None:
        """The output length each row on the path has been checked to (before the arrays are made again)."""
        for r, (row, held, scanned) in enumerate(zip(self.rows, self.held.tolist(), self.scanned.tolist())):
            if r not in self.gone:  # a row that left may be back already, from a later length
                row.held, row.scanned = held, scanned

    def step(self, table) -> tuple[np.ndarray, list[int]]:
        """Check and count this step's ids: ``(the rows' bias now [R] float32, the positions that leave)``."""
        outputs, count = self.outputs, len(self.outputs)
        length = np.fromiter(map(len, outputs), np.int64, count)  # [R]
        last = np.fromiter(map(_LAST, outputs), np.int64, count)  # [R] never empty: fed > 0 on entry
        ok = (length == self.held + 1) & (length <= self.until) & (last >= 0)
        ok &= ~(last[:, None] == self.specials).any(1)  # [R, S] -> [R]
        leave = np.flatnonzero(~ok).tolist()
        matched = []
        if self.scanning and (woken := self._woken(ok, last)):
            scanners = [self.rows[r].state.scanner for r in woken]
            for r, scanner, at, token in zip(woken, scanners, length[woken].tolist(), last[woken].tolist()):
                self._hand_over(r, at - 1)
                if scanner.push(token):
                    matched.append(r)
            self.scanned[woken] = length[woken]
            self.idle[woken] = [scanner.idle for scanner in scanners]
        for r in leave:
            if self.scanning:
                self._hand_over(r, int(self.held[r]))
            self.rows[r].release(int(self.held[r]))
        for r in matched:
            self.rows[r].release(int(length[r]), matched=True)
        self.held = np.where(ok, length, self.held)
        self.gone.update(leave, matched)
        for r in matched:
            ok[r] = False
        think = np.minimum(self.base + length, self.steady)
        bias = np.where(ok, table.values[self.offset + think], np.float32(0))
        return bias, leave + matched

    def _woken(self, ok: np.ndarray, last: np.ndarray) -> list[int]:
        """The rows whose new id must reach their stop scanner: one not idle, or an id that is not quiet."""
        woken = ~self.idle  # [R]
        for quiet, rows in self.tables:
            ids = last[rows]  # [G]
            inside = (ids >= 0) & (ids < len(quiet))
            woken[rows] |= ~(quiet[np.where(inside, ids, 0)] & inside)
        return np.flatnonzero(woken & ok).tolist()

    def _hand_over(self, r: int, upto: int) -> None:
        """Give row ``r``'s scanner the quiet ids it has not had, ``output[scanned:upto]``."""
        scanned, scanner = int(self.scanned[r]), self.rows[r].state.scanner
        if scanner is not None and scanned < upto:  # only an idle scanner is left behind
            scanner.skip(self.outputs[r][scanned:upto])
            self.scanned[r] = upto


class _BiasTable:
    """Each (mode, t)'s end-marker bias by thinking count, up to where it stays steady, in one float32
    array (the very floats ``RowState.end_bias`` gives, converted as a tensor of them would be)."""

    LIMIT = 1 << 22  # floats kept; past it the array starts afresh (the rows' places are found again)

    def __init__(self) -> None:
        self.values = np.zeros(1, np.float32)  # [0]: the place of every row without a bias
        self.places: dict[tuple[str, int], tuple[int, int]] = {}

    def place(self, state: RowState) -> tuple[int, int]:
        """(offset of the state's table, the count from which its bias is steady)."""
        t = state.budget.think
        if state.mode.bias_start(t) is None:
            return 0, 0
        key = (str(state.mode), t)
        if key not in self.places:
            steady = state.mode.bias_steady(t)
            steady = state.think_limit if steady is None else steady
            table = np.array([state.mode.end_bias(k, t) for k in range(steady + 1)], np.float32)
            self.places[key] = (len(self.values), steady)
            self.values = np.concatenate([self.values, table])
        return self.places[key]

    def full(self) -> bool:
        return len(self.values) > self.LIMIT
