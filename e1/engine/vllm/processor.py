"""The vLLM V1 logits processor behind the vLLM backend's single-pass budgeted decoding.

vLLM loads it by name (it must live in an importable module, not in a script):

    LLM(model=path, logits_processors=[BudgetProcessor])
    SamplingParams(max_tokens=..., extra_args={"e1": budget_args(budget, mode, markers, markers.prompt_thinking(prompt), room)})

Each request that carries ``extra_args["e1"]`` gets its own :class:`~e1.engine.row_state.RowState` —
the same phase machine the transformers backend runs. Before every forward pass vLLM hands
this processor each request's running list of output ids; the new ones are fed to the row's
state (``accept``), so the state always knows the next forced token. ``apply`` then leaves
only that token's logit finite: the end marker when thinking reaches ``t`` (and s1's
"Final Answer:"), and EOS once the state is done (the solution reached ``s``), which makes
vLLM stop the request. A forced token is fed through the running KV cache like a sampled
one: nothing is prefilled twice. Requests without ``extra_args["e1"]`` are left alone.

``history`` (optional) replays ids that the request's prompt already continues — used by
budget-forcing with ``wait=k``, whose replaced natural ends need a new call (see vllm_engine.py).
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import torch
from vllm.v1.sample.logits_processor import (
    BatchUpdate,
    LogitsProcessor,
    MoveDirectionality,
)

from e1.budget import Budget
from e1.engine.markers import Markers
from e1.engine.modes import Mode
from e1.engine.row_state import RowState

KEY = "e1"
ARGMAX = -2  # _Row.forced: force the best token (a trial answer's greedy pick)
_LAST = itemgetter(-1)


def budget_args(
    budget: Budget,
    mode: Mode,
    markers: Markers,
    prompt_thinking: str,
    room: int,
    history: list[int] = (),
    exit_ids: tuple[int, ...] = (),
    state=None,
) -> dict:
    """The per-request settings, as plain JSON-able values (they cross process boundaries): the mode
    as its text (``str(mode)``, read back by ``Mode.parse``), the ids its texts became with the model's
    tokenizer, and the row's history. A grace window's sentence ends are not sent: the processor reads
    them off the model's tokenizer (and a stop pattern's matcher is built there too). ``state``: the row's
    state, whose notes (ids an option forces into the thinking) travel with it, and early-exit's trials."""
    return {
        "think": budget.think,
        "solve": budget.solve,
        "mode": str(mode),
        "start": list(markers.start_ids),
        "end": list(markers.end_ids),
        "eos": sorted(markers.eos_ids),
        "pad": markers.pad_id,
        "wait_ids": list(markers.wait_ids),
        "answer": list(markers.answer_ids),
        "newline": list(markers.newline_ids),
        "exit": list(exit_ids),
        "thinking": prompt_thinking,
        "room": room,
        "history": list(history),
        "notes": [[at, list(ids)] for at, ids in (state.notes if state is not None else ())],
        **(early_exit_args(state) if mode.trials else {}),
    }


def request_args(params) -> dict | None:
    """A request's ``budget_args`` (None: the processor leaves it alone). They come as a dict from the
    offline engine, or as its JSON text from e1's server (vLLM's OpenAI API takes no nested objects
    in ``vllm_xargs``: :mod:`e1.serve.rounds` sends its early-exit rounds so)."""
    args = (params.extra_args or {}).get(KEY)
    if isinstance(args, str):
        import json

        try:
            args = json.loads(args)
        except ValueError as err:
            raise ValueError(f"extra_args[{KEY!r}] is not JSON: {err}") from None
    if args is not None and not isinstance(args, dict):
        raise ValueError(f"extra_args[{KEY!r}] must be an object of e1's settings")
    return args


def early_exit_args(state) -> dict:
    """early-exit's row: its transitions as ids; ``trial_now``: the request must begin with the trial due
    at the end of its history (a followed prefix stopped there, or recipe=deer's trial before ``held``,
    the sampled id it holds), whose other trials already ran."""
    return {
        "transitions": [list(t) for t in state.transitions],
        "trial_now": state.in_trial,
        "tries_left": state.tries_left,
        "held": state.held,
    }


def row_state(args: dict, sentence_ends: frozenset[int] = frozenset(), tokenizer=None) -> RowState:
    """The row state ``budget_args`` describe (built by :func:`~e1.engine.row_engine.build_state`), with
    ``history`` already replayed (``tokenizer``: for a ``stop`` pattern and early-exit recipe=deer's texts;
    without one the pattern is only checked to compile, by its option)."""
    from e1.engine.row_engine import ModeIds, build_state

    markers = Markers(
        "",
        "",
        tuple(args["start"]),
        tuple(args["end"]),
        frozenset(args["eos"]),
        args["pad"],
        tuple(args["wait_ids"]),
        tuple(args["answer"]),
        tuple(args["newline"]),
    )
    mode = Mode.parse(args["mode"])
    ids = ModeIds(
        tuple(args["exit"]),
        tuple(map(tuple, args["transitions"])) if mode.trials else (),
        tuple((at, tuple(note)) for at, note in args.get("notes", ())),
    )
    state = build_state(
        mode,
        Budget(args["think"], args["solve"]),
        markers,
        args["thinking"],
        args["room"],
        ids,
        tokenizer,
        sentence_ends,
    )
    if mode.trials:
        return _replay_trials(state, args)
    state.extend(args["history"])
    return state


def _replay_trials(state, args: dict):
    """A trial-answering row (early-exit): its history replayed without trials (they ran in earlier requests)."""
    state.trials_on = False
    state.extend(args["history"])
    state.trials_on = bool(args.get("tries_left", True))  # the driver counts the trials of every round
    if args["trial_now"]:
        state.begin_trial(args.get("held"))
    return state


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


class RequestStates:
    """Each request's RowState from its ``extra_args`` (both runners' processors build them so), and the
    served model's tokenizer, read once, for what a mode needs of it (sentence ends, a stop pattern)."""

    def __init__(self, vllm_config):
        self.tokenizer_name = vllm_config.model_config.tokenizer if vllm_config is not None else None
        self._sentence_ends: frozenset[int] | None = None
        self._tokenizer = None

    def tokenizer(self):
        """The served model's tokenizer, loaded at the first request that needs it."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_name)
        return self._tokenizer

    def sentence_ends(self) -> frozenset[int]:
        """The served tokenizer's sentence-ending ids (for grace windows), read once."""
        if self._sentence_ends is None:
            from e1.engine.markers import sentence_end_ids

            self._sentence_ends = sentence_end_ids(self.tokenizer())
        return self._sentence_ends

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        args = request_args(sampling_params)
        if args is not None:
            row_state(args)  # raises on malformed settings, at submission time

    def reads_prompt(self, params) -> bool:
        """Whether :meth:`request_state` needs the request's prompt ids (runner V2 hands a processor
        none: it reads them back from the device for such requests). The offline engine's settings
        carry what the prompt leaves thinking; the server's budget fields do not (e1.serve.processor)."""
        return False

    def request_state(self, params, prompt_ids: list[int] | None) -> RowState | None:
        """The row state of a newly added request (None: leave it alone). A hook: the server's
        processor (e1.serve.processor) builds it from the request's budget fields instead."""
        args = request_args(params)
        if args is None:
            return None
        mode = Mode.parse(args["mode"])
        reads_text = mode.stop or mode.text_transitions
        return row_state(
            args, self.sentence_ends() if mode.grace else frozenset(), self.tokenizer() if reads_text else None
        )


class BudgetProcessor(RequestStates, LogitsProcessor):
    """Forces end markers and EOS per request, as the request's RowState says (tests/test_vllm_stepping.py
    checks every step against it). vLLM's V1 interface (runner V2's is :mod:`e1.engine.vllm.v2_processor`)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        super().__init__(vllm_config)
        self.device = device
        self.rows: dict[int, _Row] = {}  # batch index -> row
        self._table = _BiasTable()
        self._stepping: _Stepping | None = None  # the rows on the stepping path, as arrays
        self._looked: list[tuple[int, _Row]] = []  # the other rows, looked at one by one
        self._changed = True  # the rows or a row's path changed: both lists are made again

    def is_argmax_invariant(self) -> bool:
        return False  # forcing changes the argmax

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update:
            self._changed = True
            for index in batch_update.removed:
                self.rows.pop(index, None)
            for index, params, prompt, output in batch_update.added:
                state = self.request_state(params, prompt)
                if state is None:
                    self.rows.pop(index, None)
                else:
                    self.rows[index] = _Row(state, output, min(state.markers.eos_ids))
            for a, b, direction in batch_update.moved:
                row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
                if row_a is not None:
                    self.rows[b] = row_a
                if direction == MoveDirectionality.SWAP and row_b is not None:
                    self.rows[a] = row_b

    def _regroup(self) -> None:
        """Split the rows into the stepping path's arrays and the rest (after any change)."""
        if self._table.full():
            self._table = _BiasTable()
        if self._stepping is not None:
            self._stepping.write_back()
        stepping = [(index, row) for index, row in self.rows.items() if row.held is not None]
        self._stepping = _Stepping(stepping, self._table) if stepping else None
        self._looked = [(index, row) for index, row in self.rows.items() if row.held is None]
        self._changed = False

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self._changed:
            self._regroup()
        forced, biased = [], []
        stepping = self._stepping
        if stepping is not None:
            bias, leaving = stepping.step(self._table)
            if leaving:  # looked at below this very step, with the rest
                self._looked += [(int(stepping.index[r]), stepping.rows[r]) for r in leaving]
                self._changed = True
            if (keep := np.flatnonzero(bias)).size:
                biased.append((stepping.index[keep], stepping.column[keep], bias[keep]))
        for index, row in self._looked:
            if len(row.output) < row.check_at:
                continue  # no forced token (nor soft's bias) can be due before check_at
            if row.fed < len(row.output):  # here, not in update_state: async scheduling fills ids in late
                row.catch_up()
            if (token := row.forced()) is not None:
                forced.append((index, int(logits[index].argmax()) if token == ARGMAX else token))
                continue
            if bias := row.state.end_bias():
                biased.append(([index], [row.state.markers.end_ids[0]], np.array([bias], np.float32)))
            if row.steppable():
                row.held = row.scanned = row.fed  # looked at as arrays from the next step on
                self._changed = True
        if biased:  # soft: the end marker's first logit raised, as the transformers backend does
            index, column, bias = (np.concatenate(parts) for parts in zip(*biased))
            index, column = torch.from_numpy(index).to(logits.device), torch.from_numpy(column).to(logits.device)
            logits[index, column] += torch.from_numpy(bias).to(logits.device, logits.dtype)  # [F]
        if not forced:
            return logits
        index = torch.tensor([i for i, _ in forced], device=logits.device)  # [F]
        token = torch.tensor([t for _, t in forced], device=logits.device)  # [F]
        logits[index] = float("-inf")  # [F, V] rows with a forced token: only that one stays
        logits[index, token] = 0.0
        return logits
