"""`e1 demo`: Elastic Reasoning end to end at tiny scale, with e1's own code paths.

    run_demo(DemoConfig(out=Path("runs/demo")))      # about 7-8 minutes on 2 CPU cores
    run_demo(DemoConfig(out=Path("runs/demo"), fast=True))

1. data   — ``e1 data prepare digits digits-train`` (the synthetic task of :mod:`e1.data.digits_task`)
2. model  — a character tokenizer and a ~0.8M-parameter Qwen2, built from a config
3. sft    — ``e1 train --algo sft`` on verbose/concise traces: the *base* reasoning model
4. probe  — the base model unconstrained on the test split: its median thinking length m
5. e1     — ``e1 train`` (GRPO, budget-constrained rollout, s = 2, t drawn per prompt from m/2 up to m,
            raised to the longest concise trace where m is below it, see :func:`training_range`)
6. cosine — a length-penalty baseline: ``e1 train --length-reward cosine`` (Yeo et al., 2025) from
            the base model, same steps and recipe, rollouts at t ≈ 2m, so never cut: its length is
            shaped by the reward, not a budget
7. curves — ``e1 sweep`` of the three models over think budgets in elastic and truncate mode, plus
            base and E1 unconstrained; the claims are then read off these results (``claims.json``)

Every stage writes an ordinary run directory (checkpoints that ``e1 eval`` loads, metrics
parquet, eval-format results); rerunning the same command resumes finished stages.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from e1.budget import Budget
from e1.engine import Mode, Sampling
from e1.numeric import Number, check_numbers

THINK_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)  # of the base model's median thinking length m
SOLVE = 2  # the answer digit and EOS
TRAIN_LOW = 0.5  # E1's smallest think budget in training, of m


@dataclass(frozen=True)
class Scale:
    sft_steps: int
    sft_batch: int
    grpo_steps: int
    grpo_prompts: int
    test_rows: int
    samples: int


DEMO_NUMBERS = {
    "seed": Number(int, min=0),
    "sft_lr": Number(float, min=0, above=True, max=1),
    "grpo_lr": Number(float, min=0, above=True, max=1),
    **{name: Number(int, min=1, max=1 << 16) for name in ("hidden_size", "layers", "heads")},
    "group_size": Number(int, min=2, max=1 << 16),
}
# GRPO steps: E1 keeps learning the order of work after it is concise (cut rollouts of long problems);
# at 30 --fast steps it had moved from half to 73% backward traces, too few to beat the cosine model
FULL = Scale(sft_steps=1000, sft_batch=64, grpo_steps=150, grpo_prompts=16, test_rows=500, samples=4)
FAST = Scale(sft_steps=700, sft_batch=64, grpo_steps=100, grpo_prompts=16, test_rows=300, samples=2)
TINY = Scale(sft_steps=4, sft_batch=8, grpo_steps=2, grpo_prompts=2, test_rows=8, samples=1)  # tests only


@dataclass(frozen=True)
class DemoConfig:
    out: Path = Path("runs/demo")
    fast: bool = False
    seed: int = 0
    scale: Scale | None = None  # overrides the fast/full choice (tests use TINY)
    hidden_size: int = 128
    layers: int = 3
    heads: int = 4
    sft_lr: float = 3e-3
    grpo_lr: float = 1e-4  # 3e-4 collapsed E1 on seed 0 --fast (training reward 0.88 at step 4, 0.23 at step 30)
    group_size: int = 8

    def __post_init__(self):
        check_numbers(self, DEMO_NUMBERS, {"seed": "--seed"})

    @property
    def sizes(self) -> Scale:
        return self.scale or (FAST if self.fast else FULL)


@dataclass
class DemoResult:
    out: Path
    base: Path
    e1: Path
    median_think: float
    baseline: Path | None = None  # the cosine length-reward GRPO model
    claims: list[dict] = field(default_factory=list)


def run_demo(config: DemoConfig, progress=None) -> DemoResult:
    """Every stage, resuming finished ones; ``config.out`` is held by this process throughout
    (a second `e1 demo` into it is refused, naming this one)."""
    from e1 import __version__
    from e1.store import CONFIG, check_run_dir, check_writable, run_lock, write_json

    out = Path(config.out)
    check_writable(out)
    check_run_dir(out, {}, (), kind="demo")  # each stage checks its own folder when it runs
    with run_lock(out, "e1 demo"):
        if not (out / CONFIG).exists():
            record = {"kind": "demo", "e1_version": __version__, "seed": config.seed, "fast": config.fast}
            write_json(record, out / CONFIG)
        return _stages(config, progress)


def _stages(config: DemoConfig, progress=None) -> DemoResult:
    """The demo's phases in order: data, SFT, the base's unconstrained lengths, E1 and cosine GRPO, the sweep."""
    from e1.grpo import checkpoints, train

    out, sizes = Path(config.out), config.sizes
    data_dir = _prepare_data(config, out / "data")
    init = _initial_model(out / "models" / "init", config)
    base = _train_once(_sft_config(config, init, data_dir), train, checkpoints, progress)

    sampling = Sampling(temperature=1.0, top_p=1.0, seed=config.seed, max_tokens=256)
    base_free = _unconstrained(base, out / "eval" / "base-none", data_dir, sizes, sampling, progress)
    median = statistics.median(base_free["think_tokens"]) if len(base_free) else 1.0
    think = training_budget(median)

    grpo = _grpo_config(config, base, data_dir, median)
    e1_model = _train_once(grpo, train, checkpoints, progress)
    cosine = replace(grpo, out=out / "cosine", think=2 * think, length_reward="cosine")
    baseline = _train_once(cosine, train, checkpoints, progress)
    _unconstrained(e1_model, out / "eval" / "e1-none", data_dir, sizes, sampling, progress)

    _sweep_and_plot(config, data_dir, sampling, median, (base, e1_model, baseline), progress)
    result = DemoResult(out=out, base=base, e1=e1_model, median_think=median, baseline=baseline)
    from e1.demo.claims import check_claims

    result.claims = check_claims(out, base, e1_model, median, baseline=baseline)
    return result


def _prepare_data(config: DemoConfig, data_dir: Path) -> Path:
    """The digits test set and the training problems, prepared once under ``data_dir``."""
    from e1.data import prepare_benchmark, prepared_path

    sizes = config.sizes
    for name, rows in (("digits", sizes.test_rows), ("digits-train", max(sizes.sft_steps * sizes.sft_batch, 64))):
        if not prepared_path(name, data_dir).exists():
            prepare_benchmark(name, data_dir, options={"seed": str(config.seed), "rows": str(rows)})
    return data_dir


def _sft_config(config: DemoConfig, init: Path, data_dir: Path):
    """SFT of the initial model on the training problems' worked solutions: the base model."""
    from e1.grpo import TrainConfig

    sizes = config.sizes
    return TrainConfig(
        model=str(init),
        data="digits-train",
        data_dir=data_dir,
        out=Path(config.out) / "sft",
        algo="sft",
        steps=sizes.sft_steps,
        prompts_per_step=sizes.sft_batch,
        mini_batch_prompts=sizes.sft_batch,
        micro_batch=sizes.sft_batch,
        lr=config.sft_lr,
        weight_decay=0.0,
        lr_schedule="cosine",
        warmup_steps=max(1, sizes.sft_steps // 20),
        save_every=sizes.sft_steps,
        keep_last=1,
        seed=config.seed,
        think=0,
        solve=1,
    )


def _grpo_config(config: DemoConfig, base: Path, data_dir: Path, median: float):
    """E1's GRPO from the base model, its thinking budgets drawn around the base's median length."""
    from e1.grpo import TrainConfig

    sizes = config.sizes
    return TrainConfig(
        model=str(base),
        data="digits-train",
        data_dir=data_dir,
        out=Path(config.out) / "e1",
        think=training_range(median),
        solve=SOLVE,
        steps=sizes.grpo_steps,
        prompts_per_step=sizes.grpo_prompts,
        samples_per_prompt=config.group_size,
        mini_batch_prompts=max(1, sizes.grpo_prompts // 2),
        micro_batch=sizes.grpo_prompts * config.group_size // 2,
        lr=config.grpo_lr,
        weight_decay=0.0,
        temperature=1.0,
        kl_coef=0.0,
        clip_low=0.2,
        clip_high=0.28,
        forced_tokens="mask",
        save_every=sizes.grpo_steps,
        keep_last=1,
        seed=config.seed,
        batch_size=sizes.grpo_prompts * config.group_size,
    )


def _sweep_and_plot(config: DemoConfig, data_dir: Path, sampling, median: float, models: tuple, progress) -> None:
    """The three models (base, E1, cosine baseline) swept over budgets around ``median``; curves.png drawn."""
    from e1.eval import EvalConfig, SweepConfig, run_sweep
    from e1.report import plot_curves
    from e1.store import read_parquet

    out, (base, e1_model, baseline) = Path(config.out), models
    budgets = tuple(sorted({Budget(max(1, round(f * median)), SOLVE) for f in THINK_FRACTIONS}, key=lambda b: b.think))
    grid = EvalConfig(
        model=str(base),
        datasets=("digits",),
        budgets=budgets,
        modes=(Mode("elastic"), Mode("truncate")),
        n=config.sizes.samples,
        sampling=sampling,
        batch_size=512,
        data_dir=data_dir,
    )
    run_sweep(
        SweepConfig(models=(str(base), str(e1_model), str(baseline)), settings=grid, out=out / "curves"),
        progress=progress,
    )
    plot_curves(
        read_parquet(out / "curves" / "curves.parquet"),
        out / "curves" / "curves.png",
        names=model_names(base, e1_model, baseline),
    )


def model_names(base: Path, e1: Path, baseline: Path | None = None) -> dict[str, str]:
    """Display names of the demo's models in tables and plots."""
    names = {str(base): "base (SFT)", str(e1): "E1"}
    return names | ({str(baseline): "cosine-length GRPO"} if baseline else {})


def training_budget(median: float) -> int:
    """E1's largest think budget: t = m, raised where needed so that a concise trace of every problem
    fits. A problem that no trace can finish teaches GRPO to skip steps (10-digit problems at
    t = 28, seed 2 --fast: E1 stopped one step early and got 38% of them right)."""
    from e1.data import DigitSumTask

    return max(1, math.ceil(median), DigitSumTask().longest_concise_trace)


def training_range(median: float) -> str:
    """E1's think budgets, drawn per prompt (``e1 train --think LOW..HIGH``): from m/2 up to
    :func:`training_budget`. The low ones cut long problems all through training, so GRPO keeps
    rewarding the order of work that answers from a cut trace (at t = m alone the pressure ends once
    traces are concise: on seed 1 --fast E1 then drifted to the forward order, 2% backward, and tied
    the cosine model); the high ones keep whole traces trained."""
    top = training_budget(median)
    return f"{min(top, max(1, round(TRAIN_LOW * median)))}..{top}"


def _initial_model(path: Path, config: DemoConfig) -> Path:
    if (path / "config.json").exists():
        return path
    from e1.data import ALPHABET
    from e1.models import build_char_tokenizer, build_tiny_model

    return build_tiny_model(
        path,
        tokenizer=build_char_tokenizer(ALPHABET),
        seed=config.seed,
        hidden_size=config.hidden_size,
        layers=config.layers,
        heads=config.heads,
        kv_heads=config.heads,
        intermediate_size=4 * config.hidden_size,
        max_positions=256,
    )


def _train_once(config, train, checkpoints, progress) -> Path:
    """Train unless the run already finished; resume an interrupted one. Returns the last checkpoint."""
    done = checkpoints(config.out)
    if done and done[-1].name == f"step_{config.steps}":
        return done[-1]
    train(replace(config, resume=bool(done) or (Path(config.out) / "config.json").exists()), progress=progress)
    return checkpoints(config.out)[-1]


def _unconstrained(model: Path, out: Path, data_dir: Path, sizes: Scale, sampling: Sampling, progress):
    from e1.eval import EvalConfig, evaluate

    samples, _ = evaluate(
        EvalConfig(
            model=str(model),
            datasets=("digits",),
            budgets=(Budget(0, 1),),
            modes=(Mode("none"),),
            n=sizes.samples,
            sampling=sampling,
            out=out,
            batch_size=512,
            data_dir=data_dir,
        ),
        progress=progress,
    )
    return samples
