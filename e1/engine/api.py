"""The API backend: a model behind an OpenAI-compatible server, through the same ``generate``.

    settings = ApiSettings("http://127.0.0.1:8000/v1", tokenizer="./my-model")
    engine = OpenAIEngine.load("my-model", settings, modes=[Mode()])
    completions = engine.generate(prompts, Budget(1024, 1024), Mode(), Sampling(seed=0), n=4, seeds=[7])

At load e1 asks the server which model it serves (and its context) and sends one probe carrying
e1's budget fields; a reply with a per-choice ``budget`` means the server decodes budgets itself
(``e1 serve``, or vLLM with e1's plug-ins); a plain one is asked whether it takes and returns token
ids (:mod:`e1.engine.api_probe`). How each mode then runs, and how exact it is (``token_exact``):

| server | prompts | mode | method | exact? |
|---|---|---|---|---|
| takes budgets | ``--tokenizer`` | every mode but ``wait=k`` | one request (the prompt as token ids) with ``thinking_budget``/``solution_budget``/``budget_mode``; the reply's token ids replayed through :class:`~e1.engine.row_state.RowState` and checked against its ``budget`` | token for token as the local engines |
| takes budgets | chat messages | the same | the same request on ``/v1/chat/completions``; counts from the reply's ``budget`` | counts and texts as the server decoded them |
| plain | ``--tokenizer`` | ``elastic``, ``budget-forcing`` (no ``wait``/``grace``) | two calls on ``/v1/completions``: thinking with ``max_tokens=t`` stopping at the end marker, then the solution (``max_tokens=s``) from prompt + thinking + (exit text) + marker; a prompt that closed thinking (Qwen3, thinking off) only the solution call | ids in and out (vLLM): token for token as the local engines; else exact in distribution up to the thinking re-tokenised at the seam, counts from ``usage`` (and a text-only server tokenises the prompt itself) |
| plain | ``--tokenizer`` | ``truncate``, ``none`` | one call, ``max_tokens`` = t + s (or ``--max-tokens``) | ids in and out: the reply's ids replayed, token for token; else counts from ``usage``, thinking tokenised with the tokenizer |
| plain | chat messages | ``truncate``, ``none`` | one call; thinking tokens from ``usage.completion_tokens_details.reasoning_tokens`` | refused per reply if the server does not report it |
| plain | chat messages | ``elastic``, ``budget-forcing`` | refused: a forced end marker needs a continuation of the prompt text | |

Every request carries a ``seed`` derived from e1's per-sample seed (as the vLLM backend derives
its own, so the same server gives the same samples on a rerun); ``concurrency`` requests are in
flight at once (:mod:`e1.engine.api_client`: retries, the reply journal that makes a resume send
no finished request twice). The API key is read from an environment variable only.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from e1.budget import Budget
from e1.engine.api_client import (Caller, ChatMessages, ReplyJournal, RequestError, check_report, chat_completion,
                                  reported_completion, row_task, run_rows)
from e1.engine.api_probe import BUDGET_SERVER, PLAIN_SERVER, exactness, probe_budgets, probe_token_ids, served_context
from e1.engine.backends import API_BACKENDS, BACKENDS, HOSTED_BACKENDS  # noqa: F401  (HOSTED_BACKENDS: for importers)
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.markers import DEFAULT_END, DEFAULT_START, PROMPT_CLOSED, PROMPT_OPEN, Markers
from e1.engine.replies import MODE_FIELD, SOLVE_FIELD, THINK_FIELD, Choice, Usage, bounded_client
from e1.engine.row_engine import RowEngine
from e1.engine.row_state import THINK
from e1.engine.api_settings import API_BACKEND, API_FLAGS, API_NUMBERS, KEY_ENVS, ApiSettings  # noqa: F401  (importers)
from e1.errors import ConfigError, redact

BUDGET_FIELDS, TWO_CALLS, ONE_CALL = "budget fields (one request)", "two calls", "one call"
ANSWER_TEXT = "Final Answer:"  # s1's answer prompt, as e1.engine.markers encodes it
