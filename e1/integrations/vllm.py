"""e1's budgets in vLLM offline: one logits processor class for ``LLM``, each request's budgets in its
``SamplingParams.extra_args``, on whichever model runner vLLM picks (V1, or V2 on vLLM 0.32+).

    from vllm import LLM, SamplingParams
    from e1.integrations.vllm import VLLMBudgetProcessor

    llm = LLM(model="Salesforce/E1-Math-1.5B", logits_processors=[VLLMBudgetProcessor])
    params = SamplingParams(temperature=0, max_tokens=None,   # None: e1 ends each request at its budget
                            extra_args={"thinking_budget": 512, "solution_budget": 256, "budget_mode": "elastic"})
    outputs = llm.generate(prompts, params)

The keys (:data:`KEYS`): ``thinking_budget`` and ``solution_budget`` (both or neither; ``512``, ``"1k"``),
``budget_mode`` (``elastic``, ``budget-forcing``, ``soft``, ``truncate``, ``none`` and their options, e.g.
``"elastic:exit=qwen:grace=32"``). A request without them is decoded plainly, unless ``LLM(...,
additional_config={"e1": {"think": 512, "solve": 256, "mode": "elastic"}})`` gives defaults (and
``think_start``/``think_end``, the markers; else the tokenizer's ``<think>``/``</think>``).

It is ``e1 serve``'s processor (:mod:`e1.serve.processor`: the same RowState per request, built by the one
builder, as ``e1 eval --backend vllm`` decodes it; tests/test_integrations_vllm.py checks the tokens equal)
admitting requests through :func:`check_request`, the one gate of an offline request's e1 settings: vLLM
calls it at submission and refuses a bad request in one line (``VLLMValidationError``), before it runs.
Refused: values that do not parse, one budget without the other, early-exit (its trials need several
requests: ``e1 eval --backend vllm`` or ``e1 serve`` drive them) and ``wait=k``, a key that looks like
one of e1's but is not (``thinking_budgt``, ``THINKING_BUDGET``, ``max_thinking_tokens``: it would silently
decode unbudgeted), e1's internal ``extra_args["e1"]``, ``ignore_eos=True``, and a ``max_tokens`` below what
the budget needs (vLLM's default is 16).

Read for this: vllm-project/vllm v0.32.0, ``vllm/v1/engine/input_processor.py`` (custom processors'
``validate_params`` run per request at admission, a ValueError becomes ``VLLMValidationError``) and
``vllm/v1/sample/logits_processor/interface.py``.
"""

from __future__ import annotations

import difflib
import importlib
import unicodedata
from collections.abc import Mapping

from e1.budget import Budget, parse_tokens
from e1.engine import KEY, Markers
from e1.errors import ConfigError, E1Error
from e1.serve import (
    FIELDS,
    MODE_FIELD,
    ROOM_FIELD,
    SOLVE_FIELD,
    THINK_FIELD,
    check_fields,
    check_room,
    mode_field,
    processor_name,
)

KEYS = FIELDS  # thinking_budget, solution_budget, budget_mode: what a request's extra_args may carry for e1
# keys people write for these (refused with the right name, never ignored): close misspellings are found too
_LOOKALIKES = {"think": THINK_FIELD, "solve": SOLVE_FIELD, "mode": MODE_FIELD, "thinking": THINK_FIELD}
_NO_MARKERS = Markers("", "", (), (), frozenset(), 0, (), ())  # the least a budget needs: nothing forced counted


def check_request(params) -> None:
    """The one gate of a request's e1 settings (``params.extra_args``, with its ``max_tokens``): returns
    when the request may run, raises a one-line ValueError (vLLM's admission error) when it may not."""
    try:
        xargs = params.extra_args
        if xargs is None:
            return
        if not isinstance(xargs, Mapping):
            raise ConfigError(f"extra_args must be a dict, not {type(xargs).__name__}")
        _check_keys(xargs)
        check_fields(xargs)
        check_room(xargs, params.max_tokens)
        _check_ends(xargs, params)
    except E1Error as err:
        raise ValueError(str(err)) from None


def _check_keys(xargs: Mapping) -> None:
    for key in xargs:
        if key == KEY:
            raise ConfigError(
                f"extra_args[{KEY!r}] is e1's engine's own wire (ids, not budgets)",
                hint=f"send {THINK_FIELD}, {SOLVE_FIELD} and {MODE_FIELD}",
            )
        if not isinstance(key, str) or key in KEYS or key == ROOM_FIELD or len(key) > 64:
            continue  # a key over 64 characters is no misspelling of one of 15
        if (close := _meant(key)) is not None:
            raise ConfigError(f"extra_args key {key[:40]!r} is not one of e1's", hint=f"did you mean {close!r}?")


def _meant(key: str) -> str | None:
    """The e1 key that ``key`` looks meant as (None: none): its case, width, spaces or dashes aside, a close
    misspelling, or a name that speaks of thinking, a solution or a budget (``max_thinking_tokens``)."""
    norm = unicodedata.normalize("NFKC", key).casefold().strip().replace("-", "_").replace(" ", "_")
    if norm in KEYS or norm == ROOM_FIELD:
        return norm
    close = _LOOKALIKES.get(norm) or next(iter(difflib.get_close_matches(norm, KEYS, n=1, cutoff=0.75)), None)
    words = (("think", THINK_FIELD), ("reason", THINK_FIELD), ("solution", SOLVE_FIELD), ("solve", SOLVE_FIELD))
    return (
        close
        or next((field for word, field in words if word in norm), None)
        or (f"{THINK_FIELD} and {SOLVE_FIELD}" if "budget" in norm else None)
    )


def _check_ends(xargs: Mapping, params) -> None:
    """A request that names its budget must end where e1 ends it: no ``ignore_eos`` (vLLM would decode on past
    the EOS e1 forces, and e1 forces EOS again each step, to the context's end), and room: ``max_tokens`` None
    (e1 ends the request) or at least the budget's least worst case (no forced marker counted), else vLLM
    would cut it silently."""
    if THINK_FIELD not in xargs or not mode_field(xargs.get(MODE_FIELD, "elastic")).bounded:
        return
    if params.ignore_eos:
        raise ConfigError(
            "ignore_eos=True would decode past the EOS that ends a budgeted request", hint="leave ignore_eos False"
        )
    max_tokens, mode = params.max_tokens, mode_field(xargs.get(MODE_FIELD, "elastic"))
    if max_tokens is None:
        return
    budget = Budget(parse_tokens(xargs[THINK_FIELD], THINK_FIELD), parse_tokens(xargs[SOLVE_FIELD], SOLVE_FIELD))
    least = mode.worst_case(budget, _NO_MARKERS)
    if max_tokens < least:
        raise ConfigError(
            f"max_tokens={max_tokens} would cut {THINK_FIELD}={budget.think} plus {SOLVE_FIELD}={budget.solve} "
            f"(they need at least {least} tokens)",
            hint="pass max_tokens=None: e1's processor ends each request at its budget",
        )


_module, _, _name = processor_name().partition(":")
_Served = getattr(importlib.import_module(_module), _name)  # serves either runner (V1 only before vLLM 0.32)


class VLLMBudgetProcessor(_Served):
    """e1's budgets per request for ``vllm.LLM(..., logits_processors=[VLLMBudgetProcessor])``: e1 serve's
    processor, admitting each request through :func:`check_request`."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        check_request(sampling_params)
