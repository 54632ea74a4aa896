"""The training configuration: one frozen dataclass, defaults = the paper's E1-Math recipe.

    config = TrainConfig(model="agentica-org/DeepScaleR-1.5B-Preview", data="deepscaler", out=Path("runs/e1"))
    config = from_flat(load_config_file("train.toml") | {"steps": 10})   # flags override the file

A config file (TOML or YAML) holds the same keys as the dataclass fields, flat, the rollout
engine's (:class:`~e1.engine.spec.EngineSpec`: ``backend``, ``dtype``, ...) and the code rewards'
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
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from e1.budget import Budget, parse_tokens
from e1.data import record_includes
from e1.engine import EngineSpec, check_backend
from e1.errors import ConfigError, did_you_mean
from e1.grpo.curriculum import ThinkBudgets
from e1.grpo.loss_config import FORCED_TOKENS, GRPOLossConfig
from e1.grpo.parallel import zero_stage
from e1.numeric import Number, check_numbers
from e1.rewards import ScoringSpec
from e1.store import model_identity

ALGOS = ("grpo", "sft")
MEMORY_OPTIONS = ("activation_checkpointing", "ref_offload")  # where tensors live, not what is trained
LR_SCHEDULES = ("constant", "cosine")
ROLLOUT_CUTS = ("force", "zero")  # at the budget: force the end marker and solve (Elastic Reasoning) | reward 0 (ThinkPrune)
TRAIN_DTYPES = ("float32", "bfloat16", "float16")  # weights and optimizer state
# the rollout engine's defaults: decode with the policy module, in float32; vLLM (if asked for) shares
# each GPU with the policy and optimizer, so it gets less of it than in `e1 eval`
TRAIN_ENGINE = EngineSpec(backend="hf", dtype="float32", gpu_memory_utilization=0.4)


def _whole(least: int = 1, **extra) -> Number:
    return Number(int, min=least, **extra)


# what each numeric field may hold (e1.numeric), checked first in TrainConfig.__post_init__; errors
# name the field as a config file does (--prompts-per-step is prompts_per_step)
TRAIN_NUMBERS = {
    **{name: _whole() for name in ("steps", "prompts_per_step", "samples_per_prompt", "mini_batch_prompts",
                                    "micro_batch", "save_every", "eval_every", "batch_size", "rollout_chunks")},
    "keep_last": _whole(optional=True), "eval_limit": _whole(optional=True),
    "resume_every": _whole(optional=True, hint="e.g. --save-every 1 --resume-every 10: cheap weights each step"),
    "warmup_steps": _whole(0), "seed": _whole(0),
    "lr": Number(float, min=0, above=True, max=1, hint="the paper uses 1e-6"),
    "weight_decay": Number(float, min=0, max=1, hint="the paper uses 0.01"),
    "grad_clip": Number(float, min=0, above=True, max=1e6, hint="the paper uses 1.0"),
    "temperature": Number(float, min=0, above=True, max=100,
                          hint="greedy rollouts give every sample of a group the same reward; use 0.6"),
    "top_p": Number(float, min=0, above=True, max=1, hint="use 1 to switch it off"),
    "kl_coef": Number(float, min=0, max=1e6, hint="0 loads no reference model; the paper uses 0.001"),
    "clip_low": Number(float, min=0, max=1, below=True, hint="0.2 is the usual value"),
    "clip_high": Number(float, min=0, max=1e6, hint="0.2, or 0.28 for DAPO's clip higher"),
    "entropy_coef": Number(float, min=0, max=1e6, hint="0 turns the bonus off"),
    "kv_cache_gib": Number(float, min=0, max=1e5, optional=True, hint="leave it out to size it to the rollouts"),
}  # the engine's and the code rewards' numbers are checked by EngineSpec and ScoringSpec


@dataclass(frozen=True)
class TrainConfig:
    model: str  # initial policy (and frozen reference): a model folder or hub id
    data: str  # training problems: a registry name or a file with problem and answer fields
    think: str | int = "1k"  # thinking budget t of the rollouts: 1k | a set 512,1k,2k | a range 512..2k (per prompt)
    solve: str | int = "1k"  # solution budget s of the rollouts
    out: Path = Path("runs/train")  # run directory: config.json, metrics.parquet, checkpoints/, eval/
    steps: int = 200  # GRPO steps (one rollout batch each)
    prompts_per_step: int = 128  # problems sampled per step
    samples_per_prompt: int = 8  # completions per problem: the GRPO group size
    mini_batch_prompts: int = 64  # problems per optimizer step (prompts_per_step / this = updates per step)
    micro_batch: int = 8  # sequences per forward/backward (gradient accumulation; bounds memory)
    # recompute each decoder layer's activations in the update's backward instead of keeping them:
    # one layer's activations alive at a time, for about a third more update compute
    activation_checkpointing: bool = False
    lr: float = 1e-6  # AdamW learning rate (peak: see lr_schedule and warmup_steps)
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # max global gradient norm per optimizer step
    temperature: float = 0.6  # rollout sampling temperature
    top_p: float = 1.0  # rollout nucleus sampling (1 = off)
    kl_coef: float = 0.001  # k3 KL to the initial model, in the loss; 0 = no reference model at all
    clip_low: float = 0.2  # PPO clip below 1
    clip_high: float = 0.2  # PPO clip above 1 (DAPO "clip higher" uses 0.28)
    entropy_coef: float = 0.0  # entropy bonus weight
    forced_tokens: str = "train"  # forced end-of-thinking markers: "train" on them (paper) | "mask" them out
    save_every: int = 10  # checkpoint every N steps (and always at the end)
    # also save what --resume needs (optimizer state, data cursor, RNG) every N steps and at the end;
    # None = at every save. Other saves write the model folder alone: in bf16 with AdamW, 2 of every
    # 14 bytes per weight (ZeRO adds fp32 master weights to Adam's two moments)
    resume_every: int | None = None
    keep_last: int | None = None  # keep only the newest K checkpoints; None = keep all
    eval_every: int = 10  # validate on eval_data every N steps
    eval_data: str | None = None  # validation problems (registry name or file); None = no validation
    eval_limit: int | None = None  # only the first N validation problems
    seed: int = 0  # data order, rollout sampling and mini-batch order all derive from it
    resume: bool = False  # continue from the newest checkpoint in `out`
    batch_size: int = 64  # sequences decoded together in rollouts and validation
    rollout_chunks: int = 1  # rollout in N chunks of whole prompts, chunk k scored while chunk k + 1 generates
    # the rollout engine and the policy: backend (hf | vllm | auto), dtype of the weights and optimizer
    # (float32 | bfloat16 | float16), device, think markers; vLLM's tp (under DeepSpeed: ranks per engine,
    # dividing the world size), gpu_memory_utilization (used only with kv_cache_gib=0: vLLM sleeps during
    # the update, but the policy's weights and optimizer state stay resident) and max_model_len
    engine: EngineSpec = TRAIN_ENGINE
    # code rewards: programs run at once in the one sandbox, seconds per test, largest N tests, sandbox backend
    scoring: ScoringSpec = field(default_factory=ScoringSpec)
    data_dir: Path | None = None  # where prepared datasets live (default: $E1_DATA_DIR)
    deepspeed: str | None = None  # ZeRO data parallelism: zero1 | zero2 | zero3 | DeepSpeed JSON file; None = one device
    # under ZeRO-3 (the reference is then partitioned like the policy): keep the reference model's
    # partition in CPU memory, each layer fetched for its forward (slower ref_logprob, less GPU memory)
    ref_offload: bool = False
    algo: str = "grpo"  # grpo: budget-constrained GRPO | sft: supervised fine-tuning on the data's `completion` column
    lr_schedule: str = "constant"  # constant (the paper) | cosine (decay to 0 over `steps`)
    warmup_steps: int = 0  # linear warm-up of the learning rate over the first N steps
    # vLLM's KV cache per GPU in GiB; None = what one step's rollouts need (e1.grpo.rollout.kv_cache_bytes),
    # 0 = from gpu_memory_utilization, as `e1 eval` sizes it
    kv_cache_gib: float | None = None
    think_schedule: str | None = None  # cap on t over the steps (ThinkPrune): stages 4k:2k:1k | linear 4k..1k
    system_prompt: str | None = None  # a system message before each problem (default: none, as the paper)
    chat_template_kwargs: str = ""  # JSON arguments for the chat template, e.g. {"enable_thinking": false}
    rollout_cut: str = "force"  # a rollout at its budget: "force" the end marker and solve (paper) | "zero" (ThinkPrune)
    length_reward: str | None = None  # shaping after the task reward: l1-exact | l1-max | dapo | cosine [:key=value]
    report_to: str = "none"  # metrics also to: tensorboard | wandb | tensorboard,wandb | none
    include: tuple[str, ...] = ()  # --include: the user's code (rewards, datasets, prompts), recorded for --resume

    def __post_init__(self):
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "include", tuple(str(path) for path in self.include))
        if self.data_dir is not None:
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        check_numbers(self, TRAIN_NUMBERS)  # first: NaN, inf and 23-digit seeds never reach anything else
        self.budget  # noqa: B018  parses think/solve and the schedule, raising BudgetError/ConfigError
        self.length_shaping  # noqa: B018  parses length_reward
        self.prompt  # noqa: B018  checks the system prompt and chat template arguments
        self.reporters  # noqa: B018
        if self.algo not in ALGOS:
            raise ConfigError(f"unknown algo {self.algo!r}", hint=did_you_mean(self.algo, ALGOS))
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"unknown lr_schedule {self.lr_schedule!r}", hint=did_you_mean(self.lr_schedule, LR_SCHEDULES))
        if self.samples_per_prompt < 2 and self.algo == "grpo":
            raise ConfigError(f"samples_per_prompt must be >= 2, got {self.samples_per_prompt}",
                              hint="GRPO compares samples of one prompt; the paper uses 8")
        if self.prompts_per_step % self.mini_batch_prompts:
            raise ConfigError(
                f"prompts_per_step ({self.prompts_per_step}) is not divisible by mini_batch_prompts "
                f"({self.mini_batch_prompts})", hint="pick a mini-batch that divides the step, e.g. 128 and 64")
        if self.rollout_cut not in ROLLOUT_CUTS:
            raise ConfigError(f"unknown rollout_cut {self.rollout_cut!r}", hint=did_you_mean(self.rollout_cut, ROLLOUT_CUTS))
        if self.forced_tokens not in FORCED_TOKENS:
            raise ConfigError(f"unknown forced_tokens {self.forced_tokens!r}", hint=did_you_mean(self.forced_tokens, FORCED_TOKENS))
        if self.deepspeed is not None and self.deepspeed not in ("zero1", "zero2", "zero3") \
                and not str(self.deepspeed).endswith(".json"):
            raise ConfigError(f"unknown deepspeed setting {self.deepspeed!r}",
                              hint="use zero1, zero2, zero3 or a DeepSpeed .json file")
        if self.deepspeed is not None and importlib.util.find_spec("deepspeed") is None:
            raise ConfigError(f"--deepspeed {self.deepspeed} needs DeepSpeed, which is not installed",
                              hint="pip install 'e1[deepspeed]', or leave out --deepspeed to train on one device")
        if self.ref_offload and (self.deepspeed is None or zero_stage(self.deepspeed) != 3):
            raise ConfigError(f"ref_offload needs ZeRO-3, not {self.deepspeed or 'one device'}",
                              hint="add --deepspeed zero3 (only a partitioned reference is offloaded), or drop --ref-offload")
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
        from e1.data import PromptOptions

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
        return GRPOLossConfig(clip_low=self.clip_low, clip_high=self.clip_high, kl_coef=self.kl_coef,
                              entropy_coef=self.entropy_coef, forced_tokens=self.forced_tokens)

    def to_json(self) -> dict:
        data = asdict(self)
        data |= data.pop("engine") | data.pop("scoring")  # flat, as config.json was before the specs
        data["out"], data["data_dir"] = str(self.out), self.data_dir and str(self.data_dir)
        data["budget"] = {"think": self.budget.think, "solve": self.budget.solve}  # think: the largest
        data["model_identity"] = model_identity(self.model)  # what the model is, however it was typed
        for key in MEMORY_OPTIONS:  # recorded only when given: config.json stays as it was without them
            if not data[key]:
                del data[key]
        return record_includes(data)  # with what each include was; config.json stays as it was without one


# a config file's keys (and `e1 train`'s options) are flat: TrainConfig's own fields and its specs' fields
SPECS = {"engine": EngineSpec, "scoring": ScoringSpec}
_FLAT = {f.name: f for f in fields(TrainConfig) if f.name not in SPECS} | {
    f.name: f for spec in SPECS.values() for f in fields(spec)}
FIELDS = tuple(_FLAT)
# each key's default (MISSING: model and data): the rollout engine's are TRAIN_ENGINE's
DEFAULTS = {f.name: f.default for f in fields(TrainConfig) if f.name not in SPECS} | asdict(TRAIN_ENGINE) | {
    f.name: f.default_factory() if f.default is MISSING else f.default for f in fields(ScoringSpec)}


def from_flat(values: dict[str, Any]) -> TrainConfig:
    """The TrainConfig of flat keys (a config file's, the options'): each spec's keys build that spec.

    >>> config = from_flat({"model": "m", "data": "d", "backend": "vllm", "workers": 2})
    >>> config.engine.backend, config.engine.dtype, config.scoring.workers
    ('vllm', 'float32', 2)
    """
    parts = {name: {f.name: values[f.name] for f in fields(spec) if f.name in values} for name, spec in SPECS.items()}
    own = {key: value for key, value in values.items() if not any(key in part for part in parts.values())}
    return TrainConfig(**own, engine=replace(TRAIN_ENGINE, **parts["engine"]), scoring=ScoringSpec(**parts["scoring"]))


def check_keys(values: dict[str, Any], source: str = "config") -> None:
    """ConfigError naming the first unknown key and the closest valid one."""
    for key in values:
        if key not in FIELDS:
            raise ConfigError(f"{source}: unknown key {key!r}", hint=did_you_mean(key, FIELDS))


# a config file's value for a field must be one of these (bool is refused where a number belongs:
# TOML/YAML ``true`` is not 1); "Path" fields take strings
_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "Path": (str, Path),
          "tuple[str, ...]": (list, tuple)}
_TYPE_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string",
               "Path": "a path (a string)", "tuple[str, ...]": "a list of paths"}


def check_types(values: dict[str, Any], source: str = "config") -> None:
    """ConfigError naming the first value whose type does not fit its field, as the CLI refuses
    ``--steps 2.5``: ``steps = 2.5``, ``prompts_per_step = true`` and ``lr = "fast"`` are all refused.

    >>> check_types({"steps": 2.5}, "train.toml")
    Traceback (most recent call last):
    e1.errors.ConfigError: train.toml: steps must be a whole number, got 2.5 (write e.g. steps = 200)
    """
    annotations = {name: str(f.type) for name, f in _FLAT.items()}
    for key, value in values.items():
        kinds = [kind.strip() for kind in annotations[key].split("|")]
        if value is None and "None" in kinds:
            continue
        fits = any(isinstance(value, _TYPES[kind]) and (kind == "bool" or not isinstance(value, bool))
                   for kind in kinds if kind in _TYPES)
        if not fits:
            expected = " or ".join(_TYPE_NAMES[kind] for kind in kinds if kind in _TYPE_NAMES)
            sep = ": " if str(source).lower().endswith((".yaml", ".yml")) else " = "
            raise ConfigError(f"{source}: {key} must be {expected}, got {value!r}",
                              hint=f"write e.g. {key}{sep}{_example(key)}")


def _example(key: str) -> str:
    """The field's default as a TOML value (``"..."`` when it has none)."""
    default = DEFAULTS[key]
    if default is None or default is MISSING:
        return '"..."'
    if isinstance(default, tuple):
        return '["my_rewards.py"]'
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float):  # 1.0e-06, not 1e-06: YAML 1.1 reads a mantissa without a dot as a string
        mantissa, e, exponent = repr(default).partition("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}{e}{exponent}"
    return f'"{default}"' if isinstance(default, (str, Path)) else str(default)


# what YAML 1.1 (PyYAML) reads as a string though it is a float: an exponent without a dot (1e-6, 3E-3)
_YAML_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_floats(values: dict[str, Any]) -> dict[str, Any]:
    """``lr: 1e-6`` as the float it means (YAML 1.1 reads it as the string "1e-6"), in float fields only."""
    floats = {name for name, f in _FLAT.items() if "float" in str(f.type)}
    return {key: float(value) if key in floats and isinstance(value, str) and _YAML_FLOAT.fullmatch(value.strip())
            else value for key, value in values.items()}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The keys of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file, checked against :class:`TrainConfig`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file", hint="check the path")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        import tomllib

        values = _parse(path, tomllib.loads, tomllib.TOMLDecodeError)
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path}: reading YAML needs PyYAML", hint="pip install pyyaml, or use a .toml file") from None
        values = _parse(path, yaml.safe_load, yaml.YAMLError) or {}
        values = _yaml_floats(values) if isinstance(values, dict) else values
    else:
        raise ConfigError(f"{path}: unknown config format {suffix!r}", hint="use a .toml or .yaml file")
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected key = value pairs at the top level", hint="see `e1 train --help`")
    check_keys(values, str(path))
    check_types(values, str(path))
    return values


def _parse(path: Path, parse, error: type[Exception]):
    try:
        return parse(path.read_text())
    except (error, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot parse: {str(err).splitlines()[0]}", hint="fix the syntax") from None


def build_config(file: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """A TrainConfig from an optional file plus overrides; ``None`` overrides mean "not given"."""
    values = load_config_file(file) if file else {}
    given = {key: value for key, value in overrides.items() if value is not None}
    check_keys(given, "options")
    merged = values | given
    for required in ("model", "data"):
        if required not in merged:
            raise ConfigError(f"no {required} given", hint=f"pass --{required} or set {required} in the config file")
    return from_flat(merged)
