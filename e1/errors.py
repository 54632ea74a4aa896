"""Errors that reach users.

Library code raises an :class:`E1Error` subclass; the CLI turns it into one red line
(``message`` plus ``hint``) and a non-zero exit. ``E1_DEBUG=1`` shows the traceback.

    >>> str(BudgetError("bad think budget '1x'", hint="use 512, 1k, 1.5k"))
    "bad think budget '1x' (use 512, 1k, 1.5k)"
"""

from __future__ import annotations


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


def did_you_mean(name: str, candidates) -> str:
    """A hint naming the closest candidates to ``name``, else all of them."""
    import difflib

    candidates = list(candidates)
    close = difflib.get_close_matches(str(name), candidates, n=3, cutoff=0.5)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"choose one of {', '.join(candidates)}"
