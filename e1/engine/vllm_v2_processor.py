"""The vLLM logits processor for model runner V2 (vLLM 0.32+), and the one class vLLM is given.

    LLM(model=path, logits_processors=[AnyRunnerProcessor])   # runner V1 or V2, whichever vLLM picks

Runner V2 calls a processor once per step for the whole batch: a logits row is not a request
(``ctx.expanded_idx_mapping`` maps rows to persistent request *slots*, reused after a request ends,
and the rows are reordered every step), and the committed token ids stay on the device. So each
slot's :class:`~e1.engine.row_state.RowState` lives here as numbers in device tensors — phase,
thinking and solution counts, the last few ids (for multi-token markers), the forced queue, the
mode's constants and soft's bias curve — and :meth:`V2BudgetProcessor.apply` advances every row by
the id it fed this step (``ctx.input_ids`` at ``ctx.pos``) with tensor operations: no host sync, no
Python per row, the same kernels at any batch size. The step is ``RowState.accept`` transcribed
(tests/test_vllm_v2_processor.py drives both over generated streams and compares every step).

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
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcessor, LogitsProcRequestState

from e1.engine.row_state import DONE, SOLVE, T_ANSWER, T_MARKER, T_THINK, THINK, RowState
from e1.engine.vllm_held import HeldRows
from e1.engine.vllm_processor import ARGMAX, BudgetProcessor, RequestStates

PHASES = {THINK: 0, SOLVE: 1, DONE: 2}
P_THINK, P_SOLVE, P_DONE = 0, 1, 2
NONE = 1 << 62  # "no cap" (truncate's t + s is the only whole-output cap)
# per-slot numbers: what changes per token, then the request's constants (one int64 column each)
MUTABLE = ("phase", "think", "solve", "written", "waits", "seen", "opened", "qh", "qn")
CONSTANT = ("active", "t", "s", "limit", "room", "cap", "budgeted", "grace", "eos", "end_first", "end_last",
            "end_len", "start_len", "ls", "lx", "le", "la", "lw")
INTS = MUTABLE + CONSTANT
CURVE = ("begin", "strength", "rate")  # soft's bias (float64)
# per-slot id rows, in three tables by width: "L" the last ids, the end marker, its all-but-last prefix
# and the start marker, right-aligned; "W" the forced texts (start | exit | end | answer | wait), the
# forced queue and its kinds; "E" the EOS ids
TABLES = {"L": ("tail", "end_r", "endp_r", "start_r"), "W": ("template", "qbuf", "qkind"), "E": ("eos_set",)}
ROWS = {name: key for key, names in TABLES.items() for name in names}


class V2BudgetProcessor(RequestStates, LogitsProcessor):
    """Forces end markers and EOS per request slot on model runner V2, as each request's RowState would.
    ``holding`` False: every host row is fed one by one each step (the path before ``HeldRows``; benchmarks compare)."""

    holding = True

    def __init__(self, vllm_config, req_states: LogitsProcRequestState):
        if getattr(vllm_config, "speculative_config", None) is not None:
            raise ValueError("e1's logits processor follows one committed token per request and step: "
                             "it does not run with speculative decoding")
        super().__init__(vllm_config)
        self.req, self.device, n = req_states, req_states.device, req_states.max_num_reqs
        self.ints = torch.zeros(n, len(INTS), dtype=torch.int64, device=self.device)  # [S, F]
        self.floats = torch.zeros(n, len(CURVE), dtype=torch.float64, device=self.device)  # [S, 3]
        self.tables = {key: torch.full((n, len(names), 1), -1, dtype=torch.int64, device=self.device)  # [S, k, width]
                       for key, names in TABLES.items()}
        self.sentence_mask = torch.zeros(req_states.vocab_size, dtype=torch.bool, device=self.device)
        self.on_device = np.zeros(n, dtype=bool)  # slots run here; the host's copy (no sync to skip a step)
        self.on_host: dict[int, HostRow] = {}
        self.held = HeldRows(n)  # host rows thinking plainly with a stop pattern: their quiet ids held back
        self._staged: dict[int, tuple] = {}  # slot -> (params whose state waits for its prompt, else None; the state)
        self._sentence_set: frozenset[int] | None = None

    def add_request(self, req_idx: int, sampling_params) -> bool:
        self.on_host.pop(req_idx, None)
        self.held.on[req_idx] = False
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
        flat = self.req.all_token_ids.gpu[torch.from_numpy(rows).to(self.device),
                                          torch.from_numpy(columns).to(self.device)].tolist()  # the one read
        return {slot: flat[end - length : end] for slot, end, length in zip(want, ends.tolist(), lengths.tolist())}

    def _needs_host(self, state: RowState) -> bool:
        """Whether ``state`` reads text or has a bias the device cannot compute (then it runs on the host)."""
        if state.stop is not None or state.mode.trials or state.mode.bias_curve(state.budget.think) is None:
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
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        self.ints[index] = torch.tensor([e[0] for e in exported], dtype=torch.int64).to(self.device)
        self.floats[index] = torch.tensor([e[1] for e in exported], dtype=torch.float64).to(self.device)
        for key, names in TABLES.items():
            self._widen(key, max((len(e[2][name]) for e in exported for name in names), default=1))
            width = self.tables[key].shape[2]
            values = [[pad(e[2][name], width, right=key == "L") for name in names] for e in exported]
            self.tables[key][index] = torch.tensor(values, dtype=torch.int64).reshape(len(slots), len(names), width).to(self.device)

    def _widen(self, key: str, width: int) -> None:
        """Grow table ``key`` to ``width`` columns (ids padded with -1: the right-aligned table on the left)."""
        table = self.tables[key]
        if width > table.shape[2]:
            filler = torch.full((*table.shape[:2], width - table.shape[2]), -1, dtype=table.dtype, device=self.device)
            self.tables[key] = torch.cat([filler, table] if key == "L" else [table, filler], dim=2)

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        if self.on_host and any(slot in self.on_host for slot in ctx.idx_mapping_np.tolist()):
            self._apply_host(logits, ctx)
        if not self.on_device[ctx.idx_mapping_np].any():
            return logits
        slots = ctx.expanded_idx_mapping.long()  # [R] row -> slot
        state = self._gather(slots)
        step(state, ctx.input_ids.long(), ctx.pos.long(), self.sentence_mask)
        self.ints[slots] = torch.stack([state[name] for name in INTS], dim=1)  # [R, F]
        self.tables["L"][slots, 0] = state["tail"]
        self.tables["W"][slots, 1:] = torch.stack([state["qbuf"], state["qkind"]], dim=1)
        force(logits, state)
        return logits

    def _gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """The batch's slots as named columns (views of one gather per table)."""
        ints, floats = self.ints[slots], self.floats[slots]  # [R, F], [R, 3]
        state = {name: ints[:, i] for i, name in enumerate(INTS)}
        state.update((name, floats[:, i]) for i, name in enumerate(CURVE))
        for key, names in TABLES.items():
            table = self.tables[key][slots]  # [R, k, width]
            state.update((name, table[:, i]) for i, name in enumerate(names))
        return state

    def _apply_host(self, logits: torch.Tensor, ctx: LogitsContext) -> None:
        """The rows whose state is on the host: their ids read back (one sync), then as the V1 processor; a
        stop row thinking plainly holds its quiet ids back (``HeldRows``: no Python for it this step)."""
        rows = [row for row, slot in enumerate(ctx.idx_mapping_np.tolist()) if slot in self.on_host]
        where = torch.tensor(rows, dtype=torch.int64, device=logits.device)
        ids, positions = torch.stack([ctx.input_ids[where].long(), ctx.pos[where].long()]).cpu().numpy()
        slots = ctx.idx_mapping_np[rows].astype(np.int64)
        looked = self.held.take(slots, ids, positions) if self.holding else np.ones(len(rows), dtype=bool)  # [H]
        forced, biased = [], []
        for row, slot, token, position in zip(np.array(rows)[looked].tolist(), slots[looked].tolist(),
                                              ids[looked].tolist(), positions[looked].tolist()):
            host = self.on_host[slot]
            self.held.release(slot, host)
            host.feed(token, position)
            if (token := host.forced()) is not None:
                forced.append((row, token))
            elif bias := host.state.end_bias():
                biased.append((row, host.state.markers.end_ids[0], bias))
            elif self.holding:
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


def export(state: RowState | None, seen: int) -> tuple[list[int], list[float], dict[str, list[int]]]:
    """A host RowState as a slot's numbers: (MUTABLE + CONSTANT ints, CURVE floats, ROWS ids)."""
    if state is None:
        return [0] * len(INTS), [0.0] * len(CURVE), {name: [] for name in ROWS}
    markers, mode, budget = state.markers, state.mode, state.budget
    start, end, wait = list(markers.start_ids), list(markers.end_ids), list(markers.wait_ids)
    lines = list(markers.newline_ids) if mode.answer_prompt and mode.answer_lines else []  # s1's "\n" around the marker
    exit_text = list(state.exit_ids) + lines  # what RowState._force_end queues before the end marker ...
    answer = lines + list(markers.answer_ids) if mode.answer_prompt else []  # ... and after it
    queue = state.queued()
    ints = {"phase": PHASES[state.phase], "think": state.think_tokens, "solve": state.solve_tokens,
            "written": len(state.tokens), "waits": state.waits_left, "seen": seen, "opened": int(state.opened),
            "qh": 0, "qn": len(queue), "active": 1, "t": budget.think, "s": budget.solve, "limit": state.think_limit,
            "room": state.max_new_tokens, "cap": NONE if state.total_cap is None else state.total_cap,
            "budgeted": int(state.budgeted), "grace": mode.grace, "eos": min(markers.eos_ids), "end_first": end[0],
            "end_last": end[-1], "end_len": len(end), "start_len": len(start), "ls": len(start),
            "lx": len(exit_text), "le": len(end), "la": len(answer), "lw": len(wait)}
    width = max(len(start), len(end), 1)
    rows = {"tail": state.tokens[-width:], "end_r": end, "endp_r": end[:-1], "start_r": start,
            "eos_set": sorted(markers.eos_ids), "template": start + exit_text + end + answer + wait,
            "qbuf": [token for token, _ in queue], "qkind": [kind for _, kind in queue]}
    return [ints[name] for name in INTS], list(mode.bias_curve(budget.think)), rows


def pad(ids: list[int], width: int, right: bool) -> list[int]:
    """``ids`` in ``width`` columns, -1 elsewhere: right-aligned (a tail, a suffix to match) or left-aligned."""
    fill = [-1] * (width - len(ids))
    return fill + ids if right else ids + fill


def ends_with(tail: torch.Tensor, pattern: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """Per row: do the last ids end with the right-aligned ``pattern`` of ``length`` ids (0: never, as RowState)."""
    columns = torch.arange(tail.shape[1], device=tail.device)  # [L]
    outside = columns[None, :] < tail.shape[1] - length[:, None]  # [R, L]
    return ((tail == pattern) | outside).all(dim=1) & (length > 0)  # [R]


def set_queue(s: dict, mask: torch.Tensor, before, start, stop, head) -> None:
    """Rows in ``mask`` get a fresh forced queue, template[:before] then template[start:stop], from ``head`` on."""
    columns = torch.arange(s["template"].shape[1], device=mask.device)[None, :]  # [1, W]
    source = torch.where(columns < before[:, None], columns, start[:, None] + columns - before[:, None])  # [R, W]
    source = source.clamp(0, s["template"].shape[1] - 1)
    answer_at = (s["ls"] + s["lx"] + s["le"])[:, None]
    kinds = torch.where(source >= answer_at + s["la"][:, None], T_THINK, torch.where(source >= answer_at, T_ANSWER, T_MARKER))
    s["qbuf"] = torch.where(mask[:, None], s["template"].gather(1, source), s["qbuf"])
    s["qkind"] = torch.where(mask[:, None], kinds, s["qkind"])
    s["qh"] = torch.where(mask, head, s["qh"])
    s["qn"] = torch.where(mask, before + stop - start, s["qn"])


def end_queue(s: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """RowState._force_end's queue as template spans (before, start, stop): the exit text and end marker
    (or the rest of a partly written marker), the start marker first if thinking never opened, s1's
    answer prompt after."""
    tail, width = s["tail"], s["tail"].shape[1]
    at_end = s["ls"] + s["lx"]  # the end marker's place in the template
    partial = torch.zeros_like(s["le"])
    for k in range(1, width):  # the longest proper prefix of the end marker the ids end with (k: marker ids, not rows)
        columns = (at_end[:, None] + torch.arange(k, device=tail.device)).clamp(max=s["template"].shape[1] - 1)
        match = (tail[:, width - k:] == s["template"].gather(1, columns)).all(dim=1) & (k < s["le"])
        partial = torch.where(match, k, partial)
    before = torch.where(s["opened"] > 0, 0, s["ls"])
    start = torch.where(partial > 0, at_end + partial, s["ls"])
    return before, start, at_end + s["le"] + s["la"]


def step(s: dict, token: torch.Tensor, pos: torch.Tensor, sentence_mask: torch.Tensor) -> None:
    """RowState.accept for every row whose input id at ``pos`` is the next one its state has not taken."""
    fresh = (s["active"] > 0) & (pos == s["seen"])  # [R]; earlier positions: a prefill chunk, taken already
    s["seen"] = torch.where(fresh, s["seen"] + 1, s["seen"])
    new = fresh & (s["phase"] != P_DONE)
    thinking, solving = s["phase"] == P_THINK, s["phase"] == P_SOLVE
    # s1's wait=k: a natural end becomes "Wait" (its first id appended now), judged on the ids before it
    wait = (new & (s["waits"] > 0) & (s["qh"] >= s["qn"]) & thinking & (token == s["end_last"])
            & ((s["end_len"] == 1) | ends_with(s["tail"], s["endp_r"], s["end_len"] - 1)) & (s["think"] + s["lw"] < s["t"]))
    s["waits"] = s["waits"] - wait.long()
    wait_at = s["ls"] + s["lx"] + s["le"] + s["la"]
    popping = new & ((s["qh"] < s["qn"]) | wait)
    head = s["qh"].clamp(max=s["qbuf"].shape[1] - 1)[:, None]
    first_wait = s["template"].gather(1, wait_at.clamp(max=s["template"].shape[1] - 1)[:, None])[:, 0]
    kind = torch.where(wait, T_THINK, s["qkind"].gather(1, head)[:, 0])
    token = torch.where(wait, first_wait, torch.where(popping, s["qbuf"].gather(1, head)[:, 0], token))  # what RowState appends
    s["qh"] = torch.where(wait, 1, s["qh"] + popping.long())
    s["qn"] = torch.where(wait, s["lw"], s["qn"])
    s["tail"] = torch.where(new[:, None], torch.cat([s["tail"][:, 1:], token[:, None]], dim=1), s["tail"])
    s["written"] = s["written"] + new.long()
    due = _popped(s, popping, kind) | _sampled_thinking(s, new & ~popping & thinking, token, sentence_mask)
    _sampled_solving(s, new & ~popping & solving, token)
    before, start, stop = end_queue(s)
    zero = torch.zeros_like(before)
    set_queue(s, wait | due, torch.where(due, before, zero), torch.where(due, start, wait_at),
              torch.where(due, stop, wait_at + s["lw"]), torch.where(due, zero, 1))  # "Wait": its rest still queued
    s["phase"] = torch.where(new & (s["phase"] != P_DONE) & (s["written"] >= s["room"]), P_DONE, s["phase"])
    s["qh"] = torch.where(s["phase"] == P_DONE, s["qn"], s["qh"])  # a finished row's queue is dropped


def _popped(s: dict, popping: torch.Tensor, kind: torch.Tensor) -> torch.Tensor:
    """A forced id appended: "Wait" is thinking (the end is due when it is complete at the limit); the
    end marker's (and answer prompt's) last id starts the solution. Returns the rows whose end is due."""
    emptied = popping & (s["qh"] >= s["qn"])
    waited = popping & (kind == T_THINK)
    s["think"] = s["think"] + waited.long()
    s["phase"] = torch.where(emptied & ~waited, P_SOLVE, s["phase"])
    return emptied & waited & (s["think"] >= s["limit"])


def _sampled_thinking(s: dict, rows: torch.Tensor, token: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
    """RowState._after_think: EOS ends the row, the end marker thinking, the start marker opens it;
    truncate's cap ends the row. Returns the rows whose end is due: at the limit (past a grace
    window's sentence end)."""
    s["think"] = s["think"] + rows.long()
    eos = (token[:, None] == s["eos_set"]).any(dim=1)
    natural = rows & ~eos & ends_with(s["tail"], s["end_r"], s["end_len"])
    opens = rows & ~eos & ~natural & (s["opened"] == 0) & ends_with(s["tail"], s["start_r"], s["start_len"])
    s["opened"] = torch.where(opens, 1, s["opened"])
    still = rows & ~eos & ~natural
    sentence = sentence_mask[token.clamp(0, len(sentence_mask) - 1)] & (token >= 0)
    at_limit = (s["budgeted"] > 0) & (s["think"] >= s["limit"])
    due = still & at_limit & ((s["grace"] == 0) | sentence | (s["think"] >= s["limit"] + s["grace"]))
    capped = still & ~due & (s["think"] >= s["cap"])
    s["phase"] = torch.where(rows & eos | capped, P_DONE, torch.where(natural, P_SOLVE, s["phase"]))
    return due


def _sampled_solving(s: dict, rows: torch.Tensor, token: torch.Tensor) -> None:
    """RowState._after_solve: EOS, ``s`` solution ids (separate budgets) or truncate's cap end the row."""
    s["solve"] = s["solve"] + rows.long()
    eos = (token[:, None] == s["eos_set"]).any(dim=1)
    full = ((s["budgeted"] > 0) & (s["solve"] >= s["s"])) | (s["think"] + s["solve"] >= s["cap"])
    s["phase"] = torch.where(rows & (eos | full), P_DONE, s["phase"])


def bias(s: dict) -> torch.Tensor:
    """Soft's end-marker bias per row (``Mode.end_bias`` from its ``bias_curve``), in float64 as on the host."""
    think, t = s["think"].double(), s["t"].double()
    begin, strength, rate = s["begin"], s["strength"], s["rate"]
    progress = torch.where(t <= begin, 1.0, ((think - begin) / (t - begin)).clamp(max=1.0))
    progress = torch.where(rate > 0, torch.expm1(rate * progress) / torch.expm1(rate), progress)
    return torch.where((think > begin) & (strength != 0), strength * progress, 0.0)


def forced_tokens(s: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(whether each row's next id is forced, which): EOS once done, else the queue's head."""
    done = s["phase"] == P_DONE
    head = s["qh"].clamp(max=s["qbuf"].shape[1] - 1)[:, None]
    token = torch.where(done, s["eos"], s["qbuf"].gather(1, head)[:, 0])
    return (s["active"] > 0) & (done | (s["qh"] < s["qn"])), token.clamp(min=0)


def force(logits: torch.Tensor, s: dict) -> None:
    """Leave only the forced id's logit finite (0) in forced rows; add soft's bias in the others."""
    forced, token = forced_tokens(s)  # [R], [R]
    keep = logits.gather(1, token[:, None])  # [R, 1]
    logits.masked_fill_(forced[:, None], float("-inf"))  # [R, V]
    logits.scatter_(1, token[:, None], torch.where(forced[:, None], 0.0, keep))
    free = (s["active"] > 0) & ~forced & (s["phase"] == P_THINK)
    raised = torch.where(free, bias(s), 0.0).to(logits.dtype)  # [R]
    logits.scatter_add_(1, s["end_first"].clamp(min=0)[:, None], raised[:, None])
