"""Speculative decoding under budgets: the ``--speculative`` setting, its one gate, and which modes it keeps exact.

    >>> parse_drafter("ngram:k=3:max=4")
    Drafter(method='ngram', tokens=3, lookup_max=4, lookup_min=1)
    >>> parse_drafter("ngram:k=3:max=4").vllm_config()
    {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 4, 'prompt_lookup_min': 1}
    >>> parse_drafter("") is None
    True
    >>> parse_drafter("eagle")
    Traceback (most recent call last):
    e1.errors.ConfigError: --speculative 'eagle': unknown drafter (only ngram runs under e1's budgets: EAGLE and MTP were not run here)

How a budget stays exact with a drafter. vLLM loads no custom logits processor beside a drafter on
runner V1 (vllm 0.32 ``vllm/v1/sample/logits_processor/__init__.py:207-210``, ``build_logitsprocs``
raises "Custom logits processors are not supported when speculative decoding is enabled"), and e1's
runner V2 processor follows one committed token per request and step (docs/backends.md says why). So
with a drafter e1 forces nothing through the logits: each request ends where the row's
:class:`~e1.engine.row_state.RowState` could next force a token (``max_tokens`` =
:meth:`~e1.engine.row_state.RowState.free_run`) or at an id that changes its phase (``stop_token_ids`` =
``phase_ids``: EOS, the end marker's last id), e1 appends the forced ids itself, and the row continues
in a new request from prompt + its ids (a prefix-cache hit). vLLM's scheduler appends a step's
accepted tokens one at a time and drops the rest at the first stop or at ``max_tokens``
(``vllm/v1/core/sched/scheduler.py:2501-2509``, ``check_stop`` in ``vllm/v1/core/sched/utils.py:98-119``),
whatever the drafter proposed and on either runner: no drafted token crosses a forced position.

Modes whose rules act on the logits at every thinking step keep their one-line refusal
(:func:`drafted_refusal`): soft's bias, a ``stop=`` pattern, a grace window, early-exit's trials.
"""

from __future__ import annotations

from dataclasses import dataclass

from e1.errors import ConfigError
from e1.names import Name, shown
from e1.numeric import Number

METHODS = ("ngram",)
# option -> (Drafter field, its bounds): vLLM's ngram drafter proposes k ids from the longest earlier
# match of the last 'min'..'max' ids (vllm/config/speculative.py: prompt_lookup_min/max)
OPTIONS = {
    "k": ("tokens", Number(int, min=1, max=16, hint="1 to 16 drafted ids per step, e.g. k=4")),
    "max": ("lookup_max", Number(int, min=1, max=64, hint="the longest n-gram matched, 1 to 64")),
    "min": ("lookup_min", Number(int, min=1, max=64, hint="the shortest n-gram matched, 1 to max")),
}
_KEY = Name(r"[a-z]{1,8}", "an option name")
_VALUE = Name(r"[0-9]{1,3}", "a whole number")
HELP = "ngram[:k=4][:max=4][:min=1]"


@dataclass(frozen=True)
class Drafter:
    """vLLM's drafter and its settings: ``tokens`` drafted ids per step, n-grams of ``lookup_min`` to ``lookup_max`` ids."""

    method: str = "ngram"
    tokens: int = 4
    lookup_max: int = 4
    lookup_min: int = 1

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(
                f"--speculative {self.method!r}: unknown drafter",
                hint="only ngram runs under e1's budgets: EAGLE and MTP were not run here",
            )
        for key, (name, number) in OPTIONS.items():
            number.check(getattr(self, name), f"--speculative {key}")
        if self.lookup_min > self.lookup_max:
            raise ConfigError(
                f"--speculative min={self.lookup_min} is above max={self.lookup_max}", hint="give min <= max"
            )

    def vllm_config(self) -> dict:
        """``vllm.LLM(speculative_config=...)``."""
        return {
            "method": self.method,
            "num_speculative_tokens": self.tokens,
            "prompt_lookup_max": self.lookup_max,
            "prompt_lookup_min": self.lookup_min,
        }


def parse_drafter(text: str | None) -> Drafter | None:
    """The gate of ``--speculative``: ``''`` or ``none`` is no drafter, else ``ngram`` and its options,
    each named once, as a :class:`Drafter` (a one-line ConfigError otherwise)."""
    if text is None or text in ("", "none"):
        return None
    if not isinstance(text, str) or len(text) > 64:
        raise ConfigError("--speculative is too long or not text", hint=HELP)
    method, *parts = text.split(":")
    values: dict[str, int] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not _KEY.matches(key) or key not in OPTIONS or key in values or not _VALUE.matches(value):
            raise ConfigError(f"--speculative {shown(text)}: cannot read {shown(part)}", hint=HELP)
        values[key] = int(value)
    if method not in METHODS:
        raise ConfigError(
            f"--speculative {shown(method)}: unknown drafter",
            hint="only ngram runs under e1's budgets: EAGLE and MTP were not run here",
        )
    fields = {OPTIONS[key][0]: value for key, value in values.items()}
    if "lookup_max" not in fields and fields.get("lookup_min", 1) > Drafter.lookup_max:
        fields["lookup_max"] = fields["lookup_min"]
    return Drafter(method, **fields)


def drafted_refusal(mode) -> str | None:
    """Why ``mode`` cannot keep its budget exact with a drafter (None: it can). A request can end
    where a token is due and e1 can append it; it cannot change the logits of each drafted step."""
    from e1.engine.modes import Mode

    if mode.trials:
        return "its trials decode answers and roll them back"
    if type(mode).end_bias is not Mode.end_bias:
        return "its bias changes the logits at every thinking step"
    if mode.stop:
        return "its stop pattern reads every thinking token"
    if mode.grace:
        return "its grace window waits, token by token, for a sentence end"
    return None


def check_drafted(mode) -> None:
    """Refuse, in one line, a mode a drafter would make inexact."""
    if (reason := drafted_refusal(mode)) is not None:
        raise ConfigError(
            f"--mode {mode} cannot run with --speculative: {reason}",
            hint="leave --speculative out, or use elastic, budget-forcing, truncate or none",
        )
