"""Errors that reach users.

Library code raises an :class:`E1Error` subclass; the CLI turns it into one red line
(``message`` plus ``hint``) and a non-zero exit. ``E1_DEBUG=1`` shows the traceback.

    >>> str(BudgetError("bad think budget '1x'", hint="use 512, 1k, 1.5k"))
    "bad think budget '1x' (use 512, 1k, 1.5k)"
    >>> str(ConfigError("unknown mode 'trunc'", hint=did_you_mean("trunc", ["elastic", "truncate"])))
    "unknown mode 'trunc' (did you mean 'truncate'?)"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class E1Error(Exception):
    """Base class: a message saying what is wrong and a hint saying how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class BudgetError(E1Error):
    """A think/solve budget that cannot be parsed or is out of range."""


class ConfigError(E1Error):
    """Options or a config file that do not fit together."""


class DataError(E1Error):
    """A dataset that is unknown, missing, empty or malformed."""


class ModelError(E1Error):
    """A model or tokenizer that cannot be loaded or used."""


class MarkerError(ModelError):
    """Think markers that the tokenizer does not have."""


class ResultsError(E1Error):
    """A results directory that cannot be written or resumed."""


class RewardError(E1Error):
    """A reward that cannot be computed (unknown task, bad tests)."""


def did_you_mean(name: str, candidates: Iterable[str], listing: str = "choose one of") -> str:
    """The hint for an unknown ``name``: the closest candidates, else every candidate after ``listing``.

    >>> did_you_mean("token_mean", ["token-mean", "seq-mean"])
    "did you mean 'token-mean'?"
    >>> did_you_mean("xyz", ["train", "mask"], listing="known choices:")
    'known choices: train, mask'
    """
    names = [str(candidate) for candidate in candidates]
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"{listing} {', '.join(names)}"
