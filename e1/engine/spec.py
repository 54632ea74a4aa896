"""What loads an engine, the settings `e1 eval`, `e1 sweep` and `e1 train` share: one frozen spec.

    spec = EngineSpec(backend="vllm", dtype="bfloat16", tp=2, max_model_len=8192)
    EvalConfig(model="./my-model", datasets=("aime",), engine=spec)

Checked when built (:func:`e1.engine.options.check_engine_options`, :func:`~e1.engine.options.check_markers`),
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

from e1.engine.options import check_engine_options, check_markers


@dataclass(frozen=True)
class EngineSpec:
    """The backend, weights dtype, device, vLLM's GPU settings and the think markers of one engine."""

    backend: str = "auto"  # hf | vllm | auto (vLLM when installed and a GPU is present) | an API backend (eval)
    dtype: str = "auto"  # weights: auto (the model's) | float32 | bfloat16 | float16
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps (transformers; vLLM places itself)
    tp: int = 1  # vLLM tensor-parallel GPUs per engine
    gpu_memory_utilization: float = 0.9  # vLLM's share of each GPU (weights + KV cache)
    max_model_len: int | None = None  # vLLM context length (None: the model's); lower shrinks the KV cache
    think_start: str | None = None  # start-of-thinking marker (None: <think> from the tokenizer)
    think_end: str | None = None  # end-of-thinking marker (None: </think> from the tokenizer)

    def __post_init__(self):
        check_engine_options(self.backend, self.device, self.dtype, self.tp, self.gpu_memory_utilization,
                             self.max_model_len)
        check_markers(self.think_start, self.think_end)
