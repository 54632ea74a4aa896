"""Runner V2's host rows with a stop pattern, held back as arrays while nothing they take can matter.

    held = HeldRows(max_num_reqs)
    looked = held.take(slots, ids, positions)   # [H] the rows Python must look at this step
    held.release(slot, host); host.feed(...)     # a looked-at row: its held ids first, in order
    held.enter(slot, host)                      # and held again from the next step, if it may

Used by :class:`e1.engine.vllm.v2_processor.V2BudgetProcessor` for its ``HostRow`` s (a row is ``.state``, a
:class:`~e1.engine.row_state.RowState`, and ``.seen``, the next position it takes).
"""

from __future__ import annotations

import numpy as np

from e1.engine.row_state import THINK


class HeldRows:
    """Host rows with a stop pattern while they think plainly or solve, as arrays over the slots (V1's stepping
    path, ``e1.engine.vllm.v1_rows._Stepping``, for runner V2): a row's id is held back, not fed, when it comes
    at the next position, is no phase id (``RowState.phase_ids``), fits in ``RowState.plain_ahead`` (solving:
    comes before a forced id could be due) and, while thinking, is quiet for the row's idle scanner
    (``StopPattern.quiet``: it cannot start or complete a match). Such an id changes nothing the processor
    writes (no forced id, no bias: rows with a soft bias are not held), so the row costs no Python that step;
    the held ids go to the scanner (``skip``) and the state (``append_held``) in one call each when any check
    fails, in the order they came."""

    CAP = 256  # ids held per row at most (then they are handed over)

    def __init__(self, slots: int) -> None:
        self.on = np.zeros(slots, dtype=bool)  # [S] holding
        self.count = np.zeros(slots, dtype=np.int64)  # [S] ids held
        self.until = np.zeros(slots, dtype=np.int64)  # [S] ids it may hold
        self.seen = np.zeros(slots, dtype=np.int64)  # [S] the next position
        self.ids = np.zeros((slots, self.CAP), dtype=np.int64)  # [S, CAP]
        self.specials = np.full((slots, 1), -2, dtype=np.int64)  # [S, P] phase ids, padded with -2
        self.table = np.zeros(slots, dtype=np.int64)  # [S] which quiet table
        self.scan = np.zeros(slots, dtype=bool)  # [S] thinking: its ids must be quiet (solving: any id but a phase id)
        # the quiet tables of the slots holding now, by number, and how many slots hold with each: a table
        # no slot holds with is dropped, so what is kept (and looked through each step) is bounded by the
        # slots, not by how many patterns requests ever brought
        self.tables: dict[int, np.ndarray] = {}
        self.users: dict[int, int] = {}
        self._numbers = 0

    def take(self, slots: np.ndarray, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Hold this step's id of every holding slot that may (``slots``, ``ids``, ``positions``: [H]); returns
        the rows the caller must look at (a mask over H)."""
        ok = self.on[slots] & (positions == self.seen[slots]) & (self.count[slots] < self.until[slots])  # [H]
        if not ok.any():
            return ~ok
        ok &= ~(ids[:, None] == self.specials[slots]).any(1)  # [H, P] -> [H]
        quiet = ~self.scan[slots]  # [H]
        scanning = ok & self.scan[slots]
        for number in np.unique(self.table[slots[scanning]]).tolist():  # the patterns held this step
            table = self.tables[number]
            mine = scanning & (self.table[slots] == number) & (ids >= 0) & (ids < len(table))
            quiet[mine] = table[ids[mine]]
        ok &= quiet
        held = slots[ok]
        self.ids[held, self.count[held]] = ids[ok]
        self.count[held] += 1
        self.seen[held] += 1
        return ~ok

    def release(self, slot: int, host) -> None:
        """Hand the held ids to the row's scanner and state, in order; the row is looked at one by one again."""
        if not self.on[slot]:
            return
        self.drop(slot)
        held = self.ids[slot, : self.count[slot]].tolist()
        if held and self.scan[slot]:
            host.state.scanner.skip(held)
            host.state.append_held(held)
        elif held:  # solution ids: accepted one by one, at C speed
            host.state.extend(held)
        host.seen += len(held)

    def drop(self, slot: int) -> None:
        """The slot holds no more (handed over, or given to a new request): its quiet table is let go."""
        if not self.on[slot]:
            return
        self.on[slot] = False
        if self.scan[slot]:
            number = int(self.table[slot])
            self.users[number] -= 1
            if not self.users[number]:
                del self.users[number], self.tables[number]

    def enter(self, slot: int, host) -> None:
        """Hold the row's ids from the next step on: while it thinks plainly with an idle scanner, or solves
        with no forced id due (``RowState.tokens_before_forcing``, as V1's ``_Row.catch_up`` skips); never with
        a bias (soft) or trials (early-exit)."""
        state = host.state
        scanner = state.scanner
        if state.done or state.mode.trials or state.mode.bias_start(state.budget.think) is not None:
            return
        thinking = state.phase == THINK
        if thinking and not getattr(scanner, "idle", False):
            return
        ahead = state.plain_ahead() if thinking else state.tokens_before_forcing() - 1
        if ahead <= 0:
            return
        specials = sorted(state.phase_ids())
        if len(specials) > self.specials.shape[1]:
            pad = np.full((len(self.on), len(specials) - self.specials.shape[1]), -2, dtype=np.int64)
            self.specials = np.concatenate([self.specials, pad], axis=1)
        self.specials[slot] = -2
        self.specials[slot, : len(specials)] = specials
        number = 0
        if thinking:
            number = next((k for k, table in self.tables.items() if table is scanner.quiet), None)
            if number is None:
                number, self._numbers = self._numbers, self._numbers + 1
                self.tables[number] = scanner.quiet
            self.users[number] = self.users.get(number, 0) + 1
        self.on[slot], self.count[slot], self.until[slot] = True, 0, min(ahead, self.CAP)
        self.seen[slot], self.table[slot], self.scan[slot] = host.seen, number, thinking
