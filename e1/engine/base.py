"""The engine contract: one ``generate`` for every backend and every decoding mode.

    engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling(seed=0), n=4, seeds=[7, 8])
    -> list[Completion], prompt-major: completions[i * n + j] is sample j of prompt i.

Modes are objects, one module each in :mod:`e1.engine.modes` (elastic, truncate, budget-forcing,
soft, early-exit, none): ``Mode.parse("soft:strength=4")`` and ``str(mode)`` are their one wire format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from e1.budget import Budget
from e1.data import CompletionText
from e1.engine.markers import Markers
from e1.engine.modes import Mode
from e1.errors import ConfigError
from e1.numeric import Number
from e1.settings import SAMPLING, check_settings, numbers, setting

MIN_TEMPERATURE = 1e-3


@dataclass(frozen=True)
class Sampling:
    """Sampling settings; ``temperature=0`` is greedy, ``top_k=0`` and ``top_p=1`` are off."""

    temperature: float = setting(
        0.6,
        "Sampling temperature; 0 = greedy.",
        SAMPLING,
        number=Number(float, min=0, max=100, hint="use 0 for greedy decoding"),
    )
    top_p: float = setting(
        0.95,
        "Nucleus sampling threshold (1 = off).",
        SAMPLING,
        number=Number(float, min=0, max=1, above=True, hint="use 1 to switch it off"),
    )
    top_k: int = setting(
        0,
        "Keep only the k most likely tokens (0 = off).",
        SAMPLING,
        number=Number(int, min=0, hint="use 0 to switch it off"),
    )
    seed: int = setting(
        0, "Random seed; the same seed reproduces the same samples.", SAMPLING, number=Number(int, min=0)
    )
    max_tokens: int = setting(32768, "Output cap for mode none.", SAMPLING, number=Number(int, min=1, max=2**31 - 1))

    def __post_init__(self):
        check_settings(self)
        if 0 < self.temperature < MIN_TEMPERATURE:  # logits / 1e-30 overflow float32: NaN probabilities
            raise ConfigError(
                f"--temperature must be 0 or >= {MIN_TEMPERATURE}, got {self.temperature}",
                hint="use 0 for greedy decoding",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


SAMPLING_NUMBERS = numbers(Sampling)  # what each sampling setting may hold (e1.numeric)


@dataclass
class Completion:
    """One generated sample. ``token_ids`` are exactly what the model saw after the prompt
    (forced tokens included, marked in ``forced_mask``), so training needs no re-encoding.

    The texts say who wrote what: ``solution_text`` is only what the model wrote after thinking;
    the texts e1 forced that are neither thinking nor a marker (a mode's exit text, s1's
    "Final Answer:") are in ``forced_text``, never in a scored text (:meth:`text`). ``think_text``
    keeps s1's forced "Wait"s (the model thought on from them; no reward reads thinking)."""

    prompt_index: int
    sample_index: int
    think_text: str
    solution_text: str
    prompt_tokens: int
    think_tokens: int
    solve_tokens: int
    forced: bool  # the budget cut thinking (t, or soft's ceiling): the end marker was forced there
    finish_reason: str  # "stop" (EOS) | "length" (a budget or the context ran out)
    token_ids: list[int] = field(repr=False)
    forced_mask: list[bool] = field(repr=False)
    closed: bool = False  # thinking ended (naturally or forced): the solution follows a marker
    prefix_tokens: int = 0  # ids taken from a given prefix, not decoded (s1 may have replaced the last)
    # early-exit: trial tokens (prompts + answers) decoded and rolled back, never output; and one
    # record per trial: {"position", "think_tokens", "confidence", "exited", "text"}
    trial_tokens: int = 0
    trials: list[dict] = field(default_factory=list, repr=False)
    think_end: str = ""  # how thinking ended: one of row_state.THINK_ENDS; "" unknown (an API that reports none)
    forced_text: str = ""  # forced text that is neither thinking nor a marker: exit text, s1's answer prompt

    @property
    def total_tokens(self) -> int:
        return self.think_tokens + self.solve_tokens

    @property
    def decoded_tokens(self) -> int:
        """Every token the model decoded for this sample: the output plus rolled-back trial tokens."""
        return len(self.token_ids) + self.trial_tokens

    def text(self, end_marker: str) -> CompletionText:
        """The output as a reward sees it, the one gate from a completion to scoring (eval, sweep,
        training's rewards): thinking, the end marker if thinking ended, the solution the model wrote,
        carrying this split (:class:`~e1.data.CompletionText`): a reward reads ``solution``, so a
        literal end marker the model wrote inside thinking that never ended is no cut. Nothing e1
        forced after thinking (``forced_text``) is in it, so a forced "Final Answer:" is never
        scored as the model's answer."""
        if not self.closed:  # no solution: whatever followed is thinking's
            return CompletionText(self.think_text + self.solution_text, None, end_marker)
        return CompletionText(self.think_text, self.solution_text, end_marker)


class Engine(Protocol):
    """What every backend provides, and everything its callers (eval, sweep, the trainer) use.

    ``seeds`` gives each prompt its own seed; sample ``j`` of prompt ``p`` draws its randomness
    from (``seeds[p]``, ``j``) alone (:mod:`e1.engine.hf.sampling`), so the same seeds give the same
    samples whatever the batch size. Without ``seeds`` they derive from ``sampling.seed`` and
    each prompt's position in the call.

    ``prefixes`` (one per row, prompt-major: ``prefixes[i * n + j]`` for sample j of prompt i)
    gives each row another row's output for the same prompt, model and sampling settings: the
    row takes those ids as its own samples for as long as its mode would append them unchanged
    (:meth:`~e1.engine.row_state.RowState.follow`), then decodes on from there with its own seed
    (``Completion.prefix_tokens`` says how many it took). One unconstrained trajectory thus
    serves every budget of a sweep, each row still an exact sample of its own mode and budget.

    Training hands new weights over with :meth:`sync_weights`; an engine that holds the
    accelerator's memory (vLLM in sleep mode) frees it with :meth:`sleep` while the policy
    trains and takes it back with :meth:`wake_up`. Where there is nothing to free
    (``can_sleep`` False) both are no-ops.
    """

    tokenizer: Any  # encodes prompts; its chat template builds them (e1.data.prompts)
    markers: Markers  # think markers, EOS and pad ids resolved from the tokenizer
    max_context: int | None  # prompt + output tokens the model can hold (None: unknown)

    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        budget: Budget,
        mode: Mode = Mode(),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress=None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]: ...

    def sync_weights(self, module) -> None:
        """Decode with ``module``'s current weights from now on (a module holding all of them)."""

    @property
    def can_sleep(self) -> bool:
        """Whether :meth:`sleep` frees accelerator memory (vLLM built with sleep mode on a GPU)."""

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory until :meth:`wake_up`: level 1 keeps the weights in CPU memory,
        level 2 drops them (the next :meth:`sync_weights` brings new ones)."""

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Take the memory back: ``["weights"]``, ``["kv_cache"]``, or both (None)."""
