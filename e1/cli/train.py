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
from e1.cli.options import nonempty_path, with_options
from e1.grpo import DEFAULTS


def _opt(flag: str, help: str, key: str | None = None, **extra):
    key = key or flag.lstrip("-").replace("-", "_")
    default = DEFAULTS.get(key)
    shown = "" if default is None or key in ("model", "data") else f" \\[default: {default}]"  # escaped: rich would eat "[default: ...]" as markup
    return typer.Option(flag, help=help + shown, show_default=False, **extra)


@dataclass(frozen=True)
class TrainOptions:
    """Every option of `e1 train` but --config; None leaves the config file's value (else the default)."""

    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Initial policy: model folder or hub id.", show_default=False)] = None
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Training problems: registry name or file with problem and answer fields.", show_default=False, autocompletion=complete_dataset)] = None
    think: Annotated[Optional[str], _opt("--think", "Rollout thinking budget t: 512, 1k, 1.5k; a set 512,1k,2k or a range 512..2k draws one per prompt and step (budget curriculum).")] = None
    solve: Annotated[Optional[str], _opt("--solve", "Rollout solution budget s.")] = None
    out: Annotated[Optional[Path], _opt("--out", "Run directory (config.json, metrics.parquet, checkpoints/, eval/).", parser=nonempty_path("--out"))] = None
    steps: Annotated[Optional[int], _opt("--steps", "GRPO steps.")] = None
    prompts_per_step: Annotated[Optional[int], _opt("--prompts-per-step", "Problems per step.")] = None
    samples_per_prompt: Annotated[Optional[int], _opt("--samples-per-prompt", "Completions per problem (group size).")] = None
    mini_batch_prompts: Annotated[Optional[int], _opt("--mini-batch-prompts", "Problems per optimizer step.")] = None
    micro_batch: Annotated[Optional[int], _opt("--micro-batch", "Sequences per forward/backward.")] = None
    lr: Annotated[Optional[float], _opt("--lr", "AdamW learning rate.")] = None
    weight_decay: Annotated[Optional[float], _opt("--weight-decay", "AdamW weight decay.")] = None
    grad_clip: Annotated[Optional[float], _opt("--grad-clip", "Max gradient norm.")] = None
    temperature: Annotated[Optional[float], _opt("--temperature", "Rollout temperature.")] = None
    top_p: Annotated[Optional[float], _opt("--top-p", "Rollout nucleus threshold (1 = off).")] = None
    kl_coef: Annotated[Optional[float], _opt("--kl-coef", "k3 KL weight; 0 loads no reference model.")] = None
    clip_low: Annotated[Optional[float], _opt("--clip-low", "PPO clip below 1.")] = None
    clip_high: Annotated[Optional[float], _opt("--clip-high", "PPO clip above 1.")] = None
    entropy_coef: Annotated[Optional[float], _opt("--entropy-coef", "Entropy bonus weight.")] = None
    forced_tokens: Annotated[Optional[str], _opt("--forced-tokens", "Forced end markers: train | mask.")] = None
    save_every: Annotated[Optional[int], _opt("--save-every", "Checkpoint every N steps.")] = None
    resume_every: Annotated[Optional[int], _opt("--resume-every", "Also save the optimizer state (what --resume needs) every N steps and at the end; other saves write the weights alone (default: every save).")] = None
    keep_last: Annotated[Optional[int], _opt("--keep-last", "Keep only the newest K checkpoints (default: all).")] = None
    eval_every: Annotated[Optional[int], _opt("--eval-every", "Validate every N steps.")] = None
    eval_data: Annotated[Optional[str], _opt("--eval-data", "Validation problems (default: none).", autocompletion=complete_dataset)] = None
    eval_limit: Annotated[Optional[int], _opt("--eval-limit", "Only the first N validation problems.")] = None
    seed: Annotated[Optional[int], _opt("--seed", "Seed of data order, rollouts and mini-batches.")] = None
    resume: Annotated[Optional[bool], typer.Option("--resume/--no-resume", help="Continue from the newest checkpoint in --out.", show_default=False)] = None
    batch_size: Annotated[Optional[int], _opt("--batch-size", "Sequences decoded together.")] = None
    rollout_chunks: Annotated[Optional[int], _opt("--rollout-chunks", "Generate each step's rollouts in N chunks of whole prompts and score chunk k while chunk k+1 generates. Pays when scoring takes time (code tasks whose sandboxed tests run for seconds), at the cost of smaller generate batches; 1 = one generate call, then scoring.")] = None
    dtype: Annotated[Optional[str], _opt("--dtype", "float32 | bfloat16 | float16.", autocompletion=complete_train_dtypes)] = None
    device: Annotated[Optional[str], _opt("--device", "auto | cpu | cuda | cuda:N.")] = None
    think_start: Annotated[Optional[str], _opt("--think-start", "Start-of-thinking marker (default: <think>).")] = None
    think_end: Annotated[Optional[str], _opt("--think-end", "End-of-thinking marker (default: </think>).")] = None
    data_dir: Annotated[Optional[Path], _opt("--data-dir", "Prepared datasets (default: $E1_DATA_DIR).", parser=nonempty_path("--data-dir"))] = None
    algo: Annotated[Optional[str], _opt("--algo", "grpo (budget-constrained rollouts) | sft (learn the data's completion column).", autocompletion=complete_algos)] = None
    lr_schedule: Annotated[Optional[str], _opt("--lr-schedule", "constant | cosine.")] = None
    warmup_steps: Annotated[Optional[int], _opt("--warmup-steps", "Linear learning-rate warm-up steps.")] = None
    backend: Annotated[Optional[str], _opt("--backend", "Rollout engine: hf | vllm (in-process, weights copied in after every step) | auto (vLLM if installed and a GPU is present); not the API backends.", autocompletion=complete_train_backends)] = None
    tp: Annotated[Optional[int], _opt("--tp", "vLLM tensor-parallel GPUs per engine (under DeepSpeed: ranks per engine).")] = None
    gpu_memory_utilization: Annotated[Optional[float], _opt("--gpu-memory-utilization", "vLLM's share of the GPU while it decodes, used only with --kv-cache-gib 0 (it sleeps during updates; training state stays resident).")] = None
    kv_cache_gib: Annotated[Optional[float], _opt("--kv-cache-gib", "vLLM's KV cache per GPU in GiB (default: what one step's rollouts need; 0: from --gpu-memory-utilization).")] = None
    max_model_len: Annotated[Optional[int], _opt("--max-model-len", "vLLM context length (default: the model's); lower shrinks its KV cache.")] = None
    workers: Annotated[Optional[int], _opt("--workers", "Code rewards: programs run in parallel in the sandbox.")] = None
    test_time_limit_s: Annotated[Optional[float], _opt("--test-time-limit", "Code rewards: seconds per test.", "test_time_limit_s")] = None
    max_tests: Annotated[Optional[int], _opt("--max-tests", "Code rewards: run only each problem's N largest tests (default: all).")] = None
    sandbox: Annotated[Optional[str], typer.Option("--sandbox", envvar="E1_SANDBOX", show_default=False, autocompletion=complete_sandboxes, help="Code rewards' sandbox: auto | unshare | bwrap | none (see e1 eval --help). \\[default: auto]")] = None
    think_schedule: Annotated[Optional[str], _opt("--think-schedule", "Tighten t over the run, ThinkPrune-style (Hou et al., 2025): stages 4k:2k:1k (equal shares of the steps) or a linear 4k..1k; caps --think (default: none).")] = None
    system_prompt: Annotated[Optional[str], _opt("--system-prompt", "A system message before each problem (default: none, as the paper).")] = None
    chat_template_kwargs: Annotated[Optional[str], _opt("--chat-template-kwargs", "JSON arguments for the chat template, e.g. '{\"enable_thinking\": false}' (Qwen3-style hybrids).")] = None
    rollout_cut: Annotated[Optional[str], _opt("--rollout-cut", "A rollout at its budget: force (the end marker is forced at t and the solution follows: Elastic Reasoning) | zero (cut at t+s with nothing forced, reward 0: ThinkPrune, Hou et al., 2025).")] = None
    length_reward: Annotated[Optional[str], _opt("--length-reward", "Length-aware reward on the task's: l1-exact | l1-max (L1, Aggarwal & Welleck, 2025: the target length in the prompt), dapo (soft overlong penalty, DAPO, Yu et al., 2025), cosine (Yeo et al., 2025), kimi (group-relative: Kimi k1.5, 2025); options as cosine:exceed=-5 (default: none).")] = None
    report_to: Annotated[Optional[str], _opt("--report-to", "Also log metrics to tensorboard | wandb | tensorboard,wandb (WANDB_MODE=offline needs no network).")] = None
    include: Annotated[Optional[list[str]], typer.Option("--include", show_default=False, help="Your own code to import first: a .py file or a folder that registers rewards (@register_reward), datasets or prompt styles; repeat for several. Recorded in config.json: --resume loads it again.")] = None
    deepspeed: Annotated[Optional[str], _opt("--deepspeed", "ZeRO data parallelism: zero1 | zero2 | zero3 | DeepSpeed JSON (launch with torchrun or deepspeed).")] = None


@with_options
def train_command(
    *,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML or YAML file with the same keys as the options (flags override it).", show_default=False)] = None,
    options: TrainOptions,
) -> None:
    """Train a reasoning model with GRPO under a think/solve budget (Elastic Reasoning), or fine-tune it (--algo sft).

    Writes config.json, metrics.parquet (one row per step), checkpoints/step_N (Hugging Face
    model folders that `e1 eval --model` loads as is) and eval/step_N into --out.

    Examples:

      e1 train --model agentica-org/DeepScaleR-1.5B-Preview --data deepscaler --think 1k --solve 1k --out runs/e1-math

      e1 train --config train.toml --steps 50 --resume

      e1 train --config train.toml --save-every 1 --resume-every 10   # weights each step, resumable every 10

      e1 train --model ./sft --data deepscaler --think 512..4k --think-schedule 4k:3k:2k --report-to tensorboard

      e1 train --model ./sft --data deepscaler --think 1k --length-reward cosine --out runs/cosine-1k

      e1 train --algo sft --model ./init --data digits-train --lr 3e-3 --lr-schedule cosine --out runs/sft

      torchrun --nproc_per_node 2 -m e1 train --config train.toml --deepspeed zero2

      torchrun --nproc_per_node 8 -m e1 train --config train.toml --deepspeed zero3 --backend vllm --max-model-len 4096
    """
    from rich.console import Console

    from e1.report import RichProgress, next_steps, quiet_libraries, step_status
    from e1.grpo import build_config, train

    train_config = build_config(config, **vars(options))
    quiet_libraries()
    if os.environ.get("RANK", "0") != "0":  # under torchrun/deepspeed only rank 0 reports
        train(train_config)
        return
    progress = RichProgress()
    out = train(train_config, progress=progress, on_step=lambda row: progress.status(step_status(row)))
    console = Console()
    console.print(f"run in [bold]{out}[/bold]: metrics.parquet, checkpoints/")
    console.print(next_steps(out, f"e1 view {out}", f"e1 eval --model {out}/checkpoints/step_N --datasets ..."))
