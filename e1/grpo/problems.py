"""A training run's problems, checked before any weights load: the data, the tokenizer and markers,
each prompt tokenized once, SFT targets, and that the longest sequence fits the model's context.

    problems = load_problems("problems.jsonl", data_dir=None)
    inputs = prepare_inputs(config)           # Inputs(problems, tokenizer, markers, prompt_ids, targets, instruct)
    inputs.instruct(3, 2048)                  # L1: problem 3's prompt ids asking for 2048 tokens (else None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from e1.errors import ConfigError, DataError
from e1.grpo.config import TrainConfig


@dataclass(frozen=True)
class Inputs:
    problems: object  # canonical DataFrame
    tokenizer: object
    markers: object  # e1.engine.markers.Markers
    prompt_ids: list[list[int]]  # per problem, tokenized once
    targets: list[list[int]]  # SFT: each problem's completion ids + EOS; empty for GRPO
    instruct: Instructed | None = None  # a length reward's prompts (L1's target length), else None


@dataclass
class Instructed:
    """Prompts ending with a length reward's instruction ("Think for N tokens."): each problem's ids
    for each target N, tokenized once."""

    tokenizer: object
    problems: object  # canonical DataFrame
    shaping: object  # e1.rewards.length.LengthShaping with an instruction
    options: object  # e1.data.prompts.PromptOptions
    cache: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def __call__(self, problem: int, target_tokens: int) -> list[int]:
        from e1.data import build_prompt

        key = (problem, target_tokens)
        if key not in self.cache:
            text, task = self.problems["problem"].iloc[problem], self.problems["task"].iloc[problem]
            prompt = build_prompt(
                self.tokenizer, text, task, instruction=self.shaping.instruction(target_tokens), options=self.options
            )
            self.cache[key] = self.tokenizer.encode(prompt, add_special_tokens=False)
        return self.cache[key]


def prompt_of(
    prompt_ids: list[list[int]], instruct: Instructed | None, config: TrainConfig, step: int, problem: int
) -> list[int]:
    """``problem``'s prompt ids at ``step``: tokenized once, or with its length instruction (L1)."""
    if instruct is None:
        return prompt_ids[problem]
    return instruct(problem, config.budget_for(step, problem).total)


def prepare_inputs(config: TrainConfig) -> Inputs:
    """Everything cheap about the run's input, validated; raises an E1Error on the first problem."""
    from e1.data import build_prompt
    from e1.engine import generation_eos, load_tokenizer, resolve_markers

    problems = load_problems(config.data, config.data_dir)
    if config.eval_data:
        load_problems(config.eval_data, config.data_dir)
    tokenizer = load_tokenizer(config.model)
    markers = resolve_markers(
        tokenizer, config.engine.think_start, config.engine.think_end, generation_eos(config.model)
    )
    prompt_ids = [
        tokenizer.encode(build_prompt(tokenizer, p, t, options=config.prompt), add_special_tokens=False)
        for p, t in zip(problems["problem"], problems["task"])
    ]
    targets = sft_targets(problems, tokenizer, config) if config.algo == "sft" else []
    shaping = config.length_shaping
    instruct = Instructed(tokenizer, problems, shaping, config.prompt) if shaping and shaping.instruction(1) else None
    longest = max(len(instruct(i, config.budget.total)) if instruct else len(ids) for i, ids in enumerate(prompt_ids))
    check_context(config, longest, len(markers.end_ids), max(map(len, targets), default=0))
    return Inputs(problems, tokenizer, markers, prompt_ids, targets, instruct)


def load_problems(spec: str, data_dir: Path | None):
    """The canonical problems of ``spec``; every one needs a reference answer."""
    from e1.data import load_dataset

    frame = load_dataset(spec, data_dir)
    if not len(frame):
        raise DataError(f"{spec}: no problems", hint="is it the right dataset?")
    answers = frame["answer"].fillna("").astype(str).str.strip()
    if (answers == "").any():
        raise DataError(
            f"{spec}: {int((answers == '').sum())} problems have no answer",
            hint="training needs a reference answer for every problem",
        )
    return frame.reset_index(drop=True)


def check_context(config: TrainConfig, max_prompt_tokens: int, marker_tokens: int, max_target_tokens: int = 0) -> None:
    """Longest prompt + t + forced marker + s (or, for SFT, the longest target) must fit the
    model's context (read from its config)."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from e1.engine import context_length

    try:
        model_config = AutoConfig.from_pretrained(config.model)
    except (OSError, ValueError):
        return  # load_model reports an unloadable model with its own error
    context = context_length(SimpleNamespace(config=model_config))
    needed = max_prompt_tokens + (max_target_tokens if config.algo == "sft" else config.budget.total + marker_tokens)
    if context is not None and needed > context:
        raise ConfigError(
            f"the longest prompt ({max_prompt_tokens} tokens) + think {config.budget.think} + end marker "
            f"{marker_tokens} + solve {config.budget.solve} = {needed} tokens exceeds the model's context of {context}",
            hint="lower --think/--solve or drop the longest problems",
        )


def sft_targets(problems, tokenizer, config: TrainConfig) -> list[list[int]]:
    """The token ids SFT learns for each problem: its ``completion`` text, then EOS."""
    if "completion" not in problems.columns:
        raise DataError(
            f"{config.data} has no 'completion' column, which --algo sft learns from",
            hint="give each row the target output (thinking, </think>, solution) in a completion field",
        )
    eos = tokenizer.eos_token_id
    targets = []
    for row, text in enumerate(problems["completion"], start=1):
        if not isinstance(text, str) or not text:
            raise DataError(f"{config.data}: row {row} has an empty completion", hint="fill or drop that row")
        targets.append(tokenizer.encode(text, add_special_tokens=False) + [eos])
    return targets
