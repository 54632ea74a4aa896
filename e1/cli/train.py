"""`e1 train`: GRPO with budget-constrained (elastic) rollouts, on one device or under DeepSpeed ZeRO.

Every option defaults to the config file's value (``--config``), else to the paper's E1-Math
recipe in :class:`e1.grpo.config.TrainConfig`. No torch at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from e1.cli.completion import (complete_algos, complete_dataset, complete_sandboxes,
                               complete_train_backends, complete_train_dtypes)
from e1.cli.help import command_app
from e1.cli.options import BUDGETS, CODE, DATA, MODEL, SAMPLING, SCALE, IncludeOpt, nonempty_path, with_options
from e1.grpo import DEFAULTS

RUN = "Training run"
GRPO = "GRPO"
OPTIMIZER = "Optimizer"


def _opt(flag: str, help: str, panel: str, *, shown: str | None = None, **extra):
    """A train option in ``panel``; ``shown`` describes a default that is no value (None: the config's own)."""
    return typer.Option(flag, help=help, rich_help_panel=panel, show_default=shown if shown else True, **extra)


@dataclass(frozen=True)
class TrainOptions:
    """Every option of `e1 train` but --config. Each defaults to the paper's E1-Math recipe
    (:data:`e1.grpo.DEFAULTS`); an option not given on the command line leaves the config file's value."""

    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Initial policy: model folder or hub id.", show_default=False, rich_help_panel=MODEL)] = None
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Training problems: registry name or file with problem and answer fields.", show_default=False, autocompletion=complete_dataset, rich_help_panel=DATA)] = None
    think: Annotated[str, _opt("--think", "Rollout thinking budget t: 512, 1k, 1.5k; a set 512,1k,2k or a range 512..2k draws one per prompt and step (budget curriculum).", BUDGETS)] = DEFAULTS["think"]
    solve: Annotated[str, _opt("--solve", "Rollout solution budget s.", BUDGETS)] = DEFAULTS["solve"]
    out: Annotated[Path, _opt("--out", "Run directory (config.json, metrics.parquet, checkpoints/, eval/).", RUN, parser=nonempty_path("--out"))] = DEFAULTS["out"]
    steps: Annotated[int, _opt("--steps", "GRPO steps.", RUN)] = DEFAULTS["steps"]
    prompts_per_step: Annotated[int, _opt("--prompts-per-step", "Problems per step.", GRPO)] = DEFAULTS["prompts_per_step"]
    samples_per_prompt: Annotated[int, _opt("--samples-per-prompt", "Completions per problem (group size).", GRPO)] = DEFAULTS["samples_per_prompt"]
    mini_batch_prompts: Annotated[int, _opt("--mini-batch-prompts", "Problems per optimizer step.", OPTIMIZER)] = DEFAULTS["mini_batch_prompts"]
    micro_batch: Annotated[int, _opt("--micro-batch", "Sequences per forward/backward.", OPTIMIZER)] = DEFAULTS["micro_batch"]
    activation_checkpointing: Annotated[bool, typer.Option("--activation-checkpointing", help="Keep only each decoder layer's input for the backward and recompute the rest there: far less memory in the update (at the 1.5B shape most of it), about a third more update compute.", rich_help_panel=OPTIMIZER)] = DEFAULTS["activation_checkpointing"]
    lr: Annotated[float, _opt("--lr", "AdamW learning rate.", OPTIMIZER)] = DEFAULTS["lr"]
    weight_decay: Annotated[float, _opt("--weight-decay", "AdamW weight decay.", OPTIMIZER)] = DEFAULTS["weight_decay"]
    grad_clip: Annotated[float, _opt("--grad-clip", "Max gradient norm.", OPTIMIZER)] = DEFAULTS["grad_clip"]
    temperature: Annotated[float, _opt("--temperature", "Rollout temperature.", SAMPLING)] = DEFAULTS["temperature"]
    top_p: Annotated[float, _opt("--top-p", "Rollout nucleus threshold (1 = off).", SAMPLING)] = DEFAULTS["top_p"]
    kl_coef: Annotated[float, _opt("--kl-coef", "k3 KL weight; 0 loads no reference model.", GRPO)] = DEFAULTS["kl_coef"]
    clip_low: Annotated[float, _opt("--clip-low", "PPO clip below 1.", GRPO)] = DEFAULTS["clip_low"]
    clip_high: Annotated[float, _opt("--clip-high", "PPO clip above 1.", GRPO)] = DEFAULTS["clip_high"]
    entropy_coef: Annotated[float, _opt("--entropy-coef", "Entropy bonus weight.", GRPO)] = DEFAULTS["entropy_coef"]
    forced_tokens: Annotated[str, _opt("--forced-tokens", "Forced end markers: train | mask.", BUDGETS)] = DEFAULTS["forced_tokens"]
    save_every: Annotated[int, _opt("--save-every", "Checkpoint every N steps.", RUN)] = DEFAULTS["save_every"]
    resume_every: Annotated[Optional[int], _opt("--resume-every", "Also save the optimizer state (what --resume needs) every N steps and at the end; other saves write the weights alone.", RUN, shown="every save")] = None
    keep_last: Annotated[Optional[int], _opt("--keep-last", "Keep only the newest K checkpoints.", RUN, shown="all")] = None
    eval_every: Annotated[int, _opt("--eval-every", "Validate every N steps.", RUN)] = DEFAULTS["eval_every"]
    eval_data: Annotated[Optional[str], _opt("--eval-data", "Validation problems.", DATA, shown="none", autocompletion=complete_dataset)] = None
    eval_limit: Annotated[Optional[int], _opt("--eval-limit", "Only the first N validation problems.", DATA, shown="all")] = None
    seed: Annotated[int, _opt("--seed", "Seed of data order, rollouts and mini-batches.", SAMPLING)] = DEFAULTS["seed"]
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Continue from the newest checkpoint in --out.", rich_help_panel=RUN)] = DEFAULTS["resume"]
    batch_size: Annotated[int, _opt("--batch-size", "Sequences decoded together.", SCALE)] = DEFAULTS["batch_size"]
    rollout_chunks: Annotated[int, _opt("--rollout-chunks", "Generate each step's rollouts in N chunks of whole prompts and score chunk k while chunk k+1 generates. Pays when scoring takes time (code tasks whose sandboxed tests run for seconds), at the cost of smaller generate batches; 1 = one generate call, then scoring.", SCALE)] = DEFAULTS["rollout_chunks"]
    dtype: Annotated[str, _opt("--dtype", "float32 | bfloat16 | float16.", MODEL, autocompletion=complete_train_dtypes)] = DEFAULTS["dtype"]
    device: Annotated[str, _opt("--device", "auto | cpu | cuda | cuda:N.", MODEL)] = DEFAULTS["device"]
    think_start: Annotated[Optional[str], _opt("--think-start", "Start-of-thinking marker.", BUDGETS, shown="<think>")] = None
    think_end: Annotated[Optional[str], _opt("--think-end", "End-of-thinking marker.", BUDGETS, shown="</think>")] = None
    data_dir: Annotated[Optional[Path], _opt("--data-dir", "Prepared datasets.", DATA, shown="$E1_DATA_DIR or ~/.cache/e1/data", parser=nonempty_path("--data-dir"))] = None
    algo: Annotated[str, _opt("--algo", "grpo (budget-constrained rollouts) | sft (learn the data's completion column).", GRPO, autocompletion=complete_algos)] = DEFAULTS["algo"]
    lr_schedule: Annotated[str, _opt("--lr-schedule", "constant | cosine.", OPTIMIZER)] = DEFAULTS["lr_schedule"]
    warmup_steps: Annotated[int, _opt("--warmup-steps", "Linear learning-rate warm-up steps.", OPTIMIZER)] = DEFAULTS["warmup_steps"]
    backend: Annotated[str, _opt("--backend", "Rollout engine: hf | vllm (in-process, weights copied in after every step) | auto (vLLM if installed and a GPU is present); not the API backends.", MODEL, autocompletion=complete_train_backends)] = DEFAULTS["backend"]
    tp: Annotated[int, _opt("--tp", "vLLM tensor-parallel GPUs per engine (under DeepSpeed: ranks per engine).", SCALE)] = DEFAULTS["tp"]
    gpu_memory_utilization: Annotated[float, _opt("--gpu-memory-utilization", "vLLM's share of the GPU while it decodes, used only with --kv-cache-gib 0 (it sleeps during updates; training state stays resident).", SCALE)] = DEFAULTS["gpu_memory_utilization"]
    kv_cache_gib: Annotated[Optional[float], _opt("--kv-cache-gib", "vLLM's KV cache per GPU in GiB (0: from --gpu-memory-utilization).", SCALE, shown="what one step's rollouts need")] = None
    max_model_len: Annotated[Optional[int], _opt("--max-model-len", "vLLM context length; lower shrinks its KV cache.", SCALE, shown="the model's")] = None
    workers: Annotated[int, _opt("--workers", "Code rewards: programs run in parallel in the sandbox.", CODE)] = DEFAULTS["workers"]
    test_time_limit_s: Annotated[float, _opt("--test-time-limit", "Code rewards: seconds per test.", CODE)] = DEFAULTS["test_time_limit_s"]
    max_tests: Annotated[Optional[int], _opt("--max-tests", "Code rewards: run only each problem's N largest tests.", CODE, shown="all")] = None
    sandbox: Annotated[Optional[str], _opt("--sandbox", "Code rewards' sandbox: auto | unshare | bwrap | none (see e1 eval --help).", CODE, shown="auto", envvar="E1_SANDBOX", autocompletion=complete_sandboxes)] = None
    think_schedule: Annotated[Optional[str], _opt("--think-schedule", "Tighten t over the run, ThinkPrune-style (Hou et al., 2025): stages 4k:2k:1k (equal shares of the steps) or a linear 4k..1k; caps --think.", BUDGETS, shown="none")] = None
    system_prompt: Annotated[Optional[str], _opt("--system-prompt", "A system message before each problem.", DATA, shown="none, as the paper")] = None
    chat_template_kwargs: Annotated[str, _opt("--chat-template-kwargs", "JSON arguments for the chat template, e.g. '{\"enable_thinking\": false}' (Qwen3-style hybrids).", DATA, shown="none")] = DEFAULTS["chat_template_kwargs"]
    rollout_cut: Annotated[str, _opt("--rollout-cut", "A rollout at its budget: force (the end marker is forced at t and the solution follows: Elastic Reasoning) | zero (cut at t+s with nothing forced, reward 0: ThinkPrune, Hou et al., 2025).", BUDGETS)] = DEFAULTS["rollout_cut"]
    length_reward: Annotated[Optional[str], _opt("--length-reward", "Length-aware reward on the task's: l1-exact | l1-max (L1, Aggarwal & Welleck, 2025: the target length in the prompt), dapo (soft overlong penalty, DAPO, Yu et al., 2025), cosine (Yeo et al., 2025), kimi (group-relative: Kimi k1.5, 2025); options as cosine:exceed=-5.", BUDGETS, shown="none")] = None
    report_to: Annotated[str, _opt("--report-to", "Also log metrics to tensorboard | wandb | tensorboard,wandb (WANDB_MODE=offline needs no network).", RUN)] = DEFAULTS["report_to"]
    include: IncludeOpt = None
    deepspeed: Annotated[Optional[str], _opt("--deepspeed", "ZeRO data parallelism: zero1 | zero2 | zero3 | DeepSpeed JSON (launch with torchrun or deepspeed).", SCALE, shown="none")] = None
    ref_offload: Annotated[bool, typer.Option("--ref-offload", help="Under --deepspeed zero3 (which partitions the KL reference model like the policy): keep the reference's partition in CPU memory and fetch each layer for its forward; less GPU memory, a slower ref_logprob phase.", rich_help_panel=SCALE)] = DEFAULTS["ref_offload"]


EXAMPLES = """Examples:

  e1 train --model agentica-org/DeepScaleR-1.5B-Preview --data deepscaler \\
      --think 1k --solve 1k --out runs/e1-math
  e1 train --config train.toml --steps 50 --resume
  e1 train --config train.toml --save-every 1 --resume-every 10
  e1 train --model ./sft --data deepscaler --think 512..4k \\
      --think-schedule 4k:3k:2k --report-to tensorboard
  e1 train --model ./sft --data deepscaler --think 1k --length-reward cosine \\
      --out runs/cosine-1k
  e1 train --algo sft --model ./init --data digits-train --lr 3e-3 \\
      --lr-schedule cosine --out runs/sft
  torchrun --nproc_per_node 2 -m e1 train --config train.toml --deepspeed zero2
  torchrun --nproc_per_node 8 -m e1 train --config train.toml \\
      --deepspeed zero3 --backend vllm --max-model-len 4096"""


@with_options
def train_command(
    *,
    ctx: typer.Context,
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="TOML or YAML file with the same keys as the options (flags override it).",
        show_default=False, rich_help_panel=RUN)] = None,
    options: TrainOptions,
) -> None:
    """Train a reasoning model with GRPO under a think/solve budget (Elastic Reasoning), or fine-tune it (--algo sft).

    Writes config.json, metrics.parquet (one row per step), checkpoints/step_N (Hugging Face
    model folders that e1 eval --model loads as is) and eval/step_N into --out. An option left
    out takes the --config file's value, else the default shown.
    """
    from rich.console import Console

    from e1.report import RichProgress, next_steps, quiet_libraries, step_status
    from e1.grpo import build_config, train

    given = {name: value for name, value in vars(options).items() if _given(ctx, name)}
    train_config = build_config(config, **given)
    quiet_libraries()
    if os.environ.get("RANK", "0") != "0":  # under torchrun/deepspeed only rank 0 reports
        train(train_config)
        return
    progress = RichProgress()
    out = train(train_config, progress=progress, on_step=lambda row: progress.status(step_status(row)))
    console = Console()
    console.print(f"run in [bold]{out}[/bold]: metrics.parquet, checkpoints/")
    console.print(next_steps(out, f"e1 view {out}", f"e1 eval --model {out}/checkpoints/step_N --datasets ..."))


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not left at its shown default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


app = command_app(train_command, no_args_is_help=True, epilog=EXAMPLES)
