"""e1's budgets inside ``model.generate``: a transformers ``LogitsProcessor`` and the ``StoppingCriteria``
it needs, decoding every row under its thinking budget ``t``, solution budget ``s`` and mode.

    from e1.integrations.transformers import BudgetLogitsProcessor

    budget = BudgetLogitsProcessor(tokenizer, think=256, solve=128, mode="elastic", temperature=0)
    inputs = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    out = model.generate(**inputs, logits_processor=[budget], stopping_criteria=[budget.stopping_criteria],
                         do_sample=False, max_new_tokens=budget.max_new_tokens)
    budget.states[0].think_tokens, budget.states[0].solve_tokens   # each row's RowState

How it decodes: each step, for every row not done, e1 draws the row's token exactly as ``e1 eval --backend hf``
does (:func:`e1.engine.draw_tokens`: soft's bias, then e1's seeded sampler at the row's own counter; greedy when
``temperature=0``), hands it to the row's :class:`~e1.engine.RowState` (built by the engine's own
``RowEngine.row_state``, so the rules, the room and the exit texts are e1's one definition), and leaves only the
id the state appended finite. Whatever ``generate`` then does (argmax, or sampling with its warpers) picks that
id, and the criterion ends a row once its state is done (transformers pads it from then on). So the tokens
equal the hf engine's for the same prompts, budget, mode and seeds (tests/test_integrations_transformers.py),
and a replaced end (``budget-forcing:wait=k``) works in one pass. Pass ``do_sample=False``: sampling is e1's,
set here (a warper of ``generate`` would change the logits e1 draws from only if it ran first; they run after).
``early-exit`` is refused: its trial answers are rolled back, which one ``generate`` call cannot do.

Rows are the batch's rows in order: ``samples_per_prompt`` (``generate``'s ``num_return_sequences``) says
how many consecutive rows share a prompt, for the seeds (``seeds``: one per prompt, as ``e1 eval`` gives
them). Prompts must be left-padded. One processor serves one ``generate`` call at a time; a new call (another
batch) starts new states. If anything but e1 changed a row's id (another processor after this one, an EOS
that ``generate`` knows and e1 was not given: pass ``eos_token_id=model.generation_config.eos_token_id``),
the next step (or the stopping criterion, at the last step) refuses in one line rather than decode outside the
budget. Not seen from here, so not refused: processors ``generate`` runs before e1's (``repetition_penalty``,
``no_repeat_ngram_size``, ``bad_words_ids``, also from ``model.generation_config``) change the logits e1 draws
from (the budgets hold, the tokens differ from the hf engine's), and a ``max_new_tokens`` below
``max_new_tokens`` here cuts rows early (their ``states[b].done`` is False).

Read for this: huggingface/transformers v5.19.0, ``src/transformers/generation/utils.py`` (``_sample``: the
processors get float32 logits; user processors are merged before the sampling warpers; finished rows get the
pad id) and ``generation/stopping_criteria.py`` (a criterion returns one bool per row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import LogitsProcessor, StoppingCriteria

from e1.budget import Budget
from e1.engine import (
    MAX_MODE_TEXT,
    Markers,
    Mode,
    RowEngine,
    RowState,
    Sampling,
    draw_tokens,
    prompt_seeds,
    resolve_markers,
    sample_seed,
)
from e1.errors import ConfigError, E1Error
from e1.numeric import Number

_SAMPLES = Number(int, min=1, max=2**16)
_SEED = Number(int, min=0, max=2**64 - 1)


@dataclass(frozen=True)
class GenerateSettings:
    """A processor's settings, checked once (:func:`check_arguments`)."""

    budget: Budget
    mode: Mode
    sampling: Sampling
    markers: Markers
    seeds: tuple[int, ...] | None
    samples_per_prompt: int


def check_arguments(
    tokenizer,
    think,
    solve,
    mode,
    sampling: dict,
    seeds,
    samples_per_prompt,
    think_start,
    think_end,
    eos_token_id,
) -> GenerateSettings:
    """The one gate of :class:`BudgetLogitsProcessor`'s arguments: typed settings, or a one-line ConfigError."""
    try:
        budget = Budget.parse(think, solve)
        mode = Mode.parse(mode)
        if mode.trials or mode.effort:
            raise ConfigError(
                f"mode {mode} cannot run inside model.generate: "
                + ("its trial answers are rolled back" if mode.trials else "effort= is a hosted vendor's setting"),
                hint="use elastic, budget-forcing, soft, truncate or none",
            )
        sampling = Sampling(**sampling)
        seeds = None if seeds is None else tuple(_SEED.check(s, "seeds[]") for s in _sequence(seeds, "seeds"))
        samples = _SAMPLES.check(samples_per_prompt, "samples_per_prompt")
        markers = _markers(tokenizer, think_start, think_end, eos_token_id)
    except E1Error as err:
        raise ConfigError(err.message, hint=err.hint) from None
    return GenerateSettings(budget, mode, sampling, markers, seeds, samples)


def _sequence(value, what: str) -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{what} must be a list, not {type(value).__name__}")
    return list(value)


def _markers(tokenizer, think_start, think_end, eos_token_id) -> Markers:
    if not all(hasattr(tokenizer, name) for name in ("encode", "convert_tokens_to_ids", "eos_token_id")):
        raise ConfigError(
            f"a tokenizer must be a transformers tokenizer, not {type(tokenizer).__name__}",
            hint="pass AutoTokenizer.from_pretrained(model)",
        )
    for name, text in (("think_start", think_start), ("think_end", think_end)):
        if text is not None and not (isinstance(text, str) and 0 < len(text) <= MAX_MODE_TEXT):
            raise ConfigError(f"{name} must be a text of 1..{MAX_MODE_TEXT} characters", hint="or None: </think>'s")
    eos = [] if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id
    size = Number(int, min=0, max=len(tokenizer) - 1)
    eos = [size.check(token, "eos_token_id") for token in _sequence(eos, "eos_token_id")]
    return resolve_markers(tokenizer, think_start, think_end, eos)


class _Rows(RowEngine):
    """The engine's own row-state builder (``RowEngine.row_state``) for one tokenizer; no model context."""

    max_context = None

    def __init__(self, tokenizer, markers: Markers):
        self.tokenizer, self.markers = tokenizer, markers


class BudgetLogitsProcessor(LogitsProcessor):
    """Decodes each row of ``model.generate`` under e1's budget ``(think, solve)`` and ``mode`` (see the module
    doc). Sampling is e1's: ``temperature`` (0: greedy), ``top_p``, ``top_k``, ``seed`` (or ``seeds``, one per
    prompt), as ``e1 eval`` takes them; ``max_tokens`` caps mode ``none``. ``states``: each row's RowState."""

    def __init__(
        self,
        tokenizer,
        think: int | str,
        solve: int | str,
        mode: str = "elastic",
        *,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int = 0,
        seed: int = 0,
        max_tokens: int = 32768,
        seeds: Sequence[int] | None = None,
        samples_per_prompt: int = 1,
        think_start: str | None = None,
        think_end: str | None = None,
        eos_token_id: int | Sequence[int] | None = None,
    ):
        sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, max_tokens=max_tokens)
        self.settings = check_arguments(
            tokenizer, think, solve, mode, sampling, seeds, samples_per_prompt, think_start, think_end, eos_token_id
        )
        self._rows = _Rows(tokenizer, self.settings.markers)
        self.states: list[RowState] = []
        self.stopping_criteria = BudgetStoppingCriteria(self)
        self._seeds = np.zeros(0, np.uint64)  # [B] each row's seed
        self._chosen: list[int | None] = []  # the id each row was given at the last step (None: it was done)
        self._previous: torch.Tensor | None = None  # the last step's input_ids [B, W]

    def reset(self) -> None:
        """Forget the last call's rows (the next call starts new states; a call of another shape does anyway)."""
        self.states, self._previous = [], None

    def row_state(self, prompt: list[int]) -> RowState:
        """A fresh state for a row whose prompt is ``prompt``, as the hf engine builds it."""
        s = self.settings
        return self._rows.row_state(prompt, s.budget, s.mode, s.sampling)

    @property
    def max_new_tokens(self) -> int:
        """The most tokens a row can take (its worst case and the EOS a budget forces): ``generate``'s cap."""
        return self.row_state([]).max_new_tokens

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self._continues(input_ids):
            self._start(input_ids)
        active = [b for b, state in enumerate(self.states) if not state.done]
        chosen: list[int | None] = [None] * len(self.states)
        if active:
            states = [self.states[b] for b in active]
            drawn = draw_tokens(scores[active], states, self._seeds[active], self.settings.sampling)  # [A]
            for b, state, token in zip(active, states, drawn):
                chosen[b] = state.accept(token)  # a forced id overrides the draw
        out = torch.full_like(scores, float("-inf"))  # [B, V]
        ids = [self.settings.markers.pad_id if token is None else token for token in chosen]
        out[torch.arange(len(ids), device=scores.device), torch.tensor(ids, device=scores.device)] = 0.0
        self._chosen, self._previous = chosen, input_ids  # generate appends to a new tensor: a reference will do
        return out

    def _continues(self, input_ids: torch.LongTensor) -> bool:
        """Whether ``input_ids`` is the next step of the batch this processor decodes (the last step's ids and
        one more per row; else a new call); a row given another id than e1 chose is refused."""
        previous = self._previous
        if previous is None or tuple(input_ids.shape) != (previous.shape[0], previous.shape[1] + 1):
            return False
        if not torch.equal(input_ids[:, :-1], previous):  # never silently: the states would start afresh mid-call
            raise ConfigError(
                "model.generate changed ids of rows it had decoded (beam search reorders them)",
                hint="use num_beams=1; before a new call whose prompts are one id longer than the last output, call reset()",
            )
        self.check_chosen(input_ids)
        return True

    def check_chosen(self, input_ids: torch.LongTensor) -> None:
        """Refuses a row whose last id is not the one e1 chose at the last step (the processor's next step and
        the stopping criterion, which also sees the final step, both ask)."""
        last = input_ids[:, -1].tolist()
        for b, (token, given) in enumerate(zip(self._chosen, last)):
            if token is not None and token != given:
                raise ConfigError(
                    f"row {b} of model.generate got id {given} where e1's budget chose {token}",
                    hint="pass eos_token_id=model.generation_config.eos_token_id, do_sample=False, num_beams=1, "
                    "and no logits processor after e1's",
                )

    def _start(self, input_ids: torch.LongTensor) -> None:
        """New states for a new batch: one per row, its seed from its prompt and sample index."""
        rows, n, pad = input_ids.shape[0], self.settings.samples_per_prompt, self.settings.markers.pad_id
        if rows % n:
            raise ConfigError(
                f"{rows} rows are not whole groups of samples_per_prompt={n}",
                hint="give samples_per_prompt the num_return_sequences you pass to generate",
            )
        prompts = [_unpadded(row, pad) for row in input_ids.tolist()]
        if any(prompts[b] != prompts[b - b % n] for b in range(rows)):  # else seeds of another prompt's samples
            raise ConfigError(
                f"rows of one group of samples_per_prompt={n} hold different prompts",
                hint="repeat each prompt n times (num_return_sequences=n), or give samples_per_prompt=1",
            )
        per_prompt = prompt_seeds(self.settings.sampling, rows // n, self.settings.seeds)
        self._seeds = np.array([sample_seed(per_prompt[b // n], b % n) for b in range(rows)], dtype=np.uint64)
        self.states = [self.row_state(prompt) for prompt in prompts]


def _unpadded(row: list[int], pad: int) -> list[int]:
    """A left-padded prompt without its padding (a right-padded one is refused: its thinking is read at its end)."""
    if row and row[-1] == pad:
        raise ConfigError(
            "a prompt ends in the pad id: generate needs left padding",
            hint="tokenize with padding_side='left'",
        )
    start = next((i for i, token in enumerate(row) if token != pad), len(row))
    return row[start:]


class BudgetStoppingCriteria(StoppingCriteria):
    """Ends each row of ``generate`` once its e1 state is done (the solution budget spent, or its EOS)."""

    def __init__(self, processor: BudgetLogitsProcessor):
        self.processor = processor

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        processor, states = self.processor, self.processor.states
        if len(states) != input_ids.shape[0]:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        previous = processor._previous  # the ids e1 saw this step: input_ids is them and the id each row got
        if previous is not None and tuple(input_ids.shape) == (previous.shape[0], previous.shape[1] + 1):
            processor.check_chosen(input_ids)  # the final step, which no next processor call would check
        return torch.tensor([state.done for state in states], dtype=torch.bool, device=input_ids.device)
