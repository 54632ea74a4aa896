"""What every backend shares around :class:`~e1.engine.row_state.RowState`: prompts to token ids,
the context check, one row state per sample, and the :class:`Completion` records built from
them — so the transformers and vLLM backends count, split and report identically.

    class MyEngine(RowEngine):
        def generate(self, prompts, budget, mode, sampling, n=1, progress=None, seeds=None, prefixes=None):
            mode, prompt_ids, rows = self.prepare(prompts, budget, mode, sampling, n)
            states, taken = self.start_states(prompt_ids, rows, budget, mode, sampling, prefixes)
            ...  # decode the rows not done, feeding every token to its state
            return self.completions(states, rows, prompt_ids, taken)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from e1.budget import Budget
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.early_exit_state import EarlyExitState, transition_ids, trial_texts
from e1.engine.markers import PROMPT_CLOSED, PROMPT_OPEN, Markers, exit_ids, last_marker, sentence_end_ids
from e1.engine.row_state import BUDGET, PREFILLED, RowState
from e1.errors import ConfigError
from e1.store import read_old_ends_with


class RowEngine:
    """Subclasses set ``tokenizer``, ``markers`` and ``max_context`` (None: unknown) and implement ``generate``."""

    tokenizer: object
    markers: Markers
    max_context: int | None
    _sentence_ends: frozenset[int] | None = None

    def encode(self, prompts: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        return [
            list(p) if not isinstance(p, str) else self.tokenizer.encode(p, add_special_tokens=False) for p in prompts
        ]

    def prepare(self, prompts, budget: Budget, mode: Mode | str, sampling: Sampling, n: int):
        """Validate a generate call: (the parsed mode, prompt ids, the (prompt, sample) rows, prompt-major)."""
        if n < 1:
            raise ConfigError(f"n must be >= 1, got {n}")
        mode = Mode.parse(mode)
        prompt_ids = self.encode(prompts)
        self.check_fits(max(map(len, prompt_ids), default=0), budget, mode)
        return mode, prompt_ids, [(p, j) for p in range(len(prompt_ids)) for j in range(n)]

    def check_fits(self, longest_prompt: int, budget: Budget, mode: Mode) -> None:
        """Refuse, before decoding anything, a budget that the model's context cannot hold.
        Mode ``none`` is only capped: running to the end of the context is what it asks for."""
        if self.max_context is None:
            return
        worst = mode.worst_case(budget, self.markers, self.exit_ids(mode))
        worst = 1 if worst is None else worst + mode.trial_room(self.markers)
        if longest_prompt + worst > self.max_context:
            raise ConfigError(
                f"a prompt of {longest_prompt} tokens plus the {mode} budget t={budget.think} s={budget.solve} "
                f"needs up to {longest_prompt + worst} tokens, more than the model's context of {self.max_context}",
                hint="lower --think/--solve or use a model with a longer context",
            )

    def start_states(
        self,
        prompt_ids: list[list[int]],
        rows: list[tuple[int, int]],
        budget: Budget,
        mode: Mode,
        sampling: Sampling,
        prefixes: Sequence[Sequence[int]] | None,
    ) -> tuple[list[RowState], list[int]]:
        """One row state per (prompt, sample) row, each having followed its prefix (if any):
        (states, how many prefix ids each took)."""
        states = [self.row_state(prompt_ids[p], budget, mode, sampling) for p, _ in rows]
        if prefixes is None:
            return states, [0] * len(rows)
        if len(prefixes) != len(rows):
            raise ConfigError(
                f"{len(prefixes)} prefixes for {len(rows)} rows", hint="pass one prefix per (prompt, sample) row"
            )
        return states, [state.follow(prefix) for state, prefix in zip(states, prefixes)]

    def row_state(self, prompt: list[int], budget: Budget, mode: Mode, sampling: Sampling) -> RowState:
        """A row's state machine. ``--max-tokens`` caps mode ``none`` only: a budgeted mode's cap is its
        budget (plus the forced tokens and the EOS a budget forces), never the unrelated ``max_tokens``."""
        worst = mode.worst_case(budget, self.markers, self.exit_ids(mode))
        room = sampling.max_tokens if worst is None else worst + 1
        if self.max_context is not None:
            room = min(room, self.max_context - len(prompt))
        return build_state(
            mode,
            budget,
            self.markers,
            self.markers.prompt_thinking(prompt),
            room,
            ModeIds.of(self.tokenizer, mode, budget),
            self.tokenizer,
            self.sentence_ends,
        )

    def exit_ids(self, mode: Mode) -> tuple[int, ...]:
        """The mode's exit text as this tokenizer's ids (forced at t before the end marker)."""
        return exit_ids(self.tokenizer, mode.exit_text)

    def sentence_ends(self) -> frozenset[int]:
        """Ids that end a sentence (the grace window), computed once per engine."""
        if self._sentence_ends is None:
            self._sentence_ends = sentence_end_ids(self.tokenizer)
        return self._sentence_ends

    def completions(
        self,
        states: Sequence[RowState],
        rows: Sequence[tuple[int, int]],
        prompt_ids: Sequence[Sequence[int]],
        prefix_tokens: Sequence[int],
    ) -> list[Completion]:
        """One record per row, the texts decoded in one batch (:func:`decode_all`)."""
        parts = [(*state.split(), state.forced_text_ids()) for state in states]
        texts = decode_all(self.tokenizer, [ids for row in parts for ids in row])
        trials = [list(state.trials) for state in states]
        answers = iter(decode_all(self.tokenizer, [list(trial.ids) for row in trials for trial in row]))
        return [
            Completion(
                prompt_index=p,
                sample_index=j,
                think_text=texts[3 * i],
                solution_text=texts[3 * i + 1],
                forced_text=texts[3 * i + 2],
                prompt_tokens=len(prompt_ids[p]),
                think_tokens=state.think_tokens,
                solve_tokens=state.solve_tokens,
                forced=state.think_end == BUDGET,  # cut by the budget (a stop pattern's forced marker is not)
                finish_reason=state.finish_reason,
                token_ids=list(state.tokens),
                forced_mask=list(state.forced),
                closed=state.closed,
                prefix_tokens=prefix_tokens[i],
                trial_tokens=state.trial_decoded,
                trials=[trial.record(next(answers)) for trial in trials[i]],
                think_end=state.think_end,
            )
            for i, (state, (p, j)) in enumerate(zip(states, rows))
        ]


class ModeIds(NamedTuple):
    """A mode's texts as one tokenizer's ids: the exit text, early-exit's transitions, the notes an option
    forces into the thinking (``(thinking count, ids)``). The vLLM processor receives them in a request's
    settings (``budget_args``), every other caller tokenizes them here (:meth:`of`), once."""

    exit: tuple[int, ...] = ()
    transitions: tuple[tuple[int, ...], ...] = ()
    notes: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @classmethod
    def of(cls, tokenizer, mode: Mode, budget: Budget) -> ModeIds:
        return cls(
            exit_ids(tokenizer, mode.exit_text),
            transition_ids(tokenizer, mode.transition_texts),
            tuple((at, exit_ids(tokenizer, text)) for at, text in mode.notes(budget)),
        )


def build_state(
    mode: Mode,
    budget: Budget,
    markers: Markers,
    prompt_thinking: str,
    room: int,
    ids: ModeIds = ModeIds(),
    tokenizer=None,
    sentence_ends=frozenset(),
) -> RowState:
    """The one function that builds a row's state, for every caller (the local engines, the vLLM
    processors, e1 serve's processor and replay, the API backend's replay): :class:`EarlyExitState` for a
    mode that tries trial answers, else :class:`RowState`. ``ids``: the mode's texts as ids (``ModeIds.of``);
    ``tokenizer``: for a stop pattern and recipe=deer's texts (None: neither is watched); ``sentence_ends``:
    the ids for a grace window, or a function giving them (read only when the mode has one).

        state = build_state(mode, budget, markers, markers.prompt_thinking(prompt), room, ModeIds.of(tok, mode, budget), tok)
    """
    ends = (sentence_ends() if callable(sentence_ends) else sentence_ends) if mode.grace else frozenset()
    if mode.trials:
        texts = trial_texts(tokenizer, mode) if tokenizer is not None else None
        return EarlyExitState(
            budget, mode, markers, prompt_thinking, room, ids.exit, ends, transitions=ids.transitions, texts=texts
        )
    stop = None
    if mode.stop and tokenizer is not None:
        from e1.engine.stop import StopPattern

        stop = StopPattern(tokenizer, mode.stop)
    return RowState(budget, mode, markers, prompt_thinking, room, ids.exit, ends, stop, ids.notes)


def prefilled(prompt, mode: Mode, markers: Markers):
    """``prompt`` as ``mode`` decodes from it (:meth:`Mode.prefill`: nothinking's closed thinking box), for
    every caller that builds prompts (eval and sweep, every backend): a prompt given as ids is refused by a
    mode that writes into its text."""
    if not mode.prefills:
        return prompt
    if not isinstance(prompt, str):
        raise ConfigError(f"mode {mode} writes into the prompt's text", hint="give the prompt as text")
    return mode.prefill(prompt, markers.start_text, markers.end_text)


def think_end_before(prompt: str, start: str, end: str):
    """How a ``think_end`` stored before its vocabulary was recorded (:mod:`e1.store.think_ends`) reads in
    today's (:data:`~e1.engine.row_state.THINK_ENDS`), given the text of the prompt its row continued from
    and the markers' texts: a function of the stored value (None: unknown). Before abf6856 ``open`` also held
    replies that never opened thinking (today ``unopened``) and a prompt that closed thinking stored none
    (today ``prefilled``); the rest meant what it means today. The prompt's last marker (as
    :meth:`Markers.prompt_thinking` reads ids) tells them apart where it shows how thinking began: after a
    prompt that opened thinking every row opened it, so each value reads as stored; after one that closed
    it, a missing value is ``prefilled``, and a stored one is unknown (it was written before 46b4845, by an
    e1 that did not read a closed prompt and decoded the reply as thinking). After one that left thinking to
    the model no stored value says whether the model opened it, so every row of that prompt is unknown:
    leaving out only its ``open`` rows would bias the rates of the rest.

        >>> read = think_end_before("<|im_start|>assistant\\n<think>\\n", "<think>", "</think>")
        >>> read("open"), read("natural"), think_end_before("Q?</think>", "<think>", "</think>")(None)
        ('open', 'natural', 'prefilled')
        >>> think_end_before("Q?</think>", "<think>", "</think>")("budget") is None
        True
        >>> think_end_before("<|im_start|>assistant\\n", "<think>", "</think>")("natural") is None
        True
    """
    phase = last_marker(prompt, start, end)
    if phase == PROMPT_OPEN:
        return lambda stored: stored
    if phase == PROMPT_CLOSED:
        return lambda stored: PREFILLED if stored is None else None
    return lambda stored: None


read_old_ends_with(think_end_before)  # the samples gate (e1.store) reads old rows by it


def decode_all(tokenizer, sequences: list[list[int]]) -> list[str]:
    """``[tokenizer.decode(ids, skip_special_tokens=True) for ids in sequences]``, the same texts: a
    fast tokenizer's Rust ``decode_batch`` when the wrapper would return its text as it is (no
    clean-up of spaces), which skips transformers' per-id Python checks (they cost more than decoding)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not sequences:
        return []  # (transformers' batch_decode answers [""])
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return tokenizer.batch_decode(sequences, skip_special_tokens=True)
    return backend.decode_batch(sequences, skip_special_tokens=True)
