"""e1's budgets inside the tools researchers already run (docs/integrations.md).

- :mod:`e1.integrations.transformers` — ``model.generate(..., logits_processor=[BudgetLogitsProcessor(...)])``.
- :mod:`e1.integrations.vllm` — ``LLM(..., logits_processors=[VLLMBudgetProcessor])`` with per-request
  budgets in ``SamplingParams(extra_args=...)``.
- :mod:`e1.integrations.trl` — ``GRPOTrainer(..., rollout_func=budgeted_rollouts(think, solve))``.
- :mod:`e1.integrations.lm_eval` — the lm-evaluation-harness model ``e1``
  (``python -m e1.integrations.lm_eval run --model e1 --model_args pretrained=...,think=...,solve=...``).

Each name loads its module (and so its library) on first use; nothing else in e1 imports this package.
"""

from __future__ import annotations

_LAZY = {
    "BudgetLogitsProcessor": "e1.integrations.transformers",
    "BudgetStoppingCriteria": "e1.integrations.transformers",
    "VLLMBudgetProcessor": "e1.integrations.vllm",
    "BudgetedRollouts": "e1.integrations.trl",
    "budgeted_rollouts": "e1.integrations.trl",
    "sampling_of": "e1.integrations.trl",
    "E1LM": "e1.integrations.lm_eval",
    "parse_model_args": "e1.integrations.lm_eval",
    "request_settings": "e1.integrations.lm_eval",
}

__all__ = [*_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.integrations' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
