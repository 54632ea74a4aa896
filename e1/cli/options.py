"""Options the subcommands share, each declared once.

:class:`RunOptions` holds every option that `e1 eval` and `e1 sweep` both take: its fields
carry the typer declarations (flag, help, default), and :func:`with_options` shows them to
typer as parameters of a command that takes one ``options: RunOptions`` argument:

    @with_options
    def eval_command(model: ModelOpt, options: RunOptions, out: OutOpt = Path("runs/eval")) -> None:
        config = options.eval_config(model=model, budgets=..., modes=..., n=1, out=out)

Values stay plain strings/ints here; the library's frozen configs validate them and raise
:class:`e1.errors.E1Error` (one red line, never a traceback).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from e1.cli.completion import complete_backends, complete_datasets, complete_dtypes, complete_sandboxes


def nonempty_path(flag: str) -> Callable[[object], Path]:
    """Typer's parser for a path option: ``--out ''`` would otherwise be ``Path('.')``, the current directory.

        OutOpt = Annotated[Path, typer.Option("--out", parser=nonempty_path("--out"))]
    """
    from e1.store import check_out

    return lambda value: check_out(value, flag)


# The panels options are grouped in, in the order --help shows them (every option names one).
BUDGETS = "Budgets & modes"
MODEL = "Model & backend"
API = "Models behind an API"
DATA = "Data & prompts"
SAMPLING = "Sampling"
CODE = "Code tests"
OUTPUT = "Output"
SCALE = "Scale"

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Model folder or Hugging Face hub id.", show_default=False,
                      rich_help_panel=MODEL)
]
ThinkOpt = Annotated[str, typer.Option(
    "--think", "-t", rich_help_panel=BUDGETS,
    help="Thinking budget t in tokens: 512, 1k (=1024), 1.5k, 2K; 0 = no thinking.")]
SolveOpt = Annotated[str, typer.Option("--solve", "-s", rich_help_panel=BUDGETS,
                                       help="Solution budget s in tokens (>= 1): 512, 1k, ...")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Run directory; rerunning into it resumes.",
                                      rich_help_panel=OUTPUT, parser=nonempty_path("--out"))]
RunOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", show_default="a new folder per run: runs/<command>/MODEL-DATASETS-TIME", rich_help_panel=OUTPUT,
    help="Run directory; rerunning into it resumes.", parser=nonempty_path("--out"))]
INCLUDE_HELP = ("Your own code to import first: a .py file or a folder (a package, or its .py files) that registers "
                "rewards (@register_reward), datasets, prompt styles or modes; repeat for several.")
IncludeOpt = Annotated[Optional[list[str]], typer.Option(
    "--include", show_default=False, rich_help_panel=DATA,
    help=f"{INCLUDE_HELP} Recorded in config.json: a resume loads it again.")]
DataDirOpt = Annotated[
    Optional[Path],
    typer.Option("--data-dir", help="Where prepared datasets live.", show_default="$E1_DATA_DIR or ~/.cache/e1/data",
                 rich_help_panel=DATA, parser=nonempty_path("--data-dir")),
]
ThinkStartOpt = Annotated[Optional[str], typer.Option(
    "--think-start", help="Start-of-thinking marker.", show_default="from the tokenizer, <think>",
    rich_help_panel=BUDGETS)]
ThinkEndOpt = Annotated[Optional[str], typer.Option(
    "--think-end", help="End-of-thinking marker.", show_default="from the tokenizer, </think>",
    rich_help_panel=BUDGETS)]
DtypeOpt = Annotated[str, typer.Option("--dtype", autocompletion=complete_dtypes, rich_help_panel=MODEL,
                                        help="auto (the checkpoint's dtype) | float32 (fp32) | bfloat16 (bf16) | float16 (fp16).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto | cpu | cuda | cuda:N.", rich_help_panel=MODEL)]
TpOpt = Annotated[int, typer.Option("--tp", help="vLLM tensor-parallel GPUs.", rich_help_panel=SCALE)]
GpuMemOpt = Annotated[float, typer.Option(
    "--gpu-memory-utilization", help="vLLM: fraction of GPU memory it may use.", rich_help_panel=SCALE)]
SandboxOpt = Annotated[Optional[str], typer.Option(
    "--sandbox", envvar="E1_SANDBOX", show_default="auto", autocompletion=complete_sandboxes, rich_help_panel=CODE,
    help="How model-written code runs: auto (unshare as root, else bwrap; refuses rather than run code "
         "unconfined) | unshare | bwrap | none (NO isolation: only time, output and rlimits; prints a warning). "
         "What each isolates: docs/sandbox.md.")]
MaxModelLenOpt = Annotated[Optional[int], typer.Option(
    "--max-model-len", help="vLLM: context length.", show_default="the model's", rich_help_panel=SCALE)]


def mode_help(lead: str) -> str:
    """The help of a mode option: the registry's names, and where their options are (``e1 help modes``)."""
    from e1.cli.completion import mode_names

    return (f"{lead}, written name[:key=value]...: {' | '.join(mode_names())}; e.g. elastic:exit=qwen:grace=32. "
            "Every mode and its options: e1 help modes.")


@dataclass(frozen=True)
class RunOptions:
    """The options of `e1 eval` and `e1 sweep` other than model, budgets, modes, n and --out."""

    datasets: Annotated[list[str], typer.Option(
        "--datasets", "-d", show_default=False, autocompletion=complete_datasets, rich_help_panel=DATA,
        help="Registry names (see e1 data list) or files (.parquet, .jsonl, .json, .csv); repeat or "
             "comma-separate.")]
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature; 0 = greedy.",
                                               rich_help_panel=SAMPLING)] = 0.6
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling threshold (1 = off).",
                                         rich_help_panel=SAMPLING)] = 0.95
    top_k: Annotated[int, typer.Option("--top-k", help="Keep only the k most likely tokens (0 = off).",
                                       rich_help_panel=SAMPLING)] = 0
    seed: Annotated[int, typer.Option("--seed", help="Random seed; the same seed reproduces the same samples.",
                                      rich_help_panel=SAMPLING)] = 0
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Output cap for mode none.",
                                            rich_help_panel=SAMPLING)] = 32768
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences decoded together (bounds memory).",
                                            rich_help_panel=SCALE)] = 64
    limit: Annotated[Optional[int], typer.Option("--limit", help="Only the first N problems of each dataset.",
                                                 show_default="all", rich_help_panel=DATA)] = None
    think_start: ThinkStartOpt = None
    think_end: ThinkEndOpt = None
    dtype: DtypeOpt = "auto"
    device: DeviceOpt = "auto"
    data_dir: DataDirOpt = None
    workers: Annotated[Optional[int], typer.Option(
        "--workers", help="Code tests run in parallel.", show_default="min(8, CPUs)", rich_help_panel=CODE)] = None
    max_tests: Annotated[Optional[int], typer.Option(
        "--max-tests", help="Run only each problem's N largest tests.", show_default="all",
        rich_help_panel=CODE)] = None
    test_time_limit: Annotated[float, typer.Option("--test-time-limit", help="Seconds per test.",
                                                   rich_help_panel=CODE)] = 6.0
    backend: Annotated[str, typer.Option(
        "--backend", autocompletion=complete_backends, rich_help_panel=MODEL,
        help="auto (vLLM if installed and a GPU is present) | hf | vllm | openai (a server: --api-url) | gemini | "
             "anthropic (hosted reasoning APIs, through their SDKs: pip install 'e1[gemini]').")] = "auto"
    tp: TpOpt = 1
    gpu_memory_utilization: GpuMemOpt = 0.9
    max_model_len: MaxModelLenOpt = None
    sandbox: SandboxOpt = None
    k: Annotated[str, typer.Option(
        "--k", show_default="pass@1 and pass@n", rich_help_panel=OUTPUT,
        help="Also report pass@k for these k (comma-separated, each <= n), e.g. 1,4,16.")] = ""
    prompt_budget: Annotated[Optional[str], typer.Option(
        "--prompt-budget", show_default="none", rich_help_panel=DATA,
        help="State each cell's budget N = t + s in the prompt: tale (\"use less than N tokens\": TALE, Han et "
             "al., 2024) | l1 (\"Think for N tokens.\": L1, Aggarwal & Welleck, 2025); with any mode.")] = None
    system_prompt: Annotated[Optional[str], typer.Option(
        "--system-prompt", show_default="none, as the paper", rich_help_panel=DATA,
        help="A system message before the problem.")] = None
    chat_template_kwargs: Annotated[str, typer.Option(
        "--chat-template-kwargs", show_default=False, rich_help_panel=DATA,
        help="JSON arguments for the chat template, e.g. '{\"enable_thinking\": false}' for Qwen3-style hybrid "
             "models.")] = ""
    api_url: Annotated[Optional[str], typer.Option(
        "--api-url", show_default=False, rich_help_panel=API,
        help="--backend openai: the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (--model is "
             "then the served name); gemini, anthropic: another endpoint than the vendor's.")] = None
    api_key_env: Annotated[Optional[str], typer.Option(
        "--api-key-env", show_default="OPENAI_API_KEY if set, GEMINI_API_KEY, ANTHROPIC_API_KEY", rich_help_panel=API,
        help="The environment variable holding the API key, never the key.")] = None
    tokenizer: Annotated[Optional[str], typer.Option(
        "--tokenizer", show_default=False, rich_help_panel=API,
        help="--backend openai: the served model's tokenizer (folder or hub id) for exact prompts and counts; "
             "without it prompts are chat messages.")] = None
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight.", rich_help_panel=API)] = 8
    request_timeout: Annotated[float, typer.Option(
        "--request-timeout", help="Seconds per request.", rich_help_panel=API)] = 600.0
    max_retries: Annotated[int, typer.Option(
        "--max-retries", help="Retries of a request (429, 5xx, connection errors), with backoff.",
        rich_help_panel=API)] = 5

    include: IncludeOpt = None
    report_to: Annotated[Optional[str], typer.Option(
        "--report-to", show_default="none", rich_help_panel=OUTPUT,
        help="Also send the results to tensorboard | wandb | tensorboard,wandb: each cell's metrics and a samples "
             "table (WANDB_MODE=offline needs no network).")] = None

    def includes(self, out: Path | None) -> tuple[str, ...]:
        """Load the includes ``out``'s config.json recorded (a resume; each refused if its code changed since)
        and ``--include``; their absolute paths."""
        from e1.data import load_includes

        return load_includes(self.include or (), out=out)

    def run_dir(self, out: Path | None, command: str, models: list[str]) -> Path:
        """``--out``, else a new folder per run: ``runs/<command>/MODEL-DATASETS-TIME``."""
        from e1.store import new_run_dir

        return out if out is not None else new_run_dir(Path("runs") / command, [*models, ",".join(self.datasets)])

    def api_settings(self):
        """The :class:`e1.engine.api.ApiSettings` of the --api-* options (None without --api-url, but
        for a hosted backend, whose endpoint is then the vendor's)."""
        from types import SimpleNamespace

        from e1.engine import API_FLAGS, API_NUMBERS, HOSTED_BACKENDS, ApiSettings
        from e1.numeric import check_numbers

        values = {"concurrency": self.concurrency, "request_timeout_s": self.request_timeout, "max_retries": self.max_retries}
        check_numbers(SimpleNamespace(**values), API_NUMBERS, API_FLAGS)  # checked even without --api-url
        if self.api_url is None and self.backend not in HOSTED_BACKENDS:
            if self.tokenizer is not None or self.api_key_env is not None:
                from e1.errors import ConfigError

                raise ConfigError("--tokenizer and --api-key-env are for --backend openai",
                                  hint="pass --backend openai --api-url URL, or leave them out")
            return None
        return ApiSettings(self.api_url, api_key_env=self.api_key_env, tokenizer=self.tokenizer,
                           concurrency=self.concurrency, request_timeout_s=self.request_timeout,
                           max_retries=self.max_retries,
                           backend=self.backend if self.backend in HOSTED_BACKENDS else "openai")

    def eval_config(self, *, model: str, budgets, modes, n: int, out: Path):
        """The :class:`e1.eval.run.EvalConfig` of these options with a command's model, grid, n and --out."""
        from e1.data import PromptOptions
        from e1.engine import EngineSpec, Sampling
        from e1.eval import EvalConfig
        from e1.rewards import ScoringSpec, default_workers

        return EvalConfig(
            model=model, datasets=tuple(d.strip() for spec in self.datasets for d in spec.split(",") if d.strip()),
            budgets=tuple(budgets), modes=tuple(modes), n=n,
            sampling=Sampling(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=self.seed,
                              max_tokens=self.max_tokens),
            out=out, batch_size=self.batch_size, limit=self.limit, data_dir=self.data_dir,
            engine=EngineSpec(backend=self.backend, dtype=self.dtype, device=self.device, tp=self.tp,
                              gpu_memory_utilization=self.gpu_memory_utilization, max_model_len=self.max_model_len,
                              think_start=self.think_start, think_end=self.think_end),
            scoring=ScoringSpec(workers=default_workers() if self.workers is None else self.workers,
                                test_time_limit_s=self.test_time_limit, max_tests=self.max_tests, sandbox=self.sandbox),
            api=self.api_settings(),
            prompt=PromptOptions(system=self.system_prompt, template_kwargs=self.chat_template_kwargs,
                                 budget=self.prompt_budget),
            ks=parse_ks(self.k), report_to=self.report_to or "none", include=self.includes(out),
        )


def parse_ks(text: str) -> tuple[int, ...]:
    """``--k 1,4,16`` as sorted distinct whole numbers (their range is checked by EvalConfig).

    >>> parse_ks("16, 4,1,4"), parse_ks("")
    ((1, 4, 16), ())
    """
    from e1.errors import ConfigError

    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not all(part.isdigit() and len(part) <= 18 for part in parts):
        raise ConfigError(f"--k {text!r}: give whole numbers, comma-separated", hint="e.g. --k 1,4,16")
    return tuple(sorted({int(part) for part in parts}))


def _parameters(function: Callable, groups: dict[str, type]) -> list[inspect.Parameter]:
    """``function``'s parameters as keyword-only ones (so a required option may follow a defaulted
    one), annotations resolved, each options-dataclass parameter (``groups``) replaced by its fields."""
    hints = typing.get_type_hints(function, include_extras=True)
    parameters = []
    for parameter in inspect.signature(function).parameters.values():
        group = groups.get(parameter.name)
        if group is None:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[parameter.name]))
            continue
        option_hints = typing.get_type_hints(group, include_extras=True)
        parameters += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=option_hints[f.name],
                                         default=inspect.Parameter.empty if f.default is MISSING else f.default)
                       for f in fields(group)]
    return parameters


def with_options(command: Callable) -> Callable:
    """Let typer see the fields of ``command``'s options-dataclass parameters (such as ``options:
    RunOptions``) as options of its own, so a set of options is declared once, on a dataclass.

    Typer reads a command's ``inspect.signature``, which honours ``__signature__``: the wrapper
    declares the expanded parameters and gathers each dataclass's fields back into one instance.
    """
    groups = {name: hint for name, hint in typing.get_type_hints(command).items() if is_dataclass(hint)}

    @functools.wraps(command, assigned=("__module__", "__name__", "__qualname__", "__doc__"), updated=())
    def run(**values):
        for slot, group in groups.items():
            values[slot] = group(**{f.name: values.pop(f.name) for f in fields(group)})
        return command(**values)

    run.__signature__ = inspect.Signature(_parameters(command, groups))
    return run
