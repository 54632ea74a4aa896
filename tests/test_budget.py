"""Budget parsing: the accepted spellings and the refused ones."""

import pytest

from e1.budget import Budget, format_tokens, parse_tokens
from e1.errors import BudgetError


@pytest.mark.parametrize(
    "text,tokens",
    [("512", 512), ("1k", 1024), ("1.5k", 1536), ("2K", 2048), ("0", 0), (" 3k ", 3072), (".5k", 512), (700, 700)],
)
def test_accepted_spellings(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["-1", "1x", "k", "", "1.3k", "1e3", "1kk", "1m", "0.1", True, -5])
def test_refused_spellings(text):
    with pytest.raises(BudgetError):
        parse_tokens(text)


def test_budget_limits_and_display():
    assert Budget.parse("0", "1") == Budget(0, 1)
    assert Budget.parse("1.5k", "1k").total == 2560
    with pytest.raises(BudgetError, match="solve budget must be >= 1"):
        Budget.parse("1k", "0")
    assert str(Budget(1536, 1024)) == "1.5k+1k"
    assert format_tokens(500) == "500" and format_tokens(2048) == "2k"
