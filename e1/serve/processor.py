"""e1's logits processor for vLLM's OpenAI-compatible server.

The budgets are per request, in vLLM's extra args; the server's defaults and marker overrides
come from ``--additional-config`` (see :class:`~e1.serve.budgets.ServeDefaults`); the markers
are resolved from the served model's tokenizer when the engine starts:

    vllm serve MODEL --logits-processors e1.serve.processor_v2:ServedAnyRunnerProcessor \\
        --additional-config '{"e1": {"think": 1024, "solve": 1024}}'
    curl ... -d '{"messages": [...], "vllm_xargs": {"thinking_budget": 512, "solution_budget": 256}}'

:class:`ServedRequests` is what serving adds to either runner's processor: each request's RowState
from its budget fields (with the mode's exit text and grace window, as ``e1 eval`` decodes them),
the server's defaults, and the admission check. :class:`ServedBudgetProcessor` is it on vLLM's V1
interface (:class:`~e1.engine.vllm.processor.BudgetProcessor`); :mod:`e1.serve.processor_v2` holds
runner V2's, and the class that serves whichever runner vLLM picks (vLLM 0.32+). An early-exit round
that e1's middleware sends (:mod:`e1.serve.rounds`) carries the offline engine's settings under
``vllm_xargs["e1"]`` instead, and is decoded as the offline engine decodes it; early-exit named only
by the budget fields is refused (one request cannot roll back).
"""

from __future__ import annotations

import secrets
import sys

from e1.engine import KEY, BudgetProcessor, RowState
from e1.errors import E1Error
from e1.serve.budgets import (
    ROUNDS_FIELD,
    ROUNDS_SECRET,
    check_fields,
    check_room,
    load_served,
    request_budget,
)


class ServedRequests:
    """Budgets from each request's ``thinking_budget``/``solution_budget``/``budget_mode`` extra args, the
    server's defaults filling what a request leaves out: mixed into either runner's processor (first)."""

    def __init__(self, vllm_config, *args):
        super().__init__(vllm_config, *args)
        self.served = load_served(vllm_config)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Runs in the API server before a request is admitted: a bad field becomes an HTTP 400."""
        if KEY in (sampling_params.extra_args or {}):  # a round of e1's early-exit driver, or a client's forgery
            secret = str(sampling_params.extra_args.get(ROUNDS_FIELD)).encode()
            if not secrets.compare_digest(secret, ROUNDS_SECRET.encode()):
                raise ValueError(f"vllm_xargs[{KEY!r}] is e1's own (its early-exit rounds): send budget_mode instead")
            super().validate_params(sampling_params)  # the offline engine's settings, checked as it checks them
            return
        try:
            check_fields(sampling_params.extra_args or {})
            check_room(sampling_params.extra_args or {}, sampling_params.max_tokens)
        except E1Error as err:
            raise ValueError(str(err)) from err

    def reads_prompt(self, params) -> bool:
        """A budgeted request's state needs its prompt (is thinking open, closed or absent there);
        an early-exit round's settings carry that, and a plain request has no state."""
        xargs = params.extra_args or {}
        return KEY not in xargs and request_budget(xargs, self.served.defaults) is not None

    def request_state(self, params, prompt_ids: list[int] | None) -> RowState | None:
        if KEY in (params.extra_args or {}):
            return super().request_state(params, prompt_ids)
        budget = request_budget(params.extra_args or {}, self.served.defaults)  # fields were checked at admission
        if budget is None:
            return None
        room = params.max_tokens if params.max_tokens is not None else sys.maxsize
        state = self.served.state(budget, prompt_ids or [], room)
        if budget.mode.trials:  # the server's default, on a route around the middleware (/v1/responses,
            state.trials_on = False  # /invocations): no rounds, so no trials (one request cannot roll them back)
        return state


class ServedBudgetProcessor(ServedRequests, BudgetProcessor):
    """The server's processor on vLLM's V1 interface (runner V1; the only one before vLLM 0.32)."""
