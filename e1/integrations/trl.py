"""Budgeted GRPO rollouts inside TRL's ``GRPOTrainer``: every completion decoded by e1 under ``(t, s)``.

    from trl import GRPOConfig, GRPOTrainer
    from e1.integrations.trl import budgeted_rollouts

    rollouts = budgeted_rollouts(think=256, solve=128, forced_tokens="mask")
    trainer = GRPOTrainer(model, reward_funcs=reward, train_dataset=dataset, rollout_func=rollouts,
                          args=GRPOConfig(max_completion_length=512, ...))

TRL's extension point (trl 1.16.0, ``trl/trainer/grpo_trainer.py``): the ``rollout_func`` argument of
``GRPOTrainer`` (its type ``RolloutFunc`` at line 130, its contract at 258-265, the argument at 321).
``GRPOTrainer._generate`` (2200-2216) calls it with this process's prompts (the sampler has already
repeated each ``num_generations`` times, so one completion per prompt is due) and the trainer, in place of
TRL's own generation. It returns ``prompt_ids``, ``completion_ids`` and ``logprobs``; of its other fields,
``env_mask`` (2272) becomes TRL's ``tool_mask``, which multiplies the loss mask (2497, 3027), and every
other one reaches the reward functions as a keyword (2741-2747).

What e1 does there, with its own definitions (nothing here restates a rule):

- **Prompts** are tokenized by TRL itself (``GRPOTrainer._tokenize_prompts``, 1684: its chat template,
  ``chat_template_kwargs`` and tools), so ``prompt_ids`` are the ids TRL's own generation would use.
- **Decoding** is e1's transformers engine (:class:`~e1.engine.hf.hf_engine.HFEngine`) on the policy
  module, unwrapped by TRL's ``unwrap_model_for_generation`` as TRL's own generation is (gradient
  checkpointing off while decoding, ZeRO-3 weights gathered). Every row runs its
  :class:`~e1.engine.row_state.RowState` from the one builder (``build_state``), so a rollout is within
  ``(t, s)`` exactly as ``e1 eval`` and ``e1 train`` decode it.
- **Completion ids** are exactly the ids the model saw after the prompt: the forced end marker (with the
  mode's exit text) is in them. A rollout that spends ``s`` ends without an EOS, which TRL counts as
  truncated (``completions/clipped_ratio``; ``mask_truncated_completions=True`` drops it from the loss).
- **The mask** is e1's :func:`~e1.grpo.core.loss_mask` of the forced ids, sent as ``env_mask``:
  ``forced_tokens="mask"`` leaves every forced id out of TRL's loss (and of its KL and entropy terms,
  which TRL masks alike); ``"train"`` (the paper, ``e1 train``'s default) trains on them.
- **Rewards** receive, beside TRL's ``completions`` (decoded by TRL with special tokens skipped, so a
  special ``</think>`` is not in them), ``e1_completion`` (a :class:`~e1.data.CompletionText`: the text
  with e1's token split, a reward reads ``.solution``), ``e1_think_tokens``, ``e1_solve_tokens`` and
  ``e1_thinking_cut`` (the budget ended thinking).
- **Seeds**: each row's randomness comes from (``args.seed``, the global step, the micro-step within it,
  the process, its position) (:func:`rollout_seeds`), so a run draws the same rollouts again.

What differs from ``e1 train``: TRL computes its own loss (``loss_type``, ``beta``, importance weights)
and advantages; ``logprobs`` is None (TRL recomputes the old log-probs as for its own transformers
generation). Generation settings e1 would not honour (vLLM, continuous batching, ``min_p``,
``repetition_penalty``, ``generation_kwargs``, ``cache_implementation``), vision processors and FSDP are
refused in one line (:func:`sampling_of`), not ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from e1.budget import Budget
from e1.engine import DEFAULT_END, Mode, Sampling, check_markers, derive_seed
from e1.errors import ConfigError
from e1.grpo import FORCED_TOKENS
from e1.numeric import Number

TRL_RANGE = ">=1.16,<1.17"  # the TRL releases whose GRPOTrainer this is written against (pyproject's extra `trl`)
MAX_MARKER_CHARS = 256  # a think marker is a few tokens of text
_BATCH = Number(int, min=1, max=65536, hint="rows decoded together, e.g. 64")

# GRPOConfig fields that steer TRL's own generation: a value other than their default would be ignored by
# e1's decoding, so it is refused. (field, its neutral values, the hint)
IGNORED = (
    ("use_vllm", (False,), "e1 decodes with the policy module itself: set use_vllm=False"),
    ("use_transformers_continuous_batching", (False,), "set use_transformers_continuous_batching=False"),
    ("min_p", (None,), "e1 samples with temperature, top_p and top_k: leave min_p unset"),
    ("repetition_penalty", (1.0,), "e1 samples with temperature, top_p and top_k: leave repetition_penalty at 1"),
    ("generation_kwargs", (None, {}), "e1 samples with temperature, top_p and top_k: leave generation_kwargs unset"),
    ("cache_implementation", (None,), "e1 decodes with its own KV cache: leave cache_implementation unset"),
)


@dataclass(frozen=True)
class BudgetedRollouts:
    """A TRL ``rollout_func``: call it as TRL does, ``rollouts(prompts, trainer) -> dict``. Built by
    :func:`budgeted_rollouts` (which parses texts such as ``"1k"``); its fields are checked here, once,
    however it is built."""

    budget: Budget
    mode: Mode
    forced_tokens: str = "train"
    think_start: str | None = None
    think_end: str | None = None
    batch_size: int = 64

    def __post_init__(self):
        if not isinstance(self.budget, Budget) or not isinstance(self.mode, Mode):
            raise ConfigError(
                "a budget and a mode are needed", hint="build it with budgeted_rollouts(think, solve, mode)"
            )
        if not self.mode.bounded:
            raise ConfigError(
                f"mode {self.mode} has no budget of its own", hint="use a budgeted mode: elastic, truncate, soft, ..."
            )
        if not isinstance(self.forced_tokens, str) or self.forced_tokens not in FORCED_TOKENS:
            raise ConfigError(f"unknown forced_tokens {str(self.forced_tokens)[:40]!r}", hint="use train or mask")
        for name, marker in (("think_start", self.think_start), ("think_end", self.think_end)):
            if marker is not None and (not isinstance(marker, str) or len(marker) > MAX_MARKER_CHARS):
                raise ConfigError(f"{name} must be a text of at most {MAX_MARKER_CHARS} characters", hint="or None")
        check_markers(self.think_start, self.think_end)
        _BATCH.check(self.batch_size, "batch_size")

    def __call__(self, prompts: list, trainer) -> dict:
        sampling = sampling_of(trainer, self)
        prompt_ids, images, fields = trainer._tokenize_prompts(prompts)  # TRL's own tokenization (see above)
        if images is not None or fields:
            raise ConfigError("e1's budgeted rollouts decode text prompts only", hint="drop the images")
        completions = self.generate(trainer, prompt_ids, sampling)
        return {
            "prompt_ids": [list(ids) for ids in prompt_ids],
            "completion_ids": [list(c.token_ids) for c in completions],
            "logprobs": None,
            "env_mask": self.masks(completions),
            **reward_fields(completions),
        }

    def generate(self, trainer, prompt_ids: Sequence[Sequence[int]], sampling: Sampling) -> list:
        """One e1 completion per prompt, on the policy as TRL's own generation unwraps it."""
        from trl.models import unwrap_model_for_generation

        from e1.engine import HFEngine

        seeds = rollout_seeds(trainer, len(prompt_ids))
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            engine = HFEngine(model, trainer.processing_class, self.engine_markers(trainer), self.batch_size)
            return engine.generate(list(prompt_ids), self.budget, self.mode, sampling, n=1, seeds=seeds)

    def engine_markers(self, trainer):
        """The think markers in TRL's tokenizer; EOS: every id TRL ends a completion at (``eos_token_ids``)."""
        from e1.engine import resolve_markers

        return resolve_markers(trainer.processing_class, self.think_start, self.think_end, trainer.eos_token_ids)

    def masks(self, completions: list) -> list[list[int]]:
        """Per completion, 1 where a token enters the loss: e1's :func:`~e1.grpo.core.loss_mask` of its forced ids."""
        import torch

        from e1.grpo import loss_mask

        rows = []
        for c in completions:
            forced = torch.tensor(c.forced_mask, dtype=torch.bool)  # [C]
            rows.append(loss_mask(torch.ones_like(forced), forced, self.forced_tokens).int().tolist())
        return rows

    def max_tokens(self, tokenizer) -> int:
        """The most completion ids a rollout can have with ``tokenizer``'s markers: the mode's worst case
        (``t + s``, the forced marker and exit text, a grace window) plus one (the room e1's engines give a row).
        ``GRPOConfig.max_completion_length`` must be at least this."""
        from e1.engine import exit_ids, resolve_markers

        markers = resolve_markers(tokenizer, self.think_start, self.think_end)
        return self.mode.worst_case(self.budget, markers, exit_ids(tokenizer, self.mode.exit_text)) + 1


def budgeted_rollouts(
    think: int | str,
    solve: int | str,
    mode: str | Mode = "elastic",
    forced_tokens: str = "train",
    think_start: str | None = None,
    think_end: str | None = None,
    batch_size: int = 64,
) -> BudgetedRollouts:
    """The integration's arguments as a :class:`BudgetedRollouts` for TRL's ``rollout_func``, or a
    one-line :class:`~e1.errors.E1Error` (texts parsed here, every field checked by the class).
    ``think``/``solve``: ``t`` and ``s`` (``512``, ``"1.5k"``); ``mode``: a budgeted e1 mode (``elastic``, ``truncate``, ``soft:strength=4``,
    ...; not ``none``); ``forced_tokens``: ``train`` or ``mask`` (as ``e1 train --forced-tokens``);
    ``think_start``/``think_end``: the markers when the tokenizer's are not ``<think>``/``</think>``;
    ``batch_size``: rows decoded together.

    >>> budgeted_rollouts(think="1k", solve=256, forced_tokens="mask").budget
    Budget(think=1024, solve=256)
    >>> budgeted_rollouts(8, 8, mode="none")
    Traceback (most recent call last):
    e1.errors.ConfigError: mode none has no budget of its own (use a budgeted mode: elastic, truncate, soft, ...)
    """
    return BudgetedRollouts(
        Budget.parse(think, solve), Mode.parse(mode), forced_tokens, think_start, think_end, batch_size
    )


def sampling_of(trainer, rollouts: BudgetedRollouts) -> Sampling:
    """The one gate of the trainer's settings: TRL's sampling settings as e1's :class:`~e1.engine.Sampling`,
    or a one-line error for a setting e1's decoding would not honour, a processor that is not a text
    tokenizer, FSDP, or a ``max_completion_length`` below the longest rollout the budget allows."""
    args = trainer.args
    for name, neutral, hint in IGNORED:
        value = getattr(args, name, neutral[0])
        if not any(value is v or (v is not None and value == v) for v in neutral):
            raise ConfigError(
                f"GRPOConfig({name}={str(value)[:60]}) is not honoured by e1's budgeted rollouts", hint=hint
            )
    if getattr(trainer, "_is_vlm", False) or getattr(trainer, "is_fsdp_enabled", False):
        raise ConfigError("e1's budgeted rollouts take a text model without FSDP", hint="use a tokenizer, DDP or ZeRO")
    longest = rollouts.max_tokens(trainer.processing_class)
    cap = Number(int, min=1, optional=True).check(args.max_completion_length, "GRPOConfig.max_completion_length")
    if cap is not None and cap < longest:
        raise ConfigError(
            f"a rollout at {rollouts.mode} t={rollouts.budget.think} s={rollouts.budget.solve} can have {longest} "
            f"completion ids, more than max_completion_length={args.max_completion_length}",
            hint=f"set GRPOConfig(max_completion_length={longest}) or lower think/solve",
        )
    return Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0, seed=args.seed)


def rollout_seeds(trainer, rows: int) -> list[int]:
    """Each row's seed: (``args.seed``, the optimizer step, the micro-step within it, the process, the row).
    The micro-step (``trainer._step``, TRL's count of ``training_step`` calls, modulo the accumulation
    steps) tells apart the generations of one optimizer step (``steps_per_generation`` below
    ``gradient_accumulation_steps``); a resumed run starts at a step's first micro-step, so it draws alike."""
    accumulation = getattr(trainer, "current_gradient_accumulation_steps", None) or 1
    micro = getattr(trainer, "_step", 0) % accumulation
    step, process = trainer.state.global_step, trainer.accelerator.process_index
    return [derive_seed(trainer.args.seed, "trl-rollout", step, micro, process, row) for row in range(rows)]


def reward_fields(completions: list) -> dict[str, list]:
    """The fields TRL hands every reward function beside its own: e1's split and counts, per completion
    (the text joined with the canonical ``</think>``, as ``e1 train`` scores it)."""
    return {
        "e1_completion": [c.text(DEFAULT_END) for c in completions],
        "e1_think_tokens": [c.think_tokens for c in completions],
        "e1_solve_tokens": [c.solve_tokens for c in completions],
        "e1_thinking_cut": [c.forced for c in completions],
    }
