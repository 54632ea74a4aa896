"""The training loop: each GRPO step is its phases, named and timed (seconds land in ``metrics.parquet``).

    from e1.grpo.config import TrainConfig
    from e1.grpo.trainer import train
    run_dir = train(TrainConfig(model="./tiny", data="problems.jsonl", think="1k", solve="1k"))

1. ``rollout`` — ``prompts_per_step`` problems (deterministic shuffled epochs), each sampled
   ``samples_per_prompt`` times in elastic mode at its training budget: one, or drawn per
   problem and capped by a schedule (:mod:`e1.grpo.curriculum`; :mod:`e1.grpo.rollout`).
2. ``reward`` — every completion joined with the canonical ``</think>`` and scored by the same
   :class:`~e1.rewards.scoring.Scorer` as ``e1 eval`` (or by an injected reward callable), then
   shaped by the length reward if one is configured (:mod:`e1.rewards.length`). With
   ``rollout_chunks`` > 1 the rollout comes in chunks of whole prompts and chunk k is scored
   while chunk k + 1 generates: ``reward_s`` is then the scoring the step waited for, and
   ``reward_busy_s`` all of it (the difference is what the overlap saved).
3. ``advantage`` — :func:`~e1.grpo.core.group_advantages` over each prompt's group, and the
   step cut into mini-batches of micro-batches (:mod:`e1.grpo.batches`).
4. ``old_logprob`` / ``ref_logprob`` — log-probs of exactly the rollout token ids under the policy
   and the frozen initial model; the reference is not loaded at all when ``kl_coef == 0``, and
   under ZeRO-3 it is partitioned over the ranks like the policy (``ref_offload``: in CPU memory). With
   one PPO epoch the first mini-batch meets the unchanged policy, so its old log-probs *are* the
   update's own, detached (ratio exactly 1): only later mini-batches need the forward.
5. ``update`` — per mini-batch one optimizer step after gradient accumulation over its
   micro-batches, normalised by the mini-batch's token count; the learning rate follows
   ``lr_schedule`` and ``warmup_steps``; with ``activation_checkpointing`` each layer's activations
   are recomputed in the backward (:func:`~e1.grpo.batches.activation_checkpointing`). How
   gradients are reduced and stepped is the parallelism strategy's business
   (:mod:`e1.grpo.parallel`: one device or DeepSpeed ZeRO).
6. ``sync`` — the rollout engine decodes with the new weights (a no-op when it decodes with the
   policy module itself; vLLM gets a copy of every tensor).

Each step's metrics row goes to ``metrics.parquet`` and to the configured reporters
(TensorBoard, W&B: :mod:`e1.grpo.reporting`).

Simplifications: one PPO epoch per batch, dropout off (the model stays in eval mode). The loss
is :mod:`e1.grpo.core`; this module only moves tensors between phases. ``--algo sft`` runs
:func:`e1.grpo.sft.sft_step` instead, with the same data order, update and checkpoints.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from e1 import __version__
from e1.budget import Budget
from e1.cpu import pace
from e1.engine import DEFAULT_END, Completion, Sampling
from e1.errors import ConfigError
from e1.grpo.batches import (
    Batcher,
    MicroBatch,
    activation_checkpointing,
    checkpointed_layers,
    completion_logits,
    epoch_order,
)
from e1.grpo.checkpoint import (
    TrainerState,
    check_data,
    check_run_dir,
    checkpoints,
    load_checkpoint,
    load_checkpoint_model,
    load_metrics,
    owned,
    save_checkpoint,
    write_metrics,
)
from e1.grpo.config import TrainConfig
from e1.grpo.core import group_advantages, log_probs_and_entropy, loss_normalizer, policy_loss, token_log_probs
from e1.grpo.memory import account, peak
from e1.grpo.parallel import Parallel, launch, parallel_strategy
from e1.grpo.problems import prepare_inputs
from e1.grpo.reporting import Reporters, open_reporters
from e1.grpo.rollout import Rollout, uses_vllm
from e1.grpo.sft import sft_step
from e1.grpo.step_metrics import budget_metrics, rollout_metrics
from e1.report import NullProgress, check_trackers, parse_report_to
from e1.rewards import Reward, Scorer, check_tasks
from e1.store import FINGERPRINTS

PHASES = ("rollout", "reward", "old_logprob", "ref_logprob", "advantage", "update", "sync", "eval", "save")
PEAKED = ("rollout", "old_logprob", "ref_logprob", "update", "sync", "save")  # phases whose GPU peak is recorded
HIDDEN = ("reward_busy",)  # work timed in full though part of it overlaps a phase (scoring behind generation)
Objective = Callable[[MicroBatch, float], "tuple[torch.Tensor, dict]"]  # (micro-batch, normaliser) -> (loss, metrics)


def train(
    config: TrainConfig, progress=None, on_step: Callable[[dict], None] | None = None, reward: Reward | None = None
) -> Path:
    """Train (or resume) as configured; returns the run directory. ``on_step`` gets each metrics row;
    ``reward`` (``reward(completions, answers, **columns)``) replaces the registered rewards."""
    from e1.data import load_includes

    # --include; on --resume, the code config.json recorded must be named again, unchanged (refused otherwise)
    config = replace(config, include=load_includes(config.include, out=config.out))
    check_trackers(parse_report_to(config.report_to))  # a tracker that cannot log fails before any step
    check_run_dir(config)  # a refused run creates nothing; checked again under the lock
    progress = progress or NullProgress()
    with owned(config):
        with progress.stage(f"loading {config.model}" + (" (resuming)" if config.resume else "")):
            trainer = Trainer.create(config, reward)
        with trainer.scorer, progress.task(f"training {config.steps} steps", total=config.steps) as bar:
            try:
                bar.advance(trainer.state.step)
                while trainer.state.step < config.steps:
                    row = trainer.step()
                    bar.advance(1)
                    if on_step:
                        on_step(row)
            finally:
                trainer.reporters.close()
        trainer.strategy.finish()
    return config.out


@dataclass
class Trainer:
    config: TrainConfig
    strategy: Parallel  # one device or DeepSpeed ZeRO: backward, step, reductions, full weights
    rollouts: Rollout  # the rollout engine: decoding, sleep/wake, weight sync
    batcher: Batcher
    scorer: Scorer
    ref_model: torch.nn.Module | None
    tokenizer: object
    problems: object  # canonical DataFrame
    targets: list[list[int]] = field(default_factory=list)  # SFT: each problem's completion ids + EOS
    state: TrainerState = field(default_factory=TrainerState)
    reporters: Reporters = field(default_factory=Reporters)  # TensorBoard / W&B (rank 0), if configured
    metrics: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)  # each phase's CUDA peak allocation this step (bytes)

    completion_logits = staticmethod(completion_logits)  # every training forward goes through here

    @classmethod
    def create(cls, config: TrainConfig, reward: Reward | None = None) -> Trainer:
        """Validate everything cheap first (run dir, data, rewards, tokenizer, context), then load weights."""
        from e1.engine import load_model
        from e1.store import write_json

        latest = check_run_dir(config)
        inputs = prepare_inputs(config)
        fingerprints = check_data(config, inputs.problems)
        if reward is None:
            check_tasks(inputs.problems, config.data)  # an unknown task fails now, not after the first rollout
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        rank, world, device = launch(config)
        uses_vllm(config, world)  # a --tp that does not tile the ranks fails before the weights load
        start = str(latest or config.model)
        model = (
            load_checkpoint_model(latest, config.engine.dtype, device)
            if latest
            else load_model(start, config.engine.dtype, device)
        )
        if config.activation_checkpointing and not checkpointed_layers(model):
            raise ConfigError(
                f"{config.model}: transformers cannot checkpoint this model's layers",
                hint="drop --activation-checkpointing (it needs GradientCheckpointingLayer decoder layers)",
            )
        strategy = parallel_strategy(config, model, rank, world)
        ref_model = (
            strategy.reference(lambda where: load_model(config.model, config.engine.dtype, where))
            if config.kl_coef > 0
            else None
        )  # held as the policy is: partitioned under ZeRO-3
        rollouts = Rollout.create(config, strategy, inputs, start, device)
        if rank == 0:
            write_json(
                {
                    **config.to_json(),
                    "kind": "train",
                    "e1_version": __version__,
                    "resumed_from": latest and str(latest),
                    "world_size": world,
                    FINGERPRINTS: fingerprints,
                },
                config.out / "config.json",
            )
        batcher = Batcher(
            inputs.prompt_ids, inputs.markers.pad_id, config, world, next(model.parameters()).device, inputs.instruct
        )
        scorer = config.scoring.scorer(reward)
        trainer = cls(
            config, strategy, rollouts, batcher, scorer, ref_model, inputs.tokenizer, inputs.problems, inputs.targets
        )
        if latest is not None:
            trainer.state = load_checkpoint(latest, strategy)
            trainer.metrics = load_metrics(config.out, trainer.state.step)
        rollouts.sync(strategy)  # the policy's exact tensors, before the first rollout
        trainer.reporters = open_reporters(config, rank)
        return trainer

    @property
    def model(self) -> torch.nn.Module:
        """What training forwards go through (the DeepSpeed engine under ZeRO)."""
        return self.strategy.model

    @property
    def policy(self) -> torch.nn.Module:
        """The module being trained (partitioned under ZeRO-3)."""
        return self.strategy.policy

    @property
    def engine(self):
        return self.rollouts.engine

    @property
    def prompt_ids(self) -> list[list[int]]:
        return self.batcher.prompt_ids

    # ---- one step -------------------------------------------------------------------------

    def step(self) -> dict:
        """One training step of the configured algorithm, then validation, checkpoint and metrics."""
        self.timings, self.peaks = {}, {}
        started = time.perf_counter()
        step = self.state.step + 1
        for group in self.strategy.optimizer.param_groups:
            group["lr"] = self.config.lr_at(step)
        row = {"step": step, **ALGORITHMS[self.config.algo](self), **self.memory()}
        self.state.step = step
        return self.finish_step(row, started)

    def grpo_step(self) -> dict:
        """rollout -> reward -> advantage -> old/ref log-probs -> update -> sync; the step's metrics."""
        config, step = self.config, self.state.step + 1
        problems = self.next_problems(config.prompts_per_step)  # problem rows of this step
        indices = problems[self.strategy.rank :: self.strategy.world]  # this rank's whole groups
        completions, scores = self.rollout_and_score(indices, step, problems)  # scores: [N]  the task's reward
        with self.phase("reward_busy"), self.phase("reward"):
            rewards = self.shape(scores, indices, completions, step)  # [N]  what GRPO trains on
        with self.phase("advantage"):
            advantages = group_advantages(rewards, config.samples_per_prompt)  # [N]
            batches = self.plan(indices, completions, advantages, step)
        with self.phase("old_logprob"):
            self.fill_log_probs(batches[1:], self.model, "old_log_probs")  # the first mini-batch needs none
        with self.phase("ref_logprob"):
            if self.ref_model is not None:
                self.fill_log_probs(batches, self.ref_model, "ref_log_probs")
        with self.phase("update"):
            update = self.update(batches)
        with self.phase("sync"):
            self.rollouts.sync(self.strategy)
        scores, rewards = (torch.tensor(self.strategy.gather(values.tolist())) for values in (scores, rewards))
        budgets = [config.budget_for(step, problem).think for problem in problems]  # every rank's problems
        return {
            **rollout_metrics(scores, rewards, self.strategy.gather(completions)),
            **budget_metrics(budgets),
            **update,
        }  # over all ranks: [N x W]

    def memory(self) -> dict:
        """This rank's bytes of each kind after the step (:mod:`e1.grpo.memory`) and each phase's
        CUDA peak (``rollout_peak_bytes``, ...; NaN without CUDA; the save's is filled in by :meth:`record`)."""
        usage = account(self.strategy, self.ref_model, getattr(self.engine, "model", None))
        return usage.columns() | {f"{name}_peak_bytes": self.peaks.get(name, math.nan) for name in PEAKED}

    def finish_step(self, row: dict, started: float) -> dict:
        """Validation, checkpoint and the metrics row, the same for every algorithm."""
        config, step = self.config, self.state.step
        row["lr"] = self.strategy.optimizer.param_groups[0]["lr"]
        with self.phase("eval"):
            validating = self.due(config.eval_every) and config.eval_data and self.strategy.rank == 0
            row["eval_accuracy"] = self.validate(step) if validating else math.nan
        self.metrics.append(row)
        if kind := config.save_kind(step):
            # the step's metrics row lands before its checkpoint: a kill between the two resumes from
            # the checkpoint before and redoes the step, a kill after finds both (save_s NaN until known)
            self.record(row, started, save_s=math.nan)
            with self.phase("save"):
                save_checkpoint(config, self.state, self.strategy, self.tokenizer, resumable=kind == "resume")
        self.record(row, started)
        if self.strategy.rank == 0:
            self.reporters.log(row, step)
        return row

    def record(self, row: dict, started: float, **known: float) -> None:
        """Complete ``row`` (the last of ``self.metrics``) with the phase timings; rank 0 writes the file."""
        row |= {f"{name}_s": self.timings.get(name, 0.0) for name in (*PHASES, *HIDDEN)} | known
        row["save_peak_bytes"] = self.peaks.get("save", math.nan)
        row["step_s"] = time.perf_counter() - started
        if self.strategy.rank == 0:
            write_metrics(self.config.out, self.metrics)

    @contextmanager
    def phase(self, name: str):
        started = time.perf_counter()
        with peak(self.peaks, name) if name in PEAKED else nullcontext():
            yield
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - started

    def due(self, every: int) -> bool:
        return self.state.step % every == 0

    def next_problems(self, count: int) -> list[int]:
        """The next ``count`` problems of deterministic shuffled epochs (cursor in ``self.state``)."""
        taken = []
        while len(taken) < count:
            order = epoch_order(len(self.problems), self.config.seed, self.state.epoch)
            chunk = order[self.state.position : self.state.position + count - len(taken)]
            taken += chunk
            self.state.position += len(chunk)
            if self.state.position >= len(order):
                self.state.epoch, self.state.position = self.state.epoch + 1, 0
        return taken

    # ---- the phases -----------------------------------------------------------------------

    def rollout_and_score(
        self, indices: list[int], step: int, problems: list[int]
    ) -> tuple[list[Completion], torch.Tensor]:
        """``samples_per_prompt`` completions of each of ``indices`` (``problems``: the step's, which
        every rank cuts alike) and their :meth:`score`, in ``rollout_chunks`` chunks: chunk k is
        scored while chunk k + 1 generates. The ``rollout`` phase is the section's wall time less the scoring
        it waited for (the ``reward`` phase's share); ``reward_busy`` counts all scoring."""
        began = time.perf_counter()
        with peak(self.peaks, "rollout"):
            scored = self.rollouts.generate_scored(indices, step, problems, lambda drawn: self.score(indices, drawn))
        self.timings |= {
            "rollout": time.perf_counter() - began - scored.waited_s,
            "reward": scored.waited_s,
            "reward_busy": scored.score_s,
        }
        return scored.completions, torch.cat(scored.scores)  # [N]

    def score(self, indices: list[int], completions: list[Completion]) -> torch.Tensor:
        """Each completion's reward, scored exactly as ``e1 eval`` scores it: joined with the
        canonical ``</think>`` (whatever the model's markers), by the same Scorer."""
        rows = [indices[c.prompt_index] for c in completions]
        tasks = self.problems["task"].take(rows).tolist()
        answers = [str(answer) for answer in self.problems["answer"].take(rows)]
        scored = self.scorer.score(tasks, [c.text(DEFAULT_END) for c in completions], answers)
        return torch.tensor([s.reward for s in scored])  # [N]

    def shape(self, scores: torch.Tensor, indices: list[int], completions: list[Completion], step: int) -> torch.Tensor:
        """The task's rewards with the configured length reward (:mod:`e1.rewards.length`); as
        they are without one. Each completion's budget is its prompt's ``t + s`` at ``step``."""
        if self.config.rollout_cut == "zero":  # ThinkPrune: a rollout the budget cut off earns nothing
            scores = scores * torch.tensor([c.finish_reason != "length" for c in completions], dtype=scores.dtype)
        shaping = self.config.length_shaping
        if shaping is None:
            return scores
        budgets = [self.config.budget_for(step, indices[c.prompt_index]).total for c in completions]
        return torch.tensor(
            shaping.shape(
                scores.tolist(),
                [c.total_tokens for c in completions],
                budgets,
                [c.finish_reason == "stop" for c in completions],
                groups=[c.prompt_index for c in completions],
            )
        )  # [N]

    def plan(
        self, indices: list[int], completions: list[Completion], advantages: torch.Tensor, step: int
    ) -> list[list[MicroBatch]]:
        return self.batcher.plan(indices, completions, advantages, step)

    def fill_log_probs(self, batches: list[list[MicroBatch]], model: torch.nn.Module, name: str) -> None:
        """Set each micro-batch's ``name`` (old_log_probs / ref_log_probs) to ``model``'s, without gradient."""
        with torch.no_grad():
            for mb in (mb for batch in batches for mb in batch):
                setattr(mb, name, token_log_probs(self.completion_logits(model, mb), mb.completion_ids))  # [B, C]

    def update(self, batches: list[list[MicroBatch]], objective: Objective | None = None) -> dict:
        """One optimizer step per mini-batch; returns the step's update metrics, averaged over ranks.
        ``objective`` is the GRPO policy loss unless given (SFT passes its own)."""
        objective, strategy = objective or self.policy_objective, self.strategy
        aggregation = self.config.loss_config().aggregation
        totals: dict[str, float] = {"kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
        tokens = losses = grad_norms = 0.0
        with activation_checkpointing(self.policy, self.config.activation_checkpointing):
            for batch in batches:
                normalizer = strategy.normalizer(sum(loss_normalizer(mb.mask, aggregation) for mb in batch))
                strategy.zero_grad()
                for mb in batch:
                    pace()  # torch's CPU team for the cores other processes leave free (e1.cpu)
                    loss, metrics = objective(mb, normalizer)
                    strategy.backward(loss)
                    count = float(mb.mask.sum())
                    tokens += count
                    losses += float(loss.detach())
                    for key in totals:
                        totals[key] += metrics.get(key, math.nan) * count
                grad_norms += strategy.step()
        strategy.zero_grad()
        losses, tokens, *sums = strategy.sum([losses, tokens, *totals.values()])  # each rank's share of the loss
        return {
            "loss": losses / strategy.world / len(batches),
            "grad_norm": grad_norms / len(batches),
            **{key: value / max(tokens, 1.0) for key, value in zip(totals, sums)},
        }

    def policy_objective(self, mb: MicroBatch, normalizer: float):
        """The GRPO clipped surrogate (+ KL, entropy) of one micro-batch (:func:`e1.grpo.core.policy_loss`)."""
        loss_config = self.config.loss_config()
        logits = self.completion_logits(self.model, mb)  # [B, C, V]
        log_probs, entropy = log_probs_and_entropy(
            logits, mb.completion_ids, entropy_grad=loss_config.entropy_coef > 0
        )  # [B, C]
        old = log_probs.detach() if mb.old_log_probs is None else mb.old_log_probs  # [B, C]
        return policy_loss(log_probs, old, mb.advantages, mb.mask, loss_config, mb.ref_log_probs, entropy, normalizer)

    def validate(self, step: int) -> float:
        """Evaluate the current policy on ``eval_data`` at the training budget; returns accuracy."""
        from e1.engine import EngineSpec
        from e1.eval import EvalConfig, evaluate

        config = self.config
        eval_config = EvalConfig(
            model=f"{config.model}@step_{step}",
            datasets=(config.eval_data,),
            n=1,
            budgets=(Budget(config.think_budgets.cap(step), config.budget.solve),),  # the step's largest
            sampling=Sampling(temperature=config.temperature, top_p=config.top_p, seed=config.seed),
            out=config.out / "eval" / f"step_{step}",
            batch_size=config.batch_size,
            limit=config.eval_limit,
            engine=EngineSpec(think_start=config.engine.think_start, think_end=config.engine.think_end),
            data_dir=config.data_dir,
            prompt=config.prompt,
        )
        with self.rollouts.decoding(sleep_level=1):  # keeps the synced weights for the next rollout
            _, summary = evaluate(eval_config, engine=self.engine)
        return float(summary["accuracy"].mean()) if len(summary) else math.nan


ALGORITHMS: dict[str, Callable[[Trainer], dict]] = {"grpo": Trainer.grpo_step, "sft": sft_step}


__all__ = ["PHASES", "Trainer", "TrainerState", "checkpoints", "train"]
