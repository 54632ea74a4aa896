"""The vLLM logits processor for model runner V2 (vLLM 0.32+), and the one class vLLM is given.

    LLM(model=path, logits_processors=[AnyRunnerProcessor])   # runner V1 or V2, whichever vLLM picks

Runner V2 calls a processor once per step for the whole batch: a logits row is not a request
(``ctx.expanded_idx_mapping`` maps rows to persistent request *slots*, reused after a request ends,
and the rows are reordered every step), and the committed token ids stay on the device. So each
slot's :class:`~e1.engine.row_state.RowState` lives here as numbers in device tensors — phase,
thinking and solution counts, the last few ids (for multi-token markers), the forced queue, the
mode's constants and soft's bias curve — and :meth:`V2BudgetProcessor.apply` advances every row by
the id it fed this step (``ctx.input_ids`` at ``ctx.pos``) with tensor operations: no host sync, no
Python per row, the same kernels at any batch size. The step runs the budget rules of
:mod:`e1.engine.rules` on tensors, the very functions ``RowState.accept`` runs on numbers (what is the step's
own is the bookkeeping: slots, positions, the queue as template spans; tests/test_vllm_v2_processor.py drives
both executors over generated streams and compares every step).

On a GPU each tensor operation is a kernel launch, so a step is kept to few: one gather per table
and one write back of what changed; the forced queue as spans of the request's forced texts (no
copied buffer); every marker pattern matched in one comparison; soft's bias added by the same gather
and scatter that force. Each request sets bits on the host when it is written (a forced queue,
"Wait", a grace window, soft's bias, truncate's cap, markers of several ids, several EOS ids), and a
step runs only the parts its slots' bits ask for (read on the host: no sync): 38 to 113 ops per
step whatever the batch, where the first version dispatched 328 (the tests count them).

A request's state starts on the host, as the V1 processor builds it (``history`` replayed; after a
preemption also the output the runner re-fills it with), then is written to its slot. Runner V2 admits
a request without its prompt: a state that needs it (``reads_prompt``: the server's budgeted requests)
is built in ``apply_staged_writes`` from the prompt on the device. What new slots need of their ids
comes back in one read per step that admits such requests.
Modes that read text (``stop=`` patterns, early-exit's trials) or a bias no curve describes keep
their RowState on the host: a step with such rows reads their ids back (one sync) and runs them as
the V1 processor does; a stop row that thinks plainly (its id quiet for its pattern) or solves with
nothing due is held back as arrays over the slots (``HeldRows``), with no Python for it that step.
"""

from __future__ import annotations

import numpy as np
import torch
from vllm.v1.sample.logits_processor import LogitsProcessor as V1Interface
from vllm.v1.worker.gpu.sample.logits_processor import (
    LogitsContext,
    LogitsProcessor,
    LogitsProcRequestState,
)

from e1.engine.row_state import RowState
from e1.engine.rules import (
    at_cut,
    end_bias,
    end_due,
    end_queue,
    marker_hits,
    over_cap,
    partial_end,
    queue_jump,
    queue_start,
    torch_ops,
    wait_replaces,
)
from e1.engine.vllm.held import HeldRows
from e1.engine.vllm.processor import ARGMAX, BudgetProcessor, RequestStates
from e1.engine.vllm.v2_slots import (
    ANY,
    BIAS,
    CAP,
    CONSTANT,
    CURVE,
    EOS_SET,
    EXP,
    GRACE,
    MARKS,
    MUTABLE,
    NEVER,
    QUEUE,
    WAIT,
    export,
    match_rows,
    pad,
)

TORCH = torch_ops()  # the rules' ops on [R] tensors


class V2BudgetProcessor(RequestStates, LogitsProcessor):
    """Forces end markers and EOS per request slot on model runner V2, as each request's RowState would."""

    def __init__(self, vllm_config, req_states: LogitsProcRequestState):
        if getattr(vllm_config, "speculative_config", None) is not None:
            raise ValueError(
                "e1's logits processor follows one committed token per request and step: "
                "it does not run with speculative decoding (e1's --speculative runs a drafter without it: "
                "docs/backends.md)"
            )
        super().__init__(vllm_config)
        self.req, self.device, n = req_states, req_states.device, req_states.max_num_reqs
        self.mutable = torch.zeros(n, len(MUTABLE), dtype=torch.int64, device=self.device)  # [S, M]
        self.constant = torch.zeros(n, len(CONSTANT), dtype=torch.int64, device=self.device)  # [S, C]
        self.curve = torch.zeros(n, len(CURVE), dtype=torch.float64, device=self.device)  # [S, 5]
        # id tables, widened as requests need: the forced texts (see ``export``), the EOS ids, the last
        # (width - 1) ids (right-aligned) and the marker patterns (rules.marker_patterns as ``match_rows``)
        self.template = torch.zeros(n, 1, dtype=torch.int64, device=self.device)  # [S, T]
        self.eos_set = torch.full((n, 1), NEVER, dtype=torch.int64, device=self.device)  # [S, E]
        self.tail = torch.full((n, 0), ANY, dtype=torch.int64, device=self.device)  # [S, width - 1]
        self.marks = torch.tensor(match_rows((), (), 1), device=self.device).repeat(n, 1, 1)  # [S, width + 1, width]
        self.needs = np.zeros(n, dtype=np.int64)  # each slot's bits (QUEUE, ...), on the host
        self.sentence_mask = torch.zeros(req_states.vocab_size, dtype=torch.bool, device=self.device)
        self.on_device = np.zeros(n, dtype=bool)  # slots run here; the host's copy (no sync to skip a step)
        self.on_host: dict[int, HostRow] = {}
        self.held = HeldRows(n)  # host rows thinking plainly with a stop pattern: their quiet ids held back
        self._staged: dict[int, tuple] = {}  # slot -> (params whose state waits for its prompt, else None; the state)
        self._sentence_set: frozenset[int] | None = None

    def add_request(self, req_idx: int, sampling_params) -> bool:
        self.on_host.pop(req_idx, None)
        self.held.drop(req_idx)
        self.on_device[req_idx] = False
        if self.reads_prompt(sampling_params):  # its state is built once the prompt is on the device
            self._staged[req_idx] = (sampling_params, None)
            return True
        self._staged[req_idx] = (None, state := self.request_state(sampling_params, None))
        return state is not None

    def apply_staged_writes(self) -> None:
        """Each new request's state (built now if it reads its prompt), caught up with what its slot was
        filled with, into its slot. The ids it needs, of every such slot, come back in one read."""
        if not self._staged:
            return
        staged, self._staged = self._staged, {}
        read = self._read_back(staged)
        slots, states, seen = [], [], []
        for slot, (params, state) in staged.items():
            prompt, prefill = int(self.req.prompt_len.np[slot]), int(self.req.prefill_len.np[slot])
            output = read.get(slot, [])
            if params is not None:  # read from position 0: the prompt, then any output
                state, output = self.request_state(params, output[:prompt]), output[prompt:]
            if state is not None and output and not state.done:  # resumed after a preemption
                state.extend(output)
            if state is not None and self._needs_host(state):
                self.on_host[slot] = HostRow(state, prefill)
                state = None
            slots.append(slot)
            states.append(state)
            seen.append(prefill)
            self.on_device[slot] = state is not None
        self._write(slots, states, seen)

    def _read_back(self, staged: dict) -> dict[int, list[int]]:
        """The ids each staged slot needs from the device, from its first needed position on: its prompt
        and any output if its state reads the prompt, else the output it was re-filled with after a
        preemption. One gather and one read for all of them (none when no slot needs any)."""
        want = {}  # slot -> (first, stop) of its ids
        for slot, (params, state) in staged.items():
            prompt, prefill = int(self.req.prompt_len.np[slot]), int(self.req.prefill_len.np[slot])
            if params is not None or (state is not None and prefill > prompt):
                want[slot] = (0 if params is not None else prompt, prefill)
        if not want:
            return {}
        lengths = np.array([stop - first for first, stop in want.values()], dtype=np.int64)  # [N]
        starts = np.array([first for first, _ in want.values()], dtype=np.int64)  # [N]
        rows = np.repeat(np.array(list(want), dtype=np.int64), lengths)  # [T] each id's slot
        ends = np.cumsum(lengths)  # [N]
        columns = np.arange(ends[-1]) - np.repeat(ends - lengths - starts, lengths)  # [T] each id's position
        flat = self.req.all_token_ids.gpu[
            torch.from_numpy(rows).to(self.device), torch.from_numpy(columns).to(self.device)
        ].tolist()  # the one read
        return {slot: flat[end - length : end] for slot, end, length in zip(want, ends.tolist(), lengths.tolist())}

    def _needs_host(self, state: RowState) -> bool:
        """Whether ``state`` reads text, has notes or a bias the device cannot compute (then it runs on the host)."""
        if (
            state.stop is not None
            or state.mode.trials
            or state.notes
            or state.mode.bias_curve(state.budget.think) is None
        ):
            return True
        if not state.mode.grace:
            return False
        if self._sentence_set is None:  # the served tokenizer's, the same for every request
            self._sentence_set = state.sentence_ends
            ids = torch.tensor([i for i in state.sentence_ends if 0 <= i < len(self.sentence_mask)], dtype=torch.int64)
            self.sentence_mask[ids.to(self.device)] = True
        return state.sentence_ends != self._sentence_set

    def _write(self, slots: list[int], states: list[RowState | None], seen: list[int]) -> None:
        """Slot numbers from host states (None: a slot this processor leaves alone), one copy per table."""
        exported = [export(state, seen_at) for state, seen_at in zip(states, seen)]
        self._widen(
            max(e.width for e in exported),
            max(len(e.template) for e in exported) + 1,
            max(len(e.eos_set) for e in exported),
        )
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)

        def put(table: torch.Tensor, rows: list) -> None:
            table.index_put_(
                (index,), torch.tensor(rows, dtype=table.dtype).reshape(len(slots), *table.shape[1:]).to(self.device)
            )

        put(self.mutable, [e.mutable for e in exported])
        put(self.constant, [e.constant for e in exported])
        put(self.curve, [e.curve for e in exported])
        put(self.template, [pad(e.template, self.template.shape[1], 0, right=False) for e in exported])
        put(self.eos_set, [pad(e.eos_set, self.eos_set.shape[1], NEVER, right=False) for e in exported])
        width = self.marks.shape[2]
        put(self.tail, [pad(e.tail[max(0, len(e.tail) - width + 1) :], width - 1, ANY, right=True) for e in exported])
        put(self.marks, [match_rows(e.end, e.start, width) for e in exported])
        self.needs[slots] = [e.needs for e in exported]

    def _widen(self, width: int, template: int, eos: int) -> None:
        """Grow the id tables to markers of ``width`` ids, ``template`` forced ids and ``eos`` EOS ids."""
        if template > self.template.shape[1]:
            self.template = _grown(self.template, template, 0, right=False)
        if eos > self.eos_set.shape[1]:
            self.eos_set = _grown(self.eos_set, eos, NEVER, right=False)
        old = self.marks.shape[2]
        if width > old:  # the old slots' markers are shorter: their rows for the longer prefixes match nothing
            self.tail = _grown(self.tail, width - 1, ANY, right=True)
            marks = torch.tensor(match_rows((), (), width), device=self.device).repeat(len(self.marks), 1, 1)
            marks[:, : old + 1, width - old :] = self.marks
            self.marks = marks

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        if self.on_host and any(slot in self.on_host for slot in ctx.idx_mapping_np.tolist()):
            self._apply_host(logits, ctx)
        if not self.on_device[ctx.idx_mapping_np].any():
            return logits
        needs = int(np.bitwise_or.reduce(self.needs[ctx.idx_mapping_np]))  # what this batch's slots can need
        slots = ctx.expanded_idx_mapping  # [R] row -> slot
        state = self._gather(slots, needs)
        step(state, ctx.input_ids, ctx.pos, needs, self.sentence_mask)
        self.mutable.index_put_((slots,), torch.stack([state[name] for name in MUTABLE], dim=1))  # [R, M]
        if needs & MARKS:
            self.tail.index_put_((slots,), state["tail"])
        force(logits, state, needs)
        return logits

    def _gather(self, slots: torch.Tensor, needs: int) -> dict[str, torch.Tensor]:
        """The batch's slots as named columns (views of one gather per table the batch needs)."""
        state = dict(zip(MUTABLE, self.mutable.index_select(0, slots).unbind(1)))  # [R] each
        state.update(zip(CONSTANT, self.constant.index_select(0, slots).unbind(1)))
        if needs & BIAS:
            state.update(zip(CURVE, self.curve.index_select(0, slots).unbind(1)))
        if needs & QUEUE:
            # the table and the rows' slots, not a copy of their rows: a step reads one id per row (the
            # template is as wide as the longest forced text any request brought, up to the exit-text gate)
            state["template"], state["slots"] = self.template, slots
        if needs & EOS_SET:
            state["eos_set"] = self.eos_set.index_select(0, slots)  # [R, E]
        if needs & MARKS:
            state["tail"], state["marks"] = self.tail.index_select(0, slots), self.marks.index_select(0, slots)
        return state

    def _apply_host(self, logits: torch.Tensor, ctx: LogitsContext) -> None:
        """The rows whose state is on the host: their ids read back (one sync), then as the V1 processor; a
        stop row thinking plainly holds its quiet ids back (``HeldRows``: no Python for it this step)."""
        rows = [row for row, slot in enumerate(ctx.idx_mapping_np.tolist()) if slot in self.on_host]
        where = torch.tensor(rows, dtype=torch.int64, device=logits.device)
        ids, positions = torch.stack([ctx.input_ids[where].long(), ctx.pos[where].long()]).cpu().numpy()
        slots = ctx.idx_mapping_np[rows].astype(np.int64)
        looked = self.held.take(slots, ids, positions)  # [H]
        forced, biased = [], []
        for row, slot, token, position in zip(
            np.array(rows)[looked].tolist(), slots[looked].tolist(), ids[looked].tolist(), positions[looked].tolist()
        ):
            host = self.on_host[slot]
            self.held.release(slot, host)
            host.feed(token, position)
            if (token := host.forced()) is not None:
                forced.append((row, token))
            elif bias := host.state.end_bias():
                biased.append((row, host.state.markers.end_ids[0], bias))
            else:
                self.held.enter(slot, host)
        if biased:
            index, column, bias = (torch.tensor(values, device=logits.device) for values in zip(*biased))
            logits[index, column] += bias.to(logits.dtype)
        if forced:
            index = torch.tensor([r for r, _ in forced], device=logits.device)  # [F]
            token = torch.tensor([t for _, t in forced], device=logits.device)  # [F]
            token = torch.where(token == ARGMAX, logits[index].argmax(dim=1), token)  # a trial answer: greedy
            logits[index] = float("-inf")
            logits[index, token] = 0.0


class AnyRunnerProcessor(V1Interface, LogitsProcessor):
    """Both vLLM interfaces at once: runner V1 builds it as ``(vllm_config, device, pin_memory)`` and
    gets :attr:`V1` (:class:`BudgetProcessor`), runner V2 as ``(vllm_config, req_states)`` and gets
    :attr:`V2` (:class:`V2BudgetProcessor`); so e1 never has to know (or set) which runner vLLM picks.
    The server's (e1.serve) is this class with its own pair."""

    V1: type = BudgetProcessor
    V2: type = V2BudgetProcessor

    def __new__(cls, vllm_config, *args):
        return (cls.V2 if len(args) == 1 else cls.V1)(vllm_config, *args)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        cls.V1.validate_params(sampling_params)  # both runners' classes check requests alike


class HostRow:
    """A request whose RowState stays on the host; ``seen``: the next position whose id it takes."""

    __slots__ = ("eos", "seen", "state")

    def __init__(self, state: RowState, seen: int):
        self.state, self.seen, self.eos = state, seen, min(state.markers.eos_ids)

    def feed(self, token: int, position: int) -> None:
        if position == self.seen:
            self.seen += 1
            if not self.state.done:
                self.state.extend([token])

    def forced(self) -> int | None:
        state = self.state
        if state.done or state.rollback:
            return self.eos
        return ARGMAX if state.trial_answering else state.forced_token()


def _grown(table: torch.Tensor, width: int, fill: int, right: bool) -> torch.Tensor:
    """``table`` [S, w] in ``width`` columns, ``fill`` in the new ones (on the left for a right-aligned table)."""
    filler = torch.full((len(table), width - table.shape[1]), fill, dtype=table.dtype, device=table.device)
    return torch.cat([filler, table] if right else [table, filler], dim=1)


def step(s: dict, token: torch.Tensor, pos: torch.Tensor, needs: int, sentence_mask: torch.Tensor) -> None:
    """RowState.accept for every row whose input id at ``pos`` is the next one its slot has not taken;
    ``needs``: the OR of the rows' bits (the parts no row needs are left out)."""
    # [R] the rows that take an id (earlier positions: a prefill chunk, taken already); a finished row goes
    # on too, as what it counts no longer matters: it is forced EOS from now on
    new = pos == s["seen"]
    s["seen"] = s["seen"] + new
    thinking = s["solving"] == 0
    if needs & MARKS:  # the last ids with the sampled one, against the pattern table (rules.marker_patterns)
        hits = matches(s, token)
    else:  # markers of one id: the table is (end, start), matched by the new id alone (no prefix: partial 0)
        hits = (token == s["end_last"], token == s["start_last"])
    end_hit, start_hit = marker_hits(hits)
    appended, sampled, waited = token, new, None
    if needs & QUEUE:
        queued = s["qp"] < s["qe"]
        if needs & WAIT:  # s1's wait=k: a natural end becomes "Wait" (its first id appended now)
            wait = wait_replaces(new & ~queued & thinking, s["waits"], end_hit, s["think"], s["wait_below"])
            s["waits"] = s["waits"] - wait.long()
            s["qp"], s["qe"] = torch.where(wait, s["wait_at"], s["qp"]), torch.where(wait, s["wait_stop"], s["qe"])
            s["next"] = torch.where(wait, s["wait_first"], s["next"])
            queued = queued | wait
            waited = new & queued & (s["qp"] >= s["wait_at"])  # a "Wait" id appended: thinking
        popping = new & queued
        appended = torch.where(popping, s["next"], token)  # what RowState appends
        sampled = new ^ popping
        s["qp"] = s["qp"] + popping
        emptied = popping & (s["qp"] >= s["qe"])
        if needs & WAIT and needs & MARKS:  # a "Wait" id appended instead: the end marker's prefixes it ends
            hits = matches(s, appended)
    think_rows = sampled & thinking
    s["think"] = s["think"] + (think_rows if waited is None else think_rows | waited)
    s["solve"] = s["solve"] + (sampled ^ think_rows)
    eos = sampled & (appended == s["eos"] if not needs & EOS_SET else (appended[:, None] == s["eos_set"]).any(dim=1))
    thought = think_rows & ~eos
    natural = thought & end_hit  # RowState._after_think: EOS first, then the end marker, then the start marker
    still = thought ^ natural  # thinking goes on after this id
    s["opened"] = s["opened"] | (still & start_hit)  # a start marker written after thinking opened changes nothing
    at_limit = at_cut(s["think"], s["limit"])
    if needs & GRACE:  # the end is due at the cut, past a grace window's sentence end (sampled: the id appended)
        due = still & end_due(at_limit, s["think"], s["grace_at"], sentence_mask[token])
    else:  # no window: grace_at is the cut, so end_due is at_limit itself
        due = still & at_limit
    ended = (s["seen"] >= s["room_at"]) | (s["solve"] >= s["solve_at"]) | eos  # the room, s, EOS end the row
    if needs & CAP:  # truncate: t + s over the whole output
        ended = ended | ((still | (sampled ^ think_rows)) & over_cap(s["think"], s["solve"], s["cap"]))
    s["done"] = s["done"] | ended
    s["finished"] = s["done"] > 0  # [R] bool, for force
    if needs & QUEUE:
        if waited is not None:  # a complete "Wait" at the limit: the end is due
            due = due | (emptied & waited & at_limit)
            emptied = emptied & ~waited
        s["solving"] = s["solving"] | natural | emptied  # the forced end marker (and answer prompt) complete
        _force_end(s, due, needs, partial_end(hits, TORCH))
        head = s["template"][s["slots"], s["qp"]]  # [R]: each row's queue head, one id per row
        s["next"] = torch.where(s["finished"], s["eos"], head)
    else:
        s["solving"] = s["solving"] | natural
    if needs & MARKS:
        s["tail"] = torch.where(new[:, None], torch.cat([s["tail"][:, 1:], appended[:, None]], dim=1), s["tail"])


def matches(s: dict, token: torch.Tensor) -> tuple:
    """Which marker patterns (rules.marker_patterns) each row's last ids ``tail`` [R, w-1] then ``token`` [R]
    end with: an [R] bool each."""
    return TORCH.matches(torch.cat([s["tail"], token[:, None]], dim=1), s["marks"])  # [R, w] against [R, K, w]


def _force_end(s: dict, due: torch.Tensor, needs: int, partial) -> None:
    """RowState._force_end for the rows in ``due``: the queue of rules.end_queue, the template from 0 or ls to
    stop, jumping from ls to at_end + ``partial`` (the rest of a partly written end marker). The jump
    (rules.queue_jump) runs once a step, after this step's pop or new queue; one-id markers never jump."""
    if needs & MARKS:
        qp, qj, qt, qe = end_queue(s["opened"], partial, s["ls"], s["at_end"], s["stop"], TORCH)
    else:  # markers of one id: nothing of the end marker is written before it
        qp, qe = queue_start(s["opened"], s["ls"]), s["stop"]
    s["qp"] = torch.where(due, qp, s["qp"])
    s["qe"] = torch.where(due, qe, s["qe"])
    if needs & MARKS:
        s["qj"] = torch.where(due, qj, s["qj"])
        s["qt"] = torch.where(due, qt, s["qt"])
        s["qp"] = queue_jump(s["qp"], s["qj"], s["qt"], TORCH)


def bias(s: dict, free: torch.Tensor, needs: int) -> torch.Tensor:
    """Soft's end-marker bias in ``free`` rows (``Mode.end_bias`` from its ``bias_curve``), in float64 as on the
    host: progress (think - begin) / (t - begin), at most 1 (t <= begin: 1, as x / 0 is inf)."""
    think = s["think"].to(torch.float64)
    curve = (s["begin"], s["span"], s["strength"], s["rate"], s["scale"])
    return end_bias(free, think, *curve, ops=TORCH, shaped=bool(needs & EXP))


def force(logits: torch.Tensor, s: dict, needs: int) -> None:
    """Leave only the forced id's logit finite (0) in forced rows (EOS once done, else the queue's head);
    add soft's bias to the end marker's first id in the others, while thinking. One gather, one scatter."""
    forced = s["finished"]
    if needs & QUEUE:
        forced = forced | (s["qp"] < s["qe"])
    column = s["next"] if needs & QUEUE else s["eos"]
    if needs & BIAS:
        column = torch.where(forced, column, s["end_first"])
    column = column[:, None]  # [R, 1]
    value = logits.gather(1, column)  # [R, 1]
    if needs & BIAS:
        value = value + bias(s, ~forced & (s["solving"] == 0), needs).to(logits.dtype)[:, None]
    forced = forced[:, None]  # [R, 1]
    logits.masked_fill_(forced, float("-inf"))  # [R, V]
    logits.scatter_(1, column, value.masked_fill(forced, 0.0))
