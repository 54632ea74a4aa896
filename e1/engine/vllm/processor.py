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
from e1.engine.vllm.v1_rows import ARGMAX, _BiasTable, _Row, _Stepping

KEY = "e1"


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
        reads_text = mode.stop or mode.trial_prompt_text is not None  # a stop pattern, a trial prompt's text
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
