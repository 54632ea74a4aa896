"""The server's logits processor for vLLM's model runner V2 (vLLM 0.32+), and the one class ``e1 serve``
gives vLLM there, which serves whichever runner vLLM picks:

    vllm serve MODEL --logits-processors e1.serve.processor_v2:ServedAnyRunnerProcessor ...

Runner V2 admits a request with its sampling params only (``add_request(slot, params)``); the prompt
ids that decide whether thinking is open, closed or absent are on the device by ``apply_staged_writes``,
where :class:`~e1.engine.vllm.v2_processor.V2BudgetProcessor` reads back, in one read per step that
admits such requests, the prompts of those whose state needs them (:meth:`ServedRequests.reads_prompt`).
"""

from __future__ import annotations

from e1.engine import AnyRunnerProcessor, V2BudgetProcessor
from e1.serve.processor import ServedBudgetProcessor, ServedRequests


class ServedV2Processor(ServedRequests, V2BudgetProcessor):
    """The server's processor on runner V2's interface: per-slot device state, as the offline engine's."""


class ServedAnyRunnerProcessor(AnyRunnerProcessor):
    """Runner V1 builds :class:`~e1.serve.processor.ServedBudgetProcessor`, runner V2 :class:`ServedV2Processor`;
    either admits requests through the same ``validate_params`` (the API server calls it: HTTP 400)."""

    V1, V2 = ServedBudgetProcessor, ServedV2Processor
