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
phase, the *trial*, in one of two recipes (:mod:`e1.engine.modes.early_exit` says where each
detail comes from).

``recipe=e1``: when thinking ends a step (its ids end with a transition's ids: a paragraph break,
"Wait"), the end marker and "Final Answer:" are fed (the trial prompt), then up to ``trial`` tokens
are decoded greedily, their probabilities recorded; EOS ends the answer sooner. Then the trial is
rolled back: its tokens never enter ``tokens``, and :meth:`accept` returns the step's last real
token to feed again at its own position, with ``rollback`` = the cache columns to mask (the trial's
and that token's first copy), so decoding goes on exactly as if no trial had happened and nothing
is prefilled again. If the trial was confident, the end marker is queued: thinking ends there.

``recipe=deer`` (DEER's own): a :class:`TextWatch` reads the thinking's text; when a sampled token's
text completes a transition ("Wait", however the tokenizer merged it), that token is *held* and
the trial runs on the thinking before it: DEER's prompt ("\\n**Final Answer**\\n\\boxed") is fed at
once, the greedy answer ends at EOS, at ``trial`` tokens or at the token completing a closing-brace
text. Rolled back (``rollback`` = the trial's columns), the held token is fed in the trial's first
column — or, when the trial was confident, dropped and the end marker forced in its place. A
backend whose sequence already holds the held token (vLLM, a followed prefix) ends there and calls
:meth:`EarlyExitState.defer_trial` (``restart`` says so); its next request begins with the trial.

``dynasor`` (Dynasor-CoT, :mod:`e1.engine.modes.dynasor`): a trial (a *probe*) is due after every
``Mode.trial_interval``-th thinking token, and runs as recipe=e1's does (the last real token fed again
at its own position), with the probe prompt's ids from the tokenizer and no stop text.

The verdict is :meth:`Mode.trial_verdict`: early-exit's is :meth:`Mode.trial_confidence` of the answer's
probabilities and :meth:`Mode.is_confident` of it; dynasor's reads the texts of the last
``Mode.trial_window`` probes (this one last, decoded by the tokenizer). An exit is not counted as
forced: ``was_forced`` stays the cut at ``t``.
With ``tries=N`` (DEER's default 10) no trial starts after the N-th: the rest decodes as elastic,
so a sample's trial work is at most N · (trial prompt + ``trial``) tokens, whatever its transitions.

Invariants: ``tokens`` never holds a trial token; ``trial_decoded`` counts every token fed or
decoded for trials (prompt + answer per trial); a trial only starts in thinking, with nothing
forced pending and ``t`` not reached; the real tokens' samples are drawn exactly as in elastic
(the random stream is indexed by ``len(tokens)``, which a trial leaves unchanged).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from e1.engine.row_state import THINK, TRIAL, RowState
from e1.engine.rules import ends_with_each


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
    """``transitions``: id sequences that end a thinking step (``Mode.transition_texts`` tokenized; recipe=e1);
    ``texts``: what recipe=deer reads off the tokenizer (:func:`trial_texts`; None: no text-found transitions)."""

    def __init__(self, *args, transitions: tuple[tuple[int, ...], ...] = (), texts: TrialTexts | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.transitions = tuple(tuple(t) for t in transitions if t)
        self._reach = max(map(len, self.transitions), default=1)  # the last ids a transition may end
        self.texts = texts
        watching = texts is not None and texts.transitions is not None
        self._watch = texts.transitions.scanner() if watching else None  # this row's thinking text (recipe=deer)
        self._stops = None  # the running trial answer's text (recipe=deer)
        self.trials: list[Trial] = []
        self.trial_decoded = 0
        self.exited = False  # thinking ended by a confident trial
        self.trials_on = True  # off while a backend replays ids whose trials already ran (vLLM's history)
        self.held: int | None = None  # recipe=deer: the sampled token a running trial was tried before
        self.restart = False  # the last accept held a token and began its trial (see defer_trial)
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
        self.rollback, self.restart = 0, False
        if self._in_trial:
            return self._trial_step(sampled, probability)
        thinking = self._watch is not None and not self._queue and self.phase == THINK
        if thinking and self._watch.push(sampled) and self._may_try():
            self.held, self.restart = sampled, True
            self._start_trial()
            return self._trial_step(sampled, None)  # the prompt's first id, fed in the held token's place
        token = super().accept(sampled)
        if self._watch is None and self._trial_due():
            self._start_trial()
        return token

    def follow(self, ids) -> int:
        """As :meth:`RowState.follow`, stopping where a trial begins: the trial needs the model
        (a token held for a trial is not taken: the trial is deferred to the backend)."""
        taken = 0
        for token in ids:
            if self.done or self._queue or self._in_trial:
                break
            taken += 1
            appended = self.accept(token)
            if self.restart:  # held for a trial (whose prompt may even begin with the same id)
                self.defer_trial()
                return taken - 1
            if appended != token:
                break
        return taken

    def begin_trial(self, held: int | None = None) -> None:
        """Begin the trial due now (a backend that rebuilt this state with ``trials_on`` False):
        recipe=deer's before ``held``, the token it holds (pushed to the text view as the row saw it)."""
        if self._in_trial:
            return
        if held is not None and self._watch is not None:
            self._watch.push(held)
            if self._may_try():
                self.held = held
                self._start_trial()
        elif held is None and self._trial_due():
            self._start_trial()

    def defer_trial(self) -> None:
        """Give back the trial prompt's first id that :meth:`accept` fed in place of a held token, for a
        backend whose sequence already holds that token (vLLM: the request ends there; a followed prefix):
        the trial then begins, prompt and all, where that backend continues from ``tokens``."""
        if self.restart:
            self._prompt.appendleft(self._trial_prompt()[0])
            self.trial_decoded -= 1
            self._trial_fed -= 1
            self.restart = False

    @property
    def tries_left(self) -> bool:
        """Another trial may still run (``tries=N``, recipe=deer's default 10: at most N per sample)."""
        cap = self.mode.trial_cap
        return cap is None or len(self.trials) < cap

    def _may_try(self) -> bool:
        return self.trials_on and self.tries_left and self.phase == THINK and not self._queue and self.opened

    def _trial_due(self) -> bool:
        if not self._may_try():
            return False
        if every := self.mode.trial_interval:  # dynasor: after every ``every``-th thinking token
            return self.think_tokens % every == 0
        return any(ends_with_each(tuple(self.tokens[-self._reach :]), self.transitions))

    def _trial_prompt(self) -> tuple[int, ...]:
        return self.texts.prompt_ids if self.texts is not None else self.markers.end_ids + self.markers.answer_ids

    def _start_trial(self) -> None:
        self._in_trial, self._trial_fed = True, 0
        self._prompt.extend(self._trial_prompt())
        self._answer, self._probs = [], []
        self._stops = self.texts.stops.scanner() if self.texts is not None else None

    def _trial_step(self, sampled: int, probability: float | None) -> int:
        self.trial_decoded += 1
        if self._prompt:
            self._trial_fed += 1
            return self._prompt.popleft()
        self._answer.append(sampled)
        self._probs.append(0.0 if probability is None else float(probability))
        stopped = self._stops is not None and self._stops.push(sampled)  # recipe=deer: the closing brace
        if len(self._answer) < self.mode.trial_tokens and sampled not in self.markers.eos_ids and not stopped:
            self._trial_fed += 1
            return sampled
        return self._end_trial()

    def _end_trial(self) -> int:
        """Record the trial, roll it back, and exit thinking if it was confident enough."""
        answer = tuple(t for t in self._answer if t not in self.markers.eos_ids)
        confidence, exited = self.mode.trial_verdict(self._probs, self._window_texts(answer))
        self.trials.append(Trial(len(self.tokens), self.think_tokens, answer, confidence, exited))
        self._in_trial = False
        if exited:  # the end marker (completing a part of it the model wrote, as at t), not counted as forced
            forced = self.was_forced
            self._force_end(TRIAL)
            self.exited, self.was_forced = True, forced
        held, self.held = self.held, None
        if held is None:  # recipe=e1: the last real token is fed again at its own position
            self.rollback = self._trial_fed + 1  # the trial's fed columns and that token's first copy
            return self.tokens[-1]
        self.rollback = self._trial_fed  # the trial's columns: the next token takes the first one's position
        return RowState.accept(self, held)  # the held token kept, or (exited) the first forced marker instead

    def _window_texts(self, answer: tuple[int, ...]) -> tuple[str, ...]:
        """The texts the mode's verdict reads (``trial_window``: the last so many trials' answers, this one
        last), decoded as the tokenizer writes them (no tokenizer: empty texts, which never end thinking)."""
        window = self.mode.trial_window
        if not window:
            return ()
        earlier = [trial.ids for trial in self.trials[max(0, len(self.trials) - window + 1) :]]
        decode = self.texts.decode if self.texts is not None else None
        return tuple(decode(list(ids)) if decode is not None else "" for ids in (*earlier, answer))

    def _plain_run(self, most: int) -> int:
        if self._in_trial or (self._watch is not None and self.phase == THINK):
            return 0  # every thinking token's text is read (recipe=deer)
        run = super()._plain_run(most)
        if (every := self.mode.trial_interval) and self.phase == THINK:
            run = min(run, every - 1 - self.think_tokens % every)  # the id a trial follows goes through accept
        return run

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
        if state.restart:  # recipe=deer: the trial comes before this id, which vLLM already wrote
            state.defer_trial()
            break
    while not state.done and not state.in_trial and (token := state.forced_token()) is not None:
        state.accept(token)


@dataclass(frozen=True)
class TrialTexts:
    """What recipe=deer reads off the model's tokenizer: the trial prompt's ids, the texts that end a
    thinking step and the texts that end a trial answer (each a :class:`TextWatch`)."""

    prompt_ids: tuple[int, ...]
    transitions: TextWatch | None  # None: trials are due at thinking counts (dynasor), not at texts
    stops: TextWatch
    decode: Callable[[list[int]], str]  # ids as the reply's text writes them (a verdict that reads answers)


def trial_texts(tokenizer, mode) -> TrialTexts | None:
    """``mode``'s :class:`TrialTexts` with ``tokenizer`` (None: its trial prompt is ids, recipe=e1)."""
    if not mode.trials or mode.trial_prompt_text is None:
        return None
    prompt = tuple(tokenizer.encode(mode.trial_prompt_text, add_special_tokens=False))
    transitions = TextWatch(tokenizer, mode.transition_texts) if mode.text_transitions else None
    return TrialTexts(
        prompt,
        transitions,
        TextWatch(tokenizer, mode.trial_stop_texts),
        lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )


class TextWatch:
    """Texts looked for in what a row writes, one id at a time: :meth:`scanner` gives one row's view, whose
    ``push(id)`` says whether one of ``texts`` *ends* in that id's text (the text as
    ``tokenizer.decode(ids, skip_special_tokens=True)`` writes it, read incrementally with ``tokenizers``'
    ``DecodeStream``; a tokenizer without a Rust backend decodes each id alone). So a token that merges a
    transition with other text (".\\n\\nWait") is found, and a text is found once, at its last id.

        watch = TextWatch(tokenizer, ("Wait",))
        scan = watch.scanner()
        [scan.push(i) for i in tokenizer.encode("So 4.\\n\\nWait, no")]   # True at the id completing "Wait"
    """

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, tuple(text for text in texts if text)
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        self.keep = max(map(len, self.texts), default=1) - 1  # characters before a new piece a match may start in

    def scanner(self) -> _TextScanner:
        return _TextScanner(self)


class _TextScanner:
    __slots__ = ("decode", "keep", "tail", "texts")

    def __init__(self, watch: TextWatch):
        self.texts, self.keep, self.tail = watch.texts, watch.keep, ""
        if watch.backend is not None:
            from tokenizers.decoders import DecodeStream

            stream, backend = DecodeStream(skip_special_tokens=True), watch.backend
            self.decode = lambda token: stream.step(backend, token)
        else:
            decode = watch.tokenizer.decode
            self.decode = lambda token: decode([token], skip_special_tokens=True) or None

    def push(self, token: int) -> bool:
        """Add one id; whether one of the texts ends within its text."""
        piece = self.decode(token)
        if not piece:  # a partial character, or a skipped special id: the text did not change
            return False
        text, seen = self.tail + piece, len(self.tail)
        self.tail = text[max(0, len(text) - self.keep) :] if self.keep else ""
        return any(text.find(t, max(0, seen - len(t) + 1)) >= 0 for t in self.texts)


def transition_ids(tokenizer, texts) -> tuple[tuple[int, ...], ...]:
    """``Mode.transition_texts`` as ``tokenizer``'s id sequences (each matched at the end of thinking)."""
    return tuple(
        ids for ids in dict.fromkeys(tuple(tokenizer.encode(t, add_special_tokens=False)) for t in texts) if ids
    )
