"""What loads an engine, the settings `e1 eval`, `e1 sweep` and `e1 train` share: one frozen spec.

    spec = EngineSpec(backend="vllm", dtype="bfloat16", tp=2, max_model_len=8192)
    EvalConfig(model="./my-model", datasets=("aime",), engine=spec)

Each field is a setting declared once (:mod:`e1.settings`): the ``--backend``, ``--dtype``, ... options
of `e1 eval`, `e1 sweep`, `e1 train` and `e1 serve` are built from it. Checked when built
(:func:`e1.engine.load_options.check_engine_options`, the fields' numbers, :func:`~e1.engine.load_options.check_markers`),
so a typo is refused before anything loads. A command may narrow it further (training takes the
local backends only, and a training dtype). Run directories record its fields flat, beside the
command's own (``config.json``: ``"backend"``, ``"dtype"``, ...).

    >>> EngineSpec(backend="hf", think_end="</think>").think_end
    '</think>'
    >>> EngineSpec(tp=0)
    Traceback (most recent call last):
    e1.errors.ConfigError: --tp must be >= 1, got 0 (the number of GPUs one vLLM engine spans)
"""

from __future__ import annotations

from dataclasses import dataclass

from e1.engine.drafter import HELP as DRAFTER_HELP
from e1.engine.drafter import parse_drafter
from e1.engine.load_options import check_engine_options, check_markers
from e1.numeric import Number
from e1.settings import BUDGETS, MODEL, SCALE, check_settings, numbers, setting


@dataclass(frozen=True)
class EngineSpec:
    """The backend, weights dtype, device, vLLM's GPU settings and the think markers of one engine."""

    backend: str = setting(
        "auto",
        "auto (vLLM if installed and a GPU is present) | hf | vllm | openai (a server: --api-url) | gemini | "
        "anthropic (hosted reasoning APIs, through their SDKs: pip install 'e1[gemini]').",
        MODEL,
        complete="backends",
    )
    dtype: str = setting(
        "auto",
        "auto (the checkpoint's dtype) | float32 (fp32) | bfloat16 (bf16) | float16 (fp16).",
        MODEL,
        complete="dtypes",
    )
    device: str = setting("auto", "auto | cpu | cuda | cuda:N.", MODEL)  # transformers; vLLM places itself
    tp: int = setting(
        1,
        "vLLM tensor-parallel GPUs per engine.",
        SCALE,
        number=Number(int, min=1, max=4096, hint="the number of GPUs one vLLM engine spans"),
    )
    gpu_memory_utilization: float = setting(
        0.9,
        "vLLM: fraction of GPU memory it may use (weights + KV cache).",
        SCALE,
        number=Number(
            float,
            min=0,
            max=1,
            above=True,
            hint="a fraction of GPU memory, e.g. 0.9; 0.3-0.5 in "
            "training, where the policy and optimizer share the GPU",
        ),
    )
    max_model_len: int | None = setting(
        None,
        "vLLM: context length; lower shrinks its KV cache.",
        SCALE,
        shown="the model's",
        number=Number(int, min=1, max=2**31 - 1, optional=True, hint="leave it out to use the model's"),
    )
    speculative: str = setting(
        "",
        f"vLLM speculative decoding with a drafter: {DRAFTER_HELP} ('': off). Budgets stay exact "
        "(a request ends where a token is forced); soft, stop=, grace and early-exit are refused.",
        SCALE,
    )
    think_start: str | None = setting(None, "Start-of-thinking marker.", BUDGETS, shown="from the tokenizer, <think>")
    think_end: str | None = setting(None, "End-of-thinking marker.", BUDGETS, shown="from the tokenizer, </think>")

    def __post_init__(self):
        check_engine_options(self.backend, self.device, self.dtype)
        check_settings(self)
        check_markers(self.think_start, self.think_end)
        parse_drafter(self.speculative)


ENGINE_NUMBERS = numbers(EngineSpec)  # the numeric engine settings every command shares: eval, sweep, train, serve
