"""GRPO training-step speed: e1's trainer against TRL's ``GRPOTrainer``, side by side in one run.

    python benchmarks/grpo_vs_trl.py [--prompts 8 --group 4 --tokens 64 --steps 3 --hidden 128 --layers 4]
                                     [--trl-rollouts both|trl|e1]

Goal: e1 <= 0.5x TRL's seconds per training step. Needs ``pip install e1[trl]`` (tested with trl 1.16.0).
Runs offline on the CPU.

TRL is measured twice (``--trl-rollouts both``): with its own generation (``trl``: ``max_completion_length``
tokens, no budget) and with e1's budgeted rollouts through its ``rollout_func``
(``e1``: :func:`e1.integrations.trl.budgeted_rollouts` at e1's ``(t, s)``, forced tokens trained as
``e1 train`` does), so the second ratio compares the two trainers at the very same budgets and rollouts.

What is equalised, and how:

- **Model.** One tiny Qwen2 (``build_tiny_model``) saved once; both trainers load that folder, in
  float32. Its tokenizer's EOS is replaced by an added token whose id is past the model's output
  layer (``generation_config.json`` too), so neither side can ever sample EOS and every
  completion runs to its length limit.
- **Prompts.** ``--prompts`` synthetic problems, built once with e1's chat template; TRL gets the
  same text as plain-text prompts (checked to tokenize to the same ids). Each step uses all of
  them on both sides (one epoch per step).
- **Completion length.** TRL's own generation: ``max_completion_length = --tokens``. e1 rolls out in elastic mode
  at budget ``t = --think`` (default 0), ``s = --tokens - 1 - t``: with t = 0 the ``</think>``
  marker is forced first and then exactly s solution tokens follow, so both sides write exactly
  ``--tokens`` tokens per completion (printed and checked every step). A ``--think`` above 0 lets
  the random model close thinking early with a natural ``</think>``, making e1's completions
  slightly shorter; the per-token ratio is then printed too.
- **Batch and update.** group = ``num_generations`` = ``samples_per_prompt``; one optimizer step per
  training step: e1 ``mini_batch_prompts = prompts_per_step``; TRL ``steps_per_generation =
  gradient_accumulation_steps`` = completions / ``--micro-batch``; both do forward/backward in
  micro-batches of ``--micro-batch`` sequences and decode all completions in one batch.
- **Loss.** Token-mean clipped surrogate (e1 ``token-mean``, TRL ``dapo``), clip 0.2, no KL and no
  reference model (e1 ``kl_coef=0``, TRL ``beta=0``), one PPO epoch (TRL ``num_iterations=1``),
  AdamW lr 1e-6, weight decay 0.01, grad clip 1.0, constant lr, temperature 1, top-p 1.
- **Reward.** A trivial one on both sides: 1.0 if the completion contains "a".
- **No activation checkpointing** (TRL's default turns it on; e1 has none).
- **Nothing saved.** e1 through ``Trainer.create`` + ``step()`` (no checkpoint: ``save_every`` and
  ``steps`` are out of reach); TRL ``save_strategy="no"``, ``report_to="none"``.

Timing: TRL drives the loop; after each TRL optimizer step a callback runs one e1 step, so the two
alternate (TRL, e1, TRL, e1, ...). A TRL step is timed from the end of the previous e1 step to
its ``on_step_end`` (so it includes the dataloader and logging), an e1 step around
``trainer.step()``. The first step of each is warm-up; the next ``--steps`` are reported (best
and median) with e1's per-phase seconds and TRL's generate/score/update split. On a machine
whose cores other work shares, ``--threads 1`` gives much steadier figures (torch's threads spin
when a core is taken).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

TRL_PIN = "e1[trl]"  # trl 1.16
GOAL = 0.5  # e1 / TRL seconds per training step
NEVER = "<|never|>"  # the EOS of the benchmark's tokenizer: an id the model cannot emit


def contains_a(text: str) -> float:
    """The benchmark's reward: length-independent and trivial, so it costs nothing on either side."""
    return 1.0 if "a" in text else 0.0


def unreachable_eos(path: Path) -> int:
    """Make ``path``'s EOS a new token past the model's vocabulary; returns its id."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_special_tokens({"eos_token": NEVER})
    model_config = AutoConfig.from_pretrained(path)
    never = tokenizer.convert_tokens_to_ids(NEVER)
    assert never >= model_config.vocab_size, "the new EOS must lie past the output layer"
    tokenizer.save_pretrained(path)
    model_config.eos_token_id = never
    model_config.save_pretrained(path)
    generation = GenerationConfig.from_pretrained(path)
    generation.eos_token_id = never
    generation.save_pretrained(path)
    return never


def write_problems(path: Path, count: int) -> Path:
    with path.open("w") as f:
        for i in range(count):
            f.write(json.dumps({"problem": f"Problem {i}: what is {i} * {i + 7}?", "answer": str(i * (i + 7))}) + "\n")
    return path


@dataclass
class StepTime:
    """One timed training step of one trainer."""

    seconds: float
    phases: dict[str, float]  # e1: its metrics row's ``*_s``; TRL: generate and rollout+score
    tokens: int  # completion tokens generated in the step


def e1_trainer(args, model: Path, problems: Path, out: Path):
    """e1's ``Trainer`` for the benchmark, counting the tokens each rollout generates."""
    from e1.grpo.config_file import build_config
    from e1.grpo.trainer import Trainer

    class CountingTrainer(Trainer):
        generated_tokens = 0

        def rollout_and_score(self, *args, **kwargs):
            completions, scores = super().rollout_and_score(*args, **kwargs)
            self.generated_tokens = sum(len(c.token_ids) for c in completions)
            return completions, scores

    never_reached = 10**9  # no checkpoint, no validation, no final save
    config = build_config(
        model=str(model),
        data=str(problems),
        think=args.think,
        solve=args.tokens - 1 - args.think,
        out=out,
        steps=never_reached,
        prompts_per_step=args.prompts,
        samples_per_prompt=args.group,
        mini_batch_prompts=args.prompts,
        micro_batch=args.micro_batch,
        lr=1e-6,
        weight_decay=0.01,
        grad_clip=1.0,
        temperature=1.0,
        top_p=1.0,
        kl_coef=0.0,
        clip_low=0.2,
        clip_high=0.2,
        save_every=never_reached,
        eval_every=never_reached,
        batch_size=args.prompts * args.group,
        dtype="float32",
        device="cpu",
        seed=0,
    )
    return CountingTrainer.create(
        config, reward=lambda completions, answers, **columns: list(map(contains_a, completions))
    )


def trl_trainer(args, model: Path, prompts: list[str], out: Path, rollouts=None):
    """TRL's ``GRPOTrainer`` on the same model and prompts, timing its generate and score phases;
    ``rollouts``: e1's budgeted ``rollout_func`` (None: TRL's own generation)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    completions = args.prompts * args.group
    length = args.tokens if rollouts is None else rollouts.max_tokens(AutoTokenizer.from_pretrained(model))

    class TimedGRPOTrainer(GRPOTrainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.timings: dict[str, float] = {}
            self.generated_tokens = 0

        def timed(self, name: str, method, *a, **k):
            started = time.perf_counter()
            result = method(*a, **k)
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - started
            return result

        def _generate_single_turn(self, *a, **k):
            return self.timed("generate", super()._generate_single_turn, *a, **k)

        def _generate_and_score_completions(self, *a, **k):
            return self.timed("rollout+score", super()._generate_and_score_completions, *a, **k)

    def reward(completions, completion_ids, **_):
        trainer.generated_tokens = sum(map(len, completion_ids))
        return [contains_a(c) for c in completions]

    config = GRPOConfig(
        output_dir=str(out),
        max_steps=1 + args.steps,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=completions // args.micro_batch,
        steps_per_generation=completions // args.micro_batch,
        num_generations=args.group,
        max_completion_length=length,
        num_iterations=1,
        learning_rate=1e-6,
        weight_decay=0.01,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        use_vllm=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
        model_init_kwargs={"dtype": torch.float32},
        dataloader_num_workers=0,
        gradient_checkpointing=False,  # TRL's default is True; e1 does not recompute activations
    )
    dataset = Dataset.from_dict({"prompt": prompts})

    def timed_rollouts(prompts, trainer):  # TRL hands its rollout_func the trainer
        return trainer.timed("generate", rollouts, prompts, trainer)

    trainer = TimedGRPOTrainer(
        model=str(model),
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        rollout_func=None if rollouts is None else timed_rollouts,
    )
    trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict
    return trainer


def run_interleaved(e1, trl) -> tuple[list[StepTime], list[StepTime]]:
    """``trl.train()``; after each TRL optimizer step a callback times it, then runs and times one e1 step."""
    from transformers import TrainerCallback

    e1_steps: list[StepTime] = []
    trl_steps: list[StepTime] = []

    class Interleave(TrainerCallback):
        mark = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self.mark = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            trl_steps.append(StepTime(time.perf_counter() - self.mark, dict(trl.timings), trl.generated_tokens))
            trl.timings.clear()
            started = time.perf_counter()
            row = e1.step()
            e1_steps.append(StepTime(time.perf_counter() - started, row, e1.generated_tokens))
            self.mark = time.perf_counter()

    trl.add_callback(Interleave())
    trl.train()
    return e1_steps, trl_steps


def summary(seconds: list[float]) -> str:
    return f"best {min(seconds):.3f}s  median {statistics.median(seconds):.3f}s"


def report(args, e1_steps: list[StepTime], trl_steps: list[StepTime], parameters: int, label: str) -> None:
    import torch
    import trl

    from e1 import __version__
    from e1.grpo.trainer import PHASES

    e1_runs, trl_runs = e1_steps[1:], trl_steps[1:]  # the first of each is warm-up
    e1_s, trl_s = [r.seconds for r in e1_runs], [r.seconds for r in trl_runs]
    print(
        f"e1 {__version__} vs trl {trl.__version__}; model: hidden {args.hidden}, layers {args.layers}, "
        f"{parameters / 1e6:.2f}M params; {args.prompts} prompts x group {args.group} = "
        f"{args.prompts * args.group} completions of {args.tokens} tokens; micro-batch {args.micro_batch}; "
        f"1 optimizer step per training step; torch threads {torch.get_num_threads()}; "
        f"{len(e1_s)} timed steps each after 1 warm-up, interleaved\n== {label} =="
    )
    for i, (e, t) in enumerate(zip(e1_steps, trl_steps)):
        tag = "warm-up" if i == 0 else f"step {i}"
        print(f"  {tag:8} e1 {e.seconds:7.3f}s ({e.tokens} tokens)   TRL {t.seconds:7.3f}s ({t.tokens} tokens)")
    e1_tokens, trl_tokens = {r.tokens for r in e1_runs}, {r.tokens for r in trl_runs}
    same = e1_tokens == trl_tokens and len(e1_tokens) == 1
    print(
        f"generated completion tokens per step: e1 {sorted(e1_tokens)}, TRL {sorted(trl_tokens)} "
        f"-> {'equal' if same else 'NOT equal'}"
    )
    print(f"e1 (Trainer.step):      {summary(e1_s)}")
    print(f"TRL (GRPOTrainer step): {summary(trl_s)}")
    ratio = min(e1_s) / min(trl_s)
    print(
        f"ratio e1/TRL (best): {ratio:.3f}x  median: {statistics.median(e1_s) / statistics.median(trl_s):.3f}x  "
        f"(goal <= {GOAL}x) -> {'met' if ratio <= GOAL else 'NOT met'}"
    )
    if not same:
        per_token = (min(e1_s) / statistics.mean(e1_tokens)) / (min(trl_s) / statistics.mean(trl_tokens))
        print(f"ratio e1/TRL per generated token (best): {per_token:.3f}x")
    best = min(e1_runs, key=lambda r: r.seconds).phases
    phases = "  ".join(f"{name} {best[f'{name}_s']:.3f}" for name in PHASES if best[f"{name}_s"] >= 0.0005)
    other = best["step_s"] - sum(best[f"{name}_s"] for name in PHASES)
    print(f"e1 phases of its best step (s): {phases}  other {other:.3f}")
    best = min(trl_runs, key=lambda r: r.seconds)
    generate, scored = best.phases.get("generate", 0.0), best.phases.get("rollout+score", 0.0)
    print(
        f"TRL phases of its best step (s): generate {generate:.3f}  score+advantage {scored - generate:.3f}  "
        f"update+rest {best.seconds - scored:.3f}"
    )


def profile_e1(e1, steps: int, top: int = 25) -> None:
    """``steps`` more e1 steps under cProfile: where its step's time goes, by own time (tottime)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        e1.step()
    profiler.disable()
    print(f"e1's step under cProfile ({steps} steps), top {top} by own time:")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (GRPO group size)")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per sample")
    parser.add_argument("--think", type=int, default=0, help="e1's thinking budget t (s = tokens - 1 - t)")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per trainer (after 1 warm-up)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--profile", type=int, default=0, help="then profile this many e1 steps (cProfile)")
    parser.add_argument(
        "--trl-rollouts",
        choices=("both", "trl", "e1"),
        default="both",
        help="TRL's own generation, e1's budgeted rollout_func, or both (each interleaved with e1)",
    )
    args = parser.parse_args()
    completions = args.prompts * args.group
    if args.group < 2 or completions % args.micro_batch:
        parser.error(f"--group must be >= 2 and --micro-batch must divide prompts x group ({completions})")
    if not 0 <= args.think <= args.tokens - 2:
        parser.error("--think must be in [0, tokens - 2] (one marker token and one solution token at least)")

    os.environ.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        TRL_EXPERIMENTAL_SILENCE="1",  # rollout_func is marked experimental in trl 1.16
    )
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit(f"this benchmark compares against TRL: pip install {TRL_PIN}")
    import torch

    from e1.data.prompts import build_prompt
    from e1.integrations import budgeted_rollouts
    from e1.models.tiny import build_tiny_model
    from e1.report.ui import quiet_libraries

    quiet_libraries()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' gradient_checkpointing renames
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_model(
            tmp / "model",
            hidden_size=args.hidden,
            layers=args.layers,
            heads=max(args.hidden // 32, 1),
            intermediate_size=4 * args.hidden,
        )
        unreachable_eos(model)
        problems = write_problems(tmp / "problems.jsonl", args.prompts)
        e1 = e1_trainer(args, model, problems, tmp / "e1")
        prompts = [build_prompt(e1.tokenizer, p, t) for p, t in zip(e1.problems["problem"], e1.problems["task"])]
        assert [e1.tokenizer(text=p)["input_ids"] for p in prompts] == e1.prompt_ids, "prompts tokenize differently"
        parameters = sum(p.numel() for p in e1.model.parameters())
        for kind in ("trl", "e1") if args.trl_rollouts == "both" else (args.trl_rollouts,):
            rollouts = None if kind == "trl" else budgeted_rollouts(args.think, args.tokens - 1 - args.think)
            label = "TRL, its own generation" if kind == "trl" else "TRL, e1's budgeted rollout_func (same t, s)"
            trl = trl_trainer(args, model, prompts, tmp / f"trl-{kind}", rollouts)
            report(args, *run_interleaved(e1, trl), parameters, label)
        if args.profile:
            profile_e1(e1, args.profile)


if __name__ == "__main__":
    main()
