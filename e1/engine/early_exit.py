"""Early exit (DEER, arXiv 2504.15895): the row state of mode ``early-exit``.

    state = EarlyExitState(budget, Mode.parse("early-exit:threshold=0.9"), markers, PROMPT_OPEN, room,
                           transitions=((271,), (14190,)))    # "\\n\\n", "Wait" as ids
    while not state.done:
        if state.trial_answering:                  # a trial answer's token: greedy, with its probability
            state.accept(argmax, probability)
        else:
            state.accept(state.forced_token() or sample())
        if state.rollback:                         # a trial just ended: mask its cache columns
            ...

It is :class:`~e1.engine.row_state.RowState` (elastic: the end marker forced at ``t``) plus one
phase: when thinking ends a step (its tokens end with a transition: a paragraph break, "Wait"),
a *trial* begins. The end marker and "Final Answer:" are fed (the trial prompt), then up to
``trial`` tokens are decoded greedily, their probabilities recorded; EOS ends the answer
sooner. The trial's confidence is the mean of those probabilities. Then the trial is rolled
back: its tokens never enter ``tokens``, and :meth:`accept` returns the step's last real token
to feed again at its own position, with ``rollback`` = the cache columns to mask (the trial's
and that token's first copy), so decoding goes on exactly as if no trial had happened and
nothing is prefilled again. If the confidence reached ``threshold``, the end marker is queued
instead: thinking ends there (not counted as forced: ``was_forced`` stays the cut at ``t``).
With ``tries=N`` no trial starts after the N-th: the rest decodes as elastic, so a sample's trial
work is at most N · (trial prompt + ``trial``) tokens, whatever its transitions.

Invariants: ``tokens`` never holds a trial token; ``trial_decoded`` counts every token fed or
decoded for trials (prompt + answer per trial); a trial only starts in thinking, with nothing
forced pending and ``t`` not reached; the real tokens' samples are drawn exactly as in elastic
(the random stream is indexed by ``len(tokens)``, which a trial leaves unchanged).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from e1.engine.row_state import T_MARKER, THINK, TRIAL, RowState


@dataclass(frozen=True)
class Trial:
    """One trial answer: where it was tried (``position`` real tokens written, ``think_tokens`` of
    them thinking), its answer ids (EOS left out), mean token probability, and whether it ended thinking."""

    position: int
    think_tokens: int
    ids: tuple[int, ...]
    confidence: float
    exited: bool

    def record(self, text: str) -> dict:
        """The JSON-able record a Completion carries (the answer as text instead of ids)."""
        fields = asdict(self)
        del fields["ids"]
        return {**fields, "text": text}


class EarlyExitState(RowState):
    """``transitions``: id sequences that end a thinking step (``Mode.transition_texts`` tokenized)."""

    def __init__(self, *args, transitions: tuple[tuple[int, ...], ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.transitions = tuple(tuple(t) for t in transitions if t)
        self.trials: list[Trial] = []
        self.trial_decoded = 0
        self.exited = False  # thinking ended by a confident trial
        self.trials_on = True  # off while a backend replays ids whose trials already ran (vLLM's history)
        self._prompt: deque[int] = deque()  # the trial prompt's ids still to feed
        self._answer: list[int] = []
        self._probs: list[float] = []
        self._in_trial = False
        self._trial_fed = 0  # tokens of this trial fed into the cache so far

    @property
    def in_trial(self) -> bool:
        """A trial is running: its prompt is being fed or its answer decoded."""
        return self._in_trial

    @property
    def trial_answering(self) -> bool:
        return self._in_trial and not self._prompt

    def forced_token(self) -> int | None:
        if self._in_trial:
            return self._prompt[0] if self._prompt else None
        return super().forced_token()

    def tokens_before_forcing(self) -> int:
        """In thinking a trial may be due after any token."""
        return 1 if self.phase == THINK or self._in_trial else super().tokens_before_forcing()

    def accept(self, sampled: int, probability: float | None = None) -> int:
        """As :meth:`RowState.accept`; in a trial answer ``sampled`` is the greedy token and
        ``probability`` its probability (None counts as 0: a backend that cannot tell never exits)."""
        self.rollback = 0
        if self._in_trial:
            return self._trial_step(sampled, probability)
        token = super().accept(sampled)
        if self._trial_due():
            self._start_trial()
        return token

    def follow(self, ids) -> int:
        """As :meth:`RowState.follow`, stopping where a trial begins: the trial needs the model."""
        taken = 0
        for token in ids:
            if self.done or self._queue or self._in_trial:
                break
            taken += 1
            if self.accept(token) != token:
                break
        return taken

    def begin_trial(self) -> None:
        """Begin the trial due now (a backend that rebuilt this state with ``trials_on`` False)."""
        if not self._in_trial and self._trial_due():
            self._start_trial()

    @property
    def tries_left(self) -> bool:
        """Another trial may still run (``tries=N``: at most N per sample)."""
        return self.mode.tries is None or len(self.trials) < self.mode.tries

    def _trial_due(self) -> bool:
        if not self.trials_on or not self.tries_left or self.phase != THINK or self._queue or not self.opened:
            return False
        return any(self._ends_with(ids) for ids in self.transitions)

    def _start_trial(self) -> None:
        self._in_trial, self._trial_fed = True, 0
        self._prompt.extend(self.markers.end_ids + self.markers.answer_ids)
        self._answer, self._probs = [], []

    def _trial_step(self, sampled: int, probability: float | None) -> int:
        self.trial_decoded += 1
        if self._prompt:
            self._trial_fed += 1
            return self._prompt.popleft()
        self._answer.append(sampled)
        self._probs.append(0.0 if probability is None else float(probability))
        if len(self._answer) < self.mode.trial_tokens and sampled not in self.markers.eos_ids:
            self._trial_fed += 1
            return sampled
        return self._end_trial()

    def _end_trial(self) -> int:
        """Record the trial, roll it back, and exit thinking if it was confident enough."""
        confidence = sum(self._probs) / len(self._probs)
        exited = confidence >= self.mode.confidence_threshold
        answer = tuple(t for t in self._answer if t not in self.markers.eos_ids)
        self.trials.append(Trial(len(self.tokens), self.think_tokens, answer, confidence, exited))
        self.rollback = self._trial_fed + 1  # the trial's fed columns and the first copy of the last real token
        self._in_trial = False
        if exited:
            self.exited, self.think_end = True, TRIAL
            self._queue.extend((t, T_MARKER) for t in self.markers.end_ids)
        return self.tokens[-1]  # fed again at its own position: the next logits continue the real prefix

    def _plain_run(self, most: int) -> int:
        return 0 if self._in_trial else super()._plain_run(most)

    def plain_ahead(self) -> int:
        """None: a trial may begin after any transition, which only ``accept`` sees."""
        return 0

    def _next_special(self, ids: list[int], at: int, nexts: dict[int, int]) -> int:
        """Also stop a plain run at the last id of a transition: a trial may begin after it."""
        first = super()._next_special(ids, at, nexts)
        if self.phase != THINK:
            return first
        for token in {t[-1] for t in self.transitions}:
            key = ("transition", token)
            if nexts.get(key, -1) < at:
                try:
                    nexts[key] = ids.index(token, at)
                except ValueError:
                    nexts[key] = len(ids)
            first = min(first, nexts[key])
        return first


def replay_round(state: EarlyExitState, ids: Sequence[int], probability: Callable[[int], float]) -> None:
    """Feed one early-exit request's output ``ids`` to its row state, for a backend that ends a request at
    each trial (vLLM, offline or served): a trial answer's id with ``probability(k)``, the probability of
    ``ids[k]`` (the model's softmax: vLLM's raw logprob, exponentiated), up to the end of the row or of a
    trial (the EOS that ended the request after it is not the row's). Then the forced ids an exit queued
    are taken at once, so the next request's history (prompt + ``state.tokens``) holds them."""
    for k, token in enumerate(ids):
        if state.done:
            break
        if state.trial_answering:
            state.accept(token, probability(k))
        else:
            state.accept(token)
        if state.rollback:
            break
    while not state.done and not state.in_trial and (token := state.forced_token()) is not None:
        state.accept(token)


def transition_ids(tokenizer, texts) -> tuple[tuple[int, ...], ...]:
    """``Mode.transition_texts`` as ``tokenizer``'s id sequences (each matched at the end of thinking)."""
    return tuple(ids for ids in dict.fromkeys(tuple(tokenizer.encode(t, add_special_tokens=False)) for t in texts) if ids)
