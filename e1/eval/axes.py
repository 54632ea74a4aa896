"""A sweep's axes from the command line's lists: budgets, modes and effort levels.

    budgets = budget_grid(think="0,512,1k", solve="1k")          # every think × solve
    modes = effort_grid(parse_modes("none"), "low,high", "effort")  # none:effort=low, none:effort=high
    modes, budgets = sweep_axes("tokens", think="512,1k")          # what `e1 sweep` asks for

Every list is comma-separated; an empty list or item is refused in one line, duplicates collapse
(order kept).
"""

from __future__ import annotations

from e1.budget import Budget, parse_tokens
from e1.engine import Mode
from e1.errors import ConfigError

BUDGET_AXES = ("tokens", "effort")
DEFAULT_THINK, DEFAULT_SOLVE = "0,512,1k,2k,3k", "1k"


def _items(text: str, what: str, split=lambda text: [item.strip() for item in str(text).split(",")]) -> list[str]:
    items = split(text)
    if not any(items):
        raise ConfigError(f"empty {what} list", hint=f"give at least one {what}, comma-separated")
    if not all(items):
        raise ConfigError(f"empty item in {what} list {text!r}", hint="remove the stray comma")
    return items


def _unique(values) -> tuple:
    return tuple(dict.fromkeys(values))


def budget_grid(think: str | None = None, solve: str | None = None, pairs: str | None = None) -> tuple[Budget, ...]:
    """The budgets of a sweep: every ``think`` × ``solve`` combination, or explicit ``t+s`` pairs.

    >>> [str(b) for b in budget_grid(think="0,512,1k", solve="1k")]
    ['0+1k', '0.5k+1k', '1k+1k']
    >>> budget_grid(pairs="512+1k, 2k+512")
    (Budget(think=512, solve=1024), Budget(think=2048, solve=512))
    """
    if pairs is not None:
        if think is not None or solve is not None:
            raise ConfigError(
                "--budgets cannot be combined with --think/--solve",
                hint="give either T+S pairs with --budgets, or lists with --think and --solve",
            )
        return _unique(_pair(item) for item in _items(pairs, "budget"))
    thinks = [
        parse_tokens(t, "think budget") for t in _items(DEFAULT_THINK if think is None else think, "think budget")
    ]
    solves = [
        parse_tokens(s, "solve budget") for s in _items(DEFAULT_SOLVE if solve is None else solve, "solve budget")
    ]
    return _unique(Budget(t, s) for s in solves for t in thinks)


def axis_budgets(
    budget_axis: str, think: str | None, solve: str | None, pairs: str | None, max_tokens: int
) -> tuple[Budget, ...]:
    """The budgets of a sweep's axis: :func:`budget_grid` on ``tokens``; on ``effort`` the one
    ``Budget(0, max_tokens)`` (the level sets the thinking; ``--max-tokens`` caps the reply)."""
    if budget_axis != "effort":
        return budget_grid(think, solve, pairs)
    if think is not None or solve is not None or pairs is not None:
        raise ConfigError(
            "--budget-axis effort takes no --think/--solve/--budgets",
            hint="the effort levels set the thinking; --max-tokens caps each reply",
        )
    return (Budget(0, max_tokens),)


def _pair(text: str) -> Budget:
    think, plus, solve = text.partition("+")
    if not plus or not think.strip() or not solve.strip():
        raise ConfigError(f"invalid budget pair {text!r}", hint="write think+solve, e.g. 512+1k,1k+1k")
    return Budget.parse(think.strip(), solve.strip())


def parse_modes(text: str) -> tuple[Mode, ...]:
    """``"elastic,truncate,budget-forcing:wait=2"`` → modes (duplicates dropped, order kept)."""
    return _unique(Mode.parse(item) for item in _items(text, "mode", Mode.split_list))


def effort_grid(modes: tuple[Mode, ...], efforts: str | None, budget_axis: str = "tokens") -> tuple[Mode, ...]:
    """The modes of a sweep's budget axis: as given on ``tokens``; on ``effort``, each mode (all
    ``none``) once per level.

    >>> [str(m) for m in effort_grid((Mode("none"),), "low,high", "effort")]
    ['none:effort=low', 'none:effort=high']
    """
    if budget_axis not in BUDGET_AXES:
        from e1.errors import did_you_mean

        raise ConfigError(f"unknown --budget-axis {budget_axis!r}", hint=did_you_mean(budget_axis, BUDGET_AXES))
    if budget_axis == "tokens":
        if efforts is not None:
            raise ConfigError(
                "--efforts needs --budget-axis effort", hint="pass --budget-axis effort --efforts low,high"
            )
        return modes
    if efforts is None:
        raise ConfigError("--budget-axis effort needs --efforts", hint="e.g. --efforts low,medium,high")
    other = next((mode for mode in modes if not mode.takes("effort") or mode.effort), None)
    if other is not None:
        raise ConfigError(
            f"--budget-axis effort sets the effort of mode none, not of {other}",
            hint="leave out --modes (or pass --modes none)",
        )
    levels = _unique(item.lower() for item in _items(efforts, "effort level"))
    return _unique(mode.replace(effort=level) for mode in modes for level in levels)


def sweep_axes(
    budget_axis: str = "tokens",
    modes: str | None = None,
    efforts: str | None = None,
    think: str | None = None,
    solve: str | None = None,
    pairs: str | None = None,
    max_tokens: int = 0,
) -> tuple[tuple[Mode, ...], tuple[Budget, ...]]:
    """The modes and budgets of a sweep as `e1 sweep` takes them: ``modes`` (default ``elastic``;
    ``none`` on the effort axis) through :func:`effort_grid`, budgets through :func:`axis_budgets`."""
    grid_modes = effort_grid(
        parse_modes(modes or ("none" if budget_axis == "effort" else "elastic")), efforts, budget_axis
    )
    return grid_modes, axis_budgets(budget_axis, think, solve, pairs, max_tokens)
