"""The training configuration: one frozen dataclass, defaults = the paper's E1-Math recipe.

    config = TrainConfig(model="agentica-org/DeepScaleR-1.5B-Preview", data="deepscaler", out=Path("runs/e1"))
    config = from_flat({"model": "./tiny", "data": "problems.jsonl", "steps": 10})   # flat keys

A config file (TOML or YAML, read by :mod:`e1.grpo.config_file`) holds the same keys as the dataclass
fields, flat, the rollout engine's (:class:`~e1.engine.spec.EngineSpec`: ``backend``, ``dtype``, ...) and the code rewards'
(:class:`~e1.rewards.scoring.ScoringSpec`: ``workers``, ``sandbox``, ...) among them::

    model = "./tiny"
    data = "problems.jsonl"
    think = "1k"
    prompts_per_step = 16
    backend = "vllm"

Importing this module does not import torch.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from e1.budget import Budget, parse_tokens
from e1.data import PromptOptions, record_includes
from e1.engine import EngineSpec, check_backend
from e1.errors import ConfigError, did_you_mean
from e1.grpo.curriculum import ThinkBudgets
from e1.grpo.loss_config import FORCED_TOKENS, GRPOLossConfig
from e1.grpo.parallel import zero_stage
from e1.numeric import Number
from e1.rewards import ScoringSpec
from e1.settings import (
    BUDGETS,
    DATA,
    GRPO,
    INCLUDE_HELP,
    MODEL,
    OPTIMIZER,
    RUN,
    SAMPLING,
    SCALE,
    check_settings,
    default_of,
    flat_fields,
    like,
    numbers,
    record,
    setting,
    spec,
    unflatten,
)
from e1.store import model_identity

ALGOS = ("grpo", "sft")
MEMORY_OPTIONS = ("activation_checkpointing", "ref_offload")  # where tensors live, not what is trained
LR_SCHEDULES = ("constant", "cosine")
ROLLOUT_CUTS = (
    "force",
    "zero",
)  # at the budget: force the end marker and solve (Elastic Reasoning) | reward 0 (ThinkPrune)
TRAIN_DTYPES = ("float32", "bfloat16", "float16")  # weights and optimizer state
# the rollout engine's defaults: decode with the policy module, in float32; vLLM (if asked for) shares
# each GPU with the policy and optimizer, so it gets less of it than in `e1 eval`
TRAIN_ENGINE = EngineSpec(backend="hf", dtype="float32", gpu_memory_utilization=0.4)
# ... and what they mean there (`e1 train --help`): no API backend, a training dtype, vLLM sharing the GPU
TRAIN_ENGINE_HELP = {
    "backend": {
        "help": "Rollout engine: hf | vllm (in-process, weights copied in after every step) | auto (vLLM if "
        "installed and a GPU is present); not the API backends.",
        "complete": "train_backends",
    },
    "dtype": {
        "help": "float32 | bfloat16 | float16 (the weights and the optimizer state).",
        "complete": "train_dtypes",
    },
    "tp": {"help": "vLLM tensor-parallel GPUs per engine (under DeepSpeed: ranks per engine)."},
    "gpu_memory_utilization": {
        "help": "vLLM's share of the GPU while it decodes, used only with --kv-cache-gib 0 (it "
        "sleeps during updates; training state stays resident)."
    },
}


def _whole(least: int = 1, **extra) -> Number:
    return Number(int, min=least, **extra)


@dataclass(frozen=True)
class TrainConfig:
    model: str = setting(help="Initial policy: model folder or hub id.", panel=MODEL, short="-m", shown=False)
    data: str = setting(
        help="Training problems: registry name or file with problem and answer fields.",
        panel=DATA,
        short="-d",
        shown=False,
        complete="dataset",
    )
    think: str | int = setting(
        "1k",
        "Rollout thinking budget t: 512, 1k, 1.5k; a set 512,1k,2k or a range 512..2k draws one per prompt "
        "and step (budget curriculum).",
        BUDGETS,
        cli_type=str,
    )
    solve: str | int = setting("1k", "Rollout solution budget s.", BUDGETS, cli_type=str)
    out: Path = setting(
        Path("runs/train"), "Run directory (config.json, metrics.parquet, checkpoints/, eval/).", RUN, path=True
    )
    steps: int = setting(200, "GRPO steps.", RUN, number=_whole())
    prompts_per_step: int = setting(128, "Problems per step.", GRPO, number=_whole())
    samples_per_prompt: int = setting(8, "Completions per problem (group size).", GRPO, number=_whole())
    mini_batch_prompts: int = setting(64, "Problems per optimizer step.", OPTIMIZER, number=_whole())
    micro_batch: int = setting(8, "Sequences per forward/backward.", OPTIMIZER, number=_whole())
    # recompute each decoder layer's activations in the update's backward instead of keeping them:
    # one layer's activations alive at a time, for about a third more update compute
    activation_checkpointing: bool = setting(
        False,
        "Keep only each decoder layer's input for the backward and recompute the rest there: far less memory"
        " in the update (at the 1.5B shape most of it), about a third more update compute.",
        OPTIMIZER,
    )
    lr: float = setting(
        1e-6,
        "AdamW learning rate.",
        OPTIMIZER,
        number=Number(float, min=0, above=True, max=1, hint="the paper uses 1e-6"),
    )
    weight_decay: float = setting(
        0.01, "AdamW weight decay.", OPTIMIZER, number=Number(float, min=0, max=1, hint="the paper uses 0.01")
    )
    grad_clip: float = setting(
        1.0,
        "Max gradient norm.",
        OPTIMIZER,
        number=Number(float, min=0, above=True, max=1e6, hint="the paper uses 1.0"),
    )
    temperature: float = setting(
        0.6,
        "Rollout temperature.",
        SAMPLING,
        number=Number(
            float,
            min=0,
            above=True,
            max=100,
            hint="greedy rollouts give every sample of a group the same reward; use 0.6",
        ),
    )
    top_p: float = setting(
        1.0,
        "Rollout nucleus threshold (1 = off).",
        SAMPLING,
        number=Number(float, min=0, above=True, max=1, hint="use 1 to switch it off"),
    )
    kl_coef: float = setting(
        0.001,
        "k3 KL weight; 0 loads no reference model.",
        GRPO,
        number=Number(float, min=0, max=1e6, hint="0 loads no reference model; the paper uses 0.001"),
    )
    clip_low: float = setting(
        0.2, "PPO clip below 1.", GRPO, number=Number(float, min=0, max=1, below=True, hint="0.2 is the usual value")
    )
    clip_high: float = setting(
        0.2, "PPO clip above 1.", GRPO, number=Number(float, min=0, max=1e6, hint="0.2, or 0.28 for DAPO's clip higher")
    )
    entropy_coef: float = setting(
        0.0, "Entropy bonus weight.", GRPO, number=Number(float, min=0, max=1e6, hint="0 turns the bonus off")
    )
    forced_tokens: str = setting("train", "Forced end markers: train | mask.", BUDGETS)
    save_every: int = setting(10, "Checkpoint every N steps.", RUN, number=_whole())
    # also save what --resume needs (optimizer state, data cursor, RNG) every N steps and at the end;
    # None = at every save. Other saves write the model folder alone: in bf16 with AdamW, 2 of every
    # 14 bytes per weight (ZeRO adds fp32 master weights to Adam's two moments)
    resume_every: int | None = setting(
        None,
        "Also save the optimizer state (what --resume needs) every N steps and at the end; other saves write "
        "the weights alone.",
        RUN,
        shown="every save",
        number=_whole(optional=True, hint="e.g. --save-every 1 --resume-every 10: cheap weights each step"),
    )
    keep_last: int | None = setting(
        None, "Keep only the newest K checkpoints.", RUN, shown="all", number=_whole(optional=True)
    )
    eval_every: int = setting(10, "Validate every N steps.", RUN, number=_whole())
    eval_data: str | None = setting(None, "Validation problems.", DATA, shown="none", complete="dataset")
    eval_limit: int | None = setting(
        None, "Only the first N validation problems.", DATA, shown="all", number=_whole(optional=True)
    )
    seed: int = setting(0, "Seed of data order, rollouts and mini-batches.", SAMPLING, number=_whole(0))
    resume: bool = setting(False, "Continue from the newest checkpoint in --out.", RUN, switch="--resume/--no-resume")
    batch_size: int = setting(64, "Sequences decoded together.", SCALE, number=_whole())
    rollout_chunks: int = setting(
        1,
        "Generate each step's rollouts in N chunks of whole prompts and score chunk k while chunk k+1 generates."
        " Pays when scoring takes time (code tasks whose sandboxed tests run for seconds), at the cost of "
        "smaller generate batches; 1 = one generate call, then scoring.",
        SCALE,
        number=_whole(),
    )
    # the rollout engine and the policy: backend (hf | vllm | auto), dtype of the weights and optimizer
    # (float32 | bfloat16 | float16), device, think markers; vLLM's tp (under DeepSpeed: ranks per engine,
    # dividing the world size), gpu_memory_utilization (used only with kv_cache_gib=0: vLLM sleeps during
    # the update, but the policy's weights and optimizer state stay resident) and max_model_len
    engine: EngineSpec = spec(TRAIN_ENGINE, flat=True, narrow=TRAIN_ENGINE_HELP)
    # code rewards: programs run at once in the one sandbox, seconds per test, largest N tests, sandbox backend
    scoring: ScoringSpec = spec(factory=ScoringSpec, flat=True)
    data_dir: Path | None = setting(
        None, "Prepared datasets.", DATA, shown="$E1_DATA_DIR or ~/.cache/e1/data", path=True
    )
    deepspeed: str | None = setting(
        None,
        "ZeRO data parallelism: zero1 | zero2 | zero3 | DeepSpeed JSON (launch with torchrun or deepspeed).",
        SCALE,
        shown="none",
    )
    # under ZeRO-3 (the reference is then partitioned like the policy): keep the reference model's
    # partition in CPU memory, each layer fetched for its forward (slower ref_logprob, less GPU memory)
    ref_offload: bool = setting(
        False,
        "Under --deepspeed zero3 (which partitions the KL reference model like the policy): keep the "
        "reference's partition in CPU memory and fetch each layer for its forward; less GPU memory, a slower"
        " ref_logprob phase.",
        SCALE,
    )
    algo: str = setting(
        "grpo", "grpo (budget-constrained rollouts) | sft (learn the data's completion column).", GRPO, complete="algos"
    )
    lr_schedule: str = setting("constant", "constant | cosine.", OPTIMIZER)
    warmup_steps: int = setting(0, "Linear learning-rate warm-up steps.", OPTIMIZER, number=_whole(0))
    # vLLM's KV cache per GPU in GiB; None = what one step's rollouts need (e1.grpo.rollout.kv_cache_bytes),
    # 0 = from gpu_memory_utilization, as `e1 eval` sizes it
    kv_cache_gib: float | None = setting(
        None,
        "vLLM's KV cache per GPU in GiB (0: from --gpu-memory-utilization).",
        SCALE,
        shown="what one step's rollouts need",
        number=Number(float, min=0, max=1e5, optional=True, hint="leave it out to size it to the rollouts"),
    )
    think_schedule: str | None = setting(
        None,
        "Tighten t over the run, ThinkPrune-style (Hou et al., 2025): stages 4k:2k:1k (equal shares of the "
        "steps) or a linear 4k..1k; caps --think.",
        BUDGETS,
        shown="none",
    )
    system_prompt: str | None = like(PromptOptions, "system")  # config files' keys: PromptOptions' settings
    chat_template_kwargs: str = like(PromptOptions, "template_kwargs")
    rollout_cut: str = setting(
        "force",
        "A rollout at its budget: force (the end marker is forced at t and the solution follows: Elastic "
        "Reasoning) | zero (cut at t+s with nothing forced, reward 0: ThinkPrune, Hou et al., 2025).",
        BUDGETS,
    )
    length_reward: str | None = setting(
        None,
        "Length-aware reward on the task's: l1-exact | l1-max (L1, Aggarwal & Welleck, 2025: the target "
        "length in the prompt), dapo (soft overlong penalty, DAPO, Yu et al., 2025), cosine (Yeo et al., "
        "2025), kimi (group-relative: Kimi k1.5, 2025); options as cosine:exceed=-5.",
        BUDGETS,
        shown="none",
    )
    report_to: str = setting(
        "none",
        "Also log metrics to tensorboard | wandb | tensorboard,wandb (WANDB_MODE=offline needs no network).",
        RUN,
    )
    include: tuple[str, ...] = setting(
        (),
        f"{INCLUDE_HELP} Recorded in config.json with its fingerprint: --resume names it again, unchanged.",
        DATA,
        shown=False,
    )

    def __post_init__(self):
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "include", tuple(str(path) for path in self.include))
        if self.data_dir is not None:
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        check_settings(self, by_flag=False)  # first: NaN, inf and 23-digit seeds never reach anything else
        self.budget  # noqa: B018  parses think/solve and the schedule, raising BudgetError/ConfigError
        self.length_shaping  # noqa: B018  parses length_reward
        self.prompt  # noqa: B018  checks the system prompt and chat template arguments
        self.reporters  # noqa: B018
        if self.algo not in ALGOS:
            raise ConfigError(f"unknown algo {self.algo!r}", hint=did_you_mean(self.algo, ALGOS))
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"unknown lr_schedule {self.lr_schedule!r}", hint=did_you_mean(self.lr_schedule, LR_SCHEDULES)
            )
        if self.samples_per_prompt < 2 and self.algo == "grpo":
            raise ConfigError(
                f"samples_per_prompt must be >= 2, got {self.samples_per_prompt}",
                hint="GRPO compares samples of one prompt; the paper uses 8",
            )
        if self.prompts_per_step % self.mini_batch_prompts:
            raise ConfigError(
                f"prompts_per_step ({self.prompts_per_step}) is not divisible by mini_batch_prompts "
                f"({self.mini_batch_prompts})",
                hint="pick a mini-batch that divides the step, e.g. 128 and 64",
            )
        if self.rollout_cut not in ROLLOUT_CUTS:
            raise ConfigError(
                f"unknown rollout_cut {self.rollout_cut!r}", hint=did_you_mean(self.rollout_cut, ROLLOUT_CUTS)
            )
        if self.forced_tokens not in FORCED_TOKENS:
            raise ConfigError(
                f"unknown forced_tokens {self.forced_tokens!r}", hint=did_you_mean(self.forced_tokens, FORCED_TOKENS)
            )
        if (
            self.deepspeed is not None
            and self.deepspeed not in ("zero1", "zero2", "zero3")
            and not str(self.deepspeed).endswith(".json")
        ):
            raise ConfigError(
                f"unknown deepspeed setting {self.deepspeed!r}",
                hint="use zero1, zero2, zero3 or a DeepSpeed .json file",
            )
        if self.deepspeed is not None and importlib.util.find_spec("deepspeed") is None:
            raise ConfigError(
                f"--deepspeed {self.deepspeed} needs DeepSpeed, which is not installed",
                hint="pip install 'e1[deepspeed]', or leave out --deepspeed to train on one device",
            )
        if self.ref_offload and (self.deepspeed is None or zero_stage(self.deepspeed) != 3):
            raise ConfigError(
                f"ref_offload needs ZeRO-3, not {self.deepspeed or 'one device'}",
                hint="add --deepspeed zero3 (only a partitioned reference is offloaded), or drop --ref-offload",
            )
        self._check_engines()

    def _check_engines(self) -> None:
        """What training narrows in the rollout engine's spec (checked in full by EngineSpec itself)."""
        check_backend(self.engine.backend, local=True)  # rollouts decode with the policy's weights: no API backend
        if self.engine.dtype not in TRAIN_DTYPES:
            raise ConfigError(f"unknown dtype {self.engine.dtype!r}", hint="use float32, bfloat16 or float16")

    @cached_property
    def think_budgets(self) -> ThinkBudgets:
        """Each prompt's thinking budget at each step (:mod:`e1.grpo.curriculum`)."""
        return ThinkBudgets.parse(self.think, self.think_schedule, self.steps)

    @property
    def budget(self) -> Budget:
        """The largest budget a rollout may get (one budget: the paper's t and s)."""
        return Budget(self.think_budgets.largest, parse_tokens(self.solve, "solve budget"))

    def save_kind(self, step: int) -> str | None:
        """What step ``step`` saves: "resume" (model folder + optimizer state, RNG and data cursor:
        a point ``--resume`` continues from exactly) at every ``resume_every`` steps and the last
        step, "weights" (the model folder alone) at the other ``save_every`` steps, else None.

        >>> config = TrainConfig(model="m", data="d", steps=5, save_every=1, resume_every=2)
        >>> [config.save_kind(step) for step in range(1, 6)]
        ['weights', 'resume', 'weights', 'resume', 'resume']
        """
        if step == self.steps or step % (self.resume_every or self.save_every) == 0:
            return "resume"
        return "weights" if step % self.save_every == 0 else None

    def budget_for(self, step: int, problem: int) -> Budget:
        """The budget of ``problem``'s rollouts at ``step``."""
        return Budget(self.think_budgets.think(self.seed, step, problem), self.budget.solve)

    @cached_property
    def prompt(self):
        """The :class:`e1.data.prompts.PromptOptions` of every prompt (rollouts, SFT, validation)."""
        return PromptOptions(system=self.system_prompt, template_kwargs=self.chat_template_kwargs)

    @cached_property
    def length_shaping(self):
        """The parsed ``length_reward`` (:class:`e1.rewards.length.LengthShaping`), or None."""
        from e1.rewards import LengthShaping

        return LengthShaping.parse(self.length_reward) if self.length_reward else None

    @property
    def reporters(self) -> tuple[str, ...]:
        """The names in ``report_to`` (empty for "none")."""
        from e1.report import parse_report_to

        return parse_report_to(self.report_to)

    def lr_at(self, step: int) -> float:
        """The learning rate of training step ``step`` (1-based): warm-up, then constant or cosine."""
        scale = min(1.0, step / self.warmup_steps) if self.warmup_steps else 1.0
        if self.lr_schedule == "cosine":
            scale *= 0.5 * (1 + math.cos(math.pi * (step - 1) / max(1, self.steps)))
        return self.lr * scale

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.prompts_per_step // self.mini_batch_prompts

    def loss_config(self) -> GRPOLossConfig:
        """The :class:`~e1.grpo.loss_config.GRPOLossConfig` of this run."""
        return GRPOLossConfig(
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            kl_coef=self.kl_coef,
            entropy_coef=self.entropy_coef,
            forced_tokens=self.forced_tokens,
        )

    def to_json(self) -> dict:
        data = record(self)  # the engine's and the code rewards' settings flat, beside the run's own
        data["out"], data["data_dir"] = str(self.out), self.data_dir and str(self.data_dir)
        data["budget"] = {"think": self.budget.think, "solve": self.budget.solve}  # think: the largest
        data["model_identity"] = model_identity(self.model)  # what the model is, however it was typed
        for key in MEMORY_OPTIONS:  # recorded only when given: config.json stays as it was without them
            if not data[key]:
                del data[key]
        return record_includes(data)  # with what each include was; config.json stays as it was without one


# what each numeric field may hold (e1.numeric), checked first in TrainConfig.__post_init__; errors
# name the field as a config file does (--prompts-per-step is prompts_per_step); the engine's and the
# code rewards' numbers are checked by EngineSpec and ScoringSpec
TRAIN_NUMBERS = numbers(TrainConfig)
# a config file's keys (and `e1 train`'s options) are flat: TrainConfig's own fields and its specs' fields
_FLAT = flat_fields(TrainConfig)
FIELDS = tuple(_FLAT)
# each key's default (MISSING: model and data): the rollout engine's are TRAIN_ENGINE's
DEFAULTS = {name: default_of(f) for name, f in _FLAT.items()} | asdict(TRAIN_ENGINE)


def from_flat(values: dict[str, Any]) -> TrainConfig:
    """The TrainConfig of flat keys (a config file's, the options'): each spec's keys build that spec.

    >>> config = from_flat({"model": "m", "data": "d", "backend": "vllm", "workers": 2})
    >>> config.engine.backend, config.engine.dtype, config.scoring.workers
    ('vllm', 'float32', 2)
    """
    return TrainConfig(**unflatten(TrainConfig, values, {"engine": TRAIN_ENGINE}))
