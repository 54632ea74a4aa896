"""Per-request budgets for the OpenAI-compatible server: parse, validate, and account.

A request names its budgets in vLLM's per-request extra args (``vllm_xargs``) or, as a
shorthand, at the top level of its JSON body; the server's ``--think/--solve/--mode`` are
the defaults. The same three fields reach e1's logits processor inside vLLM, which decodes
them with :class:`~e1.engine.row_state.RowState`; the HTTP layer replays each choice's token ids
through a fresh RowState to report per-phase counts — the same code that counts for ``e1 eval``.
Both build that RowState with :meth:`Served.state`: the mode's exit text as the served tokenizer's
ids and, for a grace window, its sentence-ending ids, as ``e1 eval`` decodes them. early-exit is
the exception: its trials need several requests per sample, which the middleware drives
(:mod:`e1.serve.rounds`); the processor alone refuses it.

    >>> defaults = ServeDefaults(think=1024, solve=512)
    >>> request_budget({"thinking_budget": "2k"}, defaults)
    RequestBudget(budget=Budget(think=2048, solve=512), mode=Mode('elastic'))
    >>> str(request_budget({"budget_mode": "elastic:exit=qwen:grace=32"}, defaults).mode)
    'elastic:exit=qwen:grace=32'
    >>> request_budget({"budget_mode": "none"}, defaults) is None   # served as a plain request
    True
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property

from e1.budget import MAX_TOKENS, Budget, parse_tokens
from e1.engine import Markers, Mode, ModeIds, RowState, build_state, exit_ids, mode_names, sentence_end_ids
from e1.errors import ConfigError
from e1.numeric import Number
from e1.settings import BUDGETS, mode_help, setting

THINK_FIELD, SOLVE_FIELD, MODE_FIELD = "thinking_budget", "solution_budget", "budget_mode"
FIELDS = (THINK_FIELD, SOLVE_FIELD, MODE_FIELD)
ROOM_FIELD = "budget_room"  # set by the middleware: the tokens the budget may need after the prompt
CONFIG_KEY = "e1"  # the server's defaults travel in vLLM's --additional-config under this key
# vllm_xargs[ROUNDS_FIELD] on each early-exit round e1's middleware sends: this process's secret, which the
# processor's admission check (same process: vLLM's API server) asks of any request carrying the rounds'
# raw settings, so that no client sends them on a route the middleware does not see (/invocations, ...)
ROUNDS_FIELD, ROUNDS_SECRET = "e1_rounds", secrets.token_hex(16)
_PLAIN = Budget(0, 1)  # mode none never reads its budget; RowState only needs one to count phases


@dataclass(frozen=True)
class ServeDefaults:
    """The server's settings: budgets for requests that name none (None: such requests are
    served plainly), the default mode, and marker overrides (None: the tokenizer's)."""

    think: int | None = setting(
        None,
        "Default thinking budget t (512, 1k, ...) for requests that name none.",
        BUDGETS,
        short="-t",
        shown=False,
        cli_type=str,
    )
    solve: int | None = setting(
        None,
        "Default solution budget s; give both or neither (neither: such requests are served plainly).",
        BUDGETS,
        short="-s",
        shown=False,
        cli_type=str,
    )
    mode: str = setting(
        "elastic",
        mode_help("Default mode", mode_names()) + " Served as in e1 eval, but for "
        "budget-forcing's wait=K; early-exit (DEER's recipe unless recipe=e1) runs in several requests "
        "per sample, not streamed (at most 64 trial answers per sample).",
        BUDGETS,
        complete="mode",
    )
    think_start: str | None = None  # the server's EngineSpec's (ServeConfig), for the processor to read
    think_end: str | None = None

    def __post_init__(self):
        for name in ("think", "solve"):  # "1k" from the command line, a whole number from a file or the JSON
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, parse_tokens(getattr(self, name), f"{name} budget"))
        if (self.think is None) != (self.solve is None):
            raise ConfigError("a default budget needs both --think and --solve", hint="pass both or neither")
        _servable(Mode.parse(self.mode))
        if self.think is not None:
            Budget(self.think, self.solve)

    def additional_config(self) -> str:
        """The JSON for vLLM's ``--additional-config`` (read back by :meth:`from_vllm_config`)."""
        return json.dumps({CONFIG_KEY: asdict(self)})

    @classmethod
    def from_vllm_config(cls, vllm_config) -> ServeDefaults:
        additional = getattr(vllm_config, "additional_config", None) or {}
        return cls(**additional.get(CONFIG_KEY, {})) if isinstance(additional, dict) else cls()


@dataclass(frozen=True)
class RequestBudget:
    budget: Budget
    mode: Mode


def _servable(mode: Mode) -> Mode:
    """``mode`` as this server decodes it (:meth:`Mode.served`: early-exit's trials bounded), or a
    ConfigError naming what cannot be served."""
    mode = mode.served()
    if mode.wait:
        raise ConfigError(
            f"mode {mode} cannot be served: replacing a natural end with 'Wait' needs a second call",
            hint="use budget-forcing (without wait) or elastic",
        )
    if mode.effort:
        raise ConfigError(
            f"mode {mode} cannot be served: effort= is a hosted vendor's setting",
            hint="e1 serve takes token budgets: thinking_budget and solution_budget",
        )
    return mode


def mode_field(value) -> Mode:
    """A request's ``budget_mode`` as this server decodes it; a ConfigError names the field."""
    try:
        return _servable(Mode.parse(value))
    except ConfigError as err:
        raise ConfigError(f"{MODE_FIELD}: {err.message}", hint=err.hint) from None


def request_budget(xargs: Mapping, defaults: ServeDefaults) -> RequestBudget | None:
    """The request's budget and mode, the server's defaults filling what it leaves out; None
    when it is served plainly (mode ``none``, or no budget given and no server default)."""
    mode = mode_field(xargs[MODE_FIELD]) if MODE_FIELD in xargs else _servable(Mode.parse(defaults.mode))
    think = xargs.get(THINK_FIELD, defaults.think)
    solve = xargs.get(SOLVE_FIELD, defaults.solve)
    if not mode.bounded or (think is None and solve is None):
        return None
    if think is None or solve is None:
        missing = THINK_FIELD if think is None else SOLVE_FIELD
        raise ConfigError(f"{missing} is missing and the server has no default", hint="send both budgets")
    return RequestBudget(Budget(parse_tokens(think, THINK_FIELD), parse_tokens(solve, SOLVE_FIELD)), mode)


def worst_case_tokens(budget: RequestBudget, markers: Markers, exit_ids: tuple[int, ...] = ()) -> int:
    """The most tokens a budgeted request can write: t + s, the forced markers, the mode's exit
    text (``exit_ids``) and grace window, and the EOS forced when the solution budget runs out."""
    worst = budget.mode.worst_case(budget.budget, markers, exit_ids)
    return worst + 1 if budget.mode.separate else worst


def check_context(budget: RequestBudget, markers: Markers, max_model_len: int, exit_ids: tuple[int, ...] = ()) -> None:
    """Refuse a budget that cannot fit the served context even for an empty prompt."""
    worst = worst_case_tokens(budget, markers, exit_ids) + budget.mode.trial_room(markers)
    if worst > max_model_len:
        raise ConfigError(
            f"{THINK_FIELD}={budget.budget.think} plus {SOLVE_FIELD}={budget.budget.solve} need up to {worst} "
            f"tokens, more than the served context of {max_model_len}",
            hint="send smaller budgets",
        )


def replay(
    budget: RequestBudget | None,
    markers: Markers,
    prompt_ids: Sequence[int],
    exit_ids: tuple[int, ...] = (),
    sentence_ends: frozenset[int] = frozenset(),
    room: int = sys.maxsize,
) -> RowState:
    """A fresh RowState for one choice (:func:`~e1.engine.row_engine.build_state` without a tokenizer: no
    stop pattern, no notes), fed its token ids as they arrive (``state.accept``); ``room``: the request's ``max_tokens``."""
    budget = budget or RequestBudget(_PLAIN, Mode("none"))
    return build_state(
        budget.mode,
        budget.budget,
        markers,
        markers.prompt_thinking(prompt_ids),
        room,
        ModeIds(exit_ids),
        None,
        sentence_ends,
    )


def feed(state: RowState, token_ids: Sequence[int]) -> None:
    """Accept vLLM's ``token_ids`` (a forced token comes back as sampled) until the state is done."""
    state.extend(token_ids)


def report(state: RowState, budget: RequestBudget | None) -> dict:
    """What a response's choice says about its budgets (``budget`` in the JSON); a plain
    request gets its phase counts too, with no budgets."""
    return {
        "thinking_tokens": state.think_tokens,
        "solution_tokens": state.solve_tokens,
        "forced_tokens": sum(state.forced),
        "thinking_forced": state.think_end == "budget",
        "thinking_end": state.think_end,
        "thinking_budget": budget.budget.think if budget else None,
        "solution_budget": budget.budget.solve if budget else None,
        "budget_mode": str(budget.mode) if budget else "none",
    }


def check_fields(xargs: Mapping) -> None:
    """Validate the budget fields a request carries, without the server's defaults (vLLM checks
    requests before they reach the engine, where the defaults live): each value must parse,
    and budgets come both or neither. The logits processor's check: early-exit never reaches it as
    a field (e1's middleware drives it in rounds, :mod:`e1.serve.rounds`), so there it is refused."""
    if MODE_FIELD in xargs:
        mode = mode_field(xargs[MODE_FIELD])
        if mode.trials:
            raise ConfigError(
                f"mode {mode} needs e1's middleware: each trial answer ends a request and the next "
                "continues from the real prefix, which one vLLM request cannot do",
                hint="send it to e1 serve (or add --middleware e1.serve.middleware.BudgetMiddleware)",
            )
    given = [field for field in (THINK_FIELD, SOLVE_FIELD) if field in xargs]
    if len(given) == 1:
        missing = SOLVE_FIELD if given == [THINK_FIELD] else THINK_FIELD
        raise ConfigError(
            f"{given[0]} needs {missing} too", hint="send both budgets (e1 serve's middleware fills the defaults)"
        )
    if given:
        Budget(parse_tokens(xargs[THINK_FIELD], THINK_FIELD), parse_tokens(xargs[SOLVE_FIELD], SOLVE_FIELD))
    room_field(xargs)


_ROOM = Number(int, min=1, max=MAX_TOKENS)


def room_field(xargs: Mapping) -> int | None:
    """The request's ``budget_room`` (the middleware sets it; a client may too), checked like any number."""
    return None if xargs.get(ROOM_FIELD) is None else _ROOM.check(xargs[ROOM_FIELD], ROOM_FIELD)


def check_room(xargs: Mapping, max_tokens: int | None) -> None:
    """Refuse a budget that does not fit after the prompt: vLLM has already cut ``max_tokens``
    to the context left after the prompt, so a smaller value than the budget's worst case
    (which the middleware asked for) means the prompt leaves too little room."""
    needed = room_field(xargs)
    if needed is not None and max_tokens is not None and max_tokens < needed:
        raise ConfigError(
            f"{THINK_FIELD}={xargs.get(THINK_FIELD)} plus {SOLVE_FIELD}={xargs.get(SOLVE_FIELD)} need up to {needed} "
            f"tokens, but the prompt leaves room for only {max_tokens} in the served context",
            hint="send smaller budgets or a shorter prompt",
        )


@dataclass(frozen=True)
class Served:
    """What the server knows of the served model: the HTTP layer (middleware) and the engine
    (logits processor) each load one the same way (:func:`load_served`), so both decode and count
    a request alike.

        served.state(budget, prompt_ids)       # the RowState that decodes, or replays, one choice
    """

    defaults: ServeDefaults
    tokenizer: object
    markers: Markers
    max_model_len: int

    def exit_ids(self, budget: RequestBudget | None) -> tuple[int, ...]:
        """The request mode's exit text as the served tokenizer's ids (as ``e1 eval`` forces it)."""
        return exit_ids(self.tokenizer, budget.mode.exit_text) if budget else ()

    @cached_property
    def sentence_end_ids(self) -> frozenset[int]:
        """The served tokenizer's sentence-ending ids, read at the first request with a grace window."""
        return sentence_end_ids(self.tokenizer)

    def state(self, budget: RequestBudget | None, prompt_ids: Sequence[int], room: int = sys.maxsize) -> RowState:
        if budget is None:
            return replay(None, self.markers, prompt_ids, room=room)
        # as e1 eval's engines build it (RowEngine.row_state)
        return build_state(
            budget.mode,
            budget.budget,
            self.markers,
            self.markers.prompt_thinking(prompt_ids),
            room,
            ModeIds.of(self.tokenizer, budget.mode, budget.budget),
            self.tokenizer,
            lambda: self.sentence_end_ids,
        )


def load_served(vllm_config) -> Served:
    """The served model's tokenizer and markers (from its own tokenizer, never hard-coded), and
    the server's defaults, from vLLM's config."""
    from e1.engine import generation_eos, load_tokenizer, resolve_markers

    model_config, defaults = vllm_config.model_config, ServeDefaults.from_vllm_config(vllm_config)
    tokenizer = load_tokenizer(model_config.tokenizer)
    markers = resolve_markers(tokenizer, defaults.think_start, defaults.think_end, generation_eos(model_config.model))
    return Served(defaults, tokenizer, markers, model_config.max_model_len)


def error_body(message: str, code: int = 400) -> dict:
    """An error reply's JSON, shaped as vLLM's OpenAI server shapes its own."""
    return {
        "error": {
            "message": message,
            "type": "BadRequestError" if code == 400 else "InternalServerError",
            "param": None,
            "code": code,
        }
    }
