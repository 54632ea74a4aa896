"""What the demo must show, read off the results it wrote (never asserted in code).

``claims.json`` holds fractions (accuracies, their gaps, the thinking cut) and mean thinking in
tokens, each claim naming its ``unit``; the markdown table shows the fractions in percent.

Let m be the base model's median unconstrained thinking length on the test split.

1. At think budget ≈ m/2 (elastic), E1's accuracy is at least 10 points above the base's.
2. At ≈ m, at least 25 points above.
3. Unconstrained, E1's mean thinking is at least 25% below the base's, accuracy within 3 points.
4. For the base model, elastic beats truncate at every equal total budget of the grid.
5. At the tightest think budget of the grid (elastic), E1 is above the length-penalty baseline
   (GRPO with the cosine length reward, rollouts not cut): the mean over test problems of
   E1's accuracy minus the baseline's on the same problem, with a 95% paired bootstrap interval
   (problems resampled, :func:`e1.report.metrics.bootstrap_interval`) whose lower end is > 0.

    claims = check_claims(Path("runs/demo"), base, e1, median, baseline=cosine)
    print(claims_markdown(claims))
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from e1.errors import ConfigError
from e1.store import read_parquet

if TYPE_CHECKING:
    import pandas as pd


def _accuracy(frame: pd.DataFrame) -> float:
    return float(frame["correct"].mean()) if len(frame) else float("nan")


def check_claims(out: Path, base: Path, e1: Path, median: float, baseline: Path | None = None) -> list[dict]:
    """Read the claims off ``out``'s results, write them to ``out/claims.json`` and return them;
    without ``baseline`` the claim against the length-penalty model is left out."""
    from e1.store import write_json

    curves = read_parquet(out / "curves" / "curves.parquet")
    models = {"base": str(base), "e1": str(e1)}
    # the curves' model column holds the model as given to the sweep
    at = {name: curves[curves["model"] == path] for name, path in models.items()}
    claims = _budget_claims(at, median) + _unconstrained_claims(out, models) + [_elastic_over_truncate(at["base"])]
    if baseline is not None:
        claims.append(_against_baseline(out, str(e1), str(baseline)))
    write_json({"median_think": median, "claims": claims}, out / "claims.json")
    return claims


def _budget_claims(at: dict[str, pd.DataFrame], median: float) -> list[dict]:
    """E1 above base in elastic mode at half the base's median thinking and at the median."""
    claims = []
    for fraction, margin in ((0.5, 0.10), (1.0, 0.25)):
        think = max(1, round(fraction * median))
        acc = {
            name: float(frame[(frame["mode"] == "elastic") & (frame["think_budget"] == think)]["accuracy"].mean())
            for name, frame in at.items()
        }
        claims.append(
            _claim(
                f"elastic t={think} (≈{fraction:g}·m): E1 − base ≥ {100 * margin:g} points",
                acc["base"],
                acc["e1"],
                acc["e1"] - acc["base"],
                acc["e1"] - acc["base"] >= margin,
            )
        )
    return claims


def _unconstrained_claims(out: Path, models: dict[str, str]) -> list[dict]:
    """Without a budget: E1 thinks at least 25% less than base, at an accuracy within 3 points."""
    free = {name: read_parquet(out / "eval" / f"{name}-none" / "samples.parquet") for name in models}
    think = {name: float(frame["think_tokens"].mean()) for name, frame in free.items()}
    acc = {name: _accuracy(frame) for name, frame in free.items()}
    cut = 1 - think["e1"] / think["base"] if think["base"] else float("nan")
    return [
        _claim(
            "unconstrained: E1 mean thinking ≥ 25% below base",
            think["base"],
            think["e1"],
            cut,
            cut >= 0.25,
            unit="tokens",
        ),
        _claim(
            "unconstrained: accuracy within 3 points",
            acc["base"],
            acc["e1"],
            acc["e1"] - acc["base"],
            abs(acc["e1"] - acc["base"]) <= 0.03,
        ),
    ]


def _elastic_over_truncate(base: pd.DataFrame) -> dict:
    """The base model's curves: elastic above truncate at every total budget both were run at."""
    base_curves = base.assign(total=base["think_budget"] + base["solve_budget"])
    elastic = base_curves[base_curves["mode"] == "elastic"].set_index("total")["accuracy"]
    truncate = base_curves[base_curves["mode"] == "truncate"].set_index("total")["accuracy"]
    common = sorted(set(elastic.index) & set(truncate.index))
    gaps = [float(elastic[t] - truncate[t]) for t in common]
    gap = min(gaps) if gaps else None
    return _claim(
        f"base: elastic > truncate at every equal total budget ({len(common)} budgets)",
        gap,
        None,
        gap,
        bool(gaps) and gap > 0,
    )


def paired_difference(samples: pd.DataFrame, model: str, other: str) -> dict:
    """``model`` minus ``other`` over the problems both answered: per problem the mean correctness
    of its samples, then the mean over problems and its 95% paired bootstrap interval."""
    from e1.report import bootstrap_interval

    per_problem = samples.pivot_table(index="problem_id", columns="model", values="correct", aggfunc="mean")
    pair = per_problem.reindex(columns=[model, other]).dropna()  # [P, 2]
    difference = pair[model] - pair[other]  # [P]
    low, high = bootstrap_interval(difference.to_numpy())
    return {
        "accuracy": float(pair[model].mean()),
        "other_accuracy": float(pair[other].mean()),
        "difference": float(difference.mean()),
        "ci": (low, high),
        "problems": len(pair),
    }


def _against_baseline(out: Path, e1: str, baseline: str) -> dict:
    samples = read_parquet(out / "curves" / "samples.parquet")
    elastic = samples[samples["mode"] == "elastic"]
    think = int(elastic["think_budget"].min())  # the tightest budget of the grid
    paired = paired_difference(elastic[elastic["think_budget"] == think], e1, baseline)
    low = paired["ci"][0]
    return _claim(
        f"elastic t={think} (tightest): E1 > cosine-length GRPO, paired 95% CI above 0 ({paired['problems']} problems)",
        paired["other_accuracy"],
        paired["accuracy"],
        paired["difference"],
        bool(low > 0),
        ci=paired["ci"],
        against="cosine-length GRPO",
    )


def _claim(
    claim: str,
    base: float | None,
    e1: float | None,
    value: float | None,
    passed: bool,
    unit: str = "fraction",
    ci: tuple[float, float] | None = None,
    against: str = "base",
) -> dict:
    """One row of claims.json. ``value`` (the measured gap or cut) is a fraction, ``ci`` its 95%
    interval where one is claimed; ``base`` (the model named by ``against``) and ``e1`` are in
    ``unit``: a fraction (accuracy) or tokens (mean thinking)."""

    def rounded(number, digits):
        return None if number is None else round(float(number), digits)

    digits = 1 if unit == "tokens" else 4
    row = {
        "claim": claim,
        "unit": unit,
        "against": against,
        "base": rounded(base, digits),
        "e1": rounded(e1, digits),
        "value": rounded(value, 4),
        "passed": bool(passed),
    }
    return row | ({"ci_low": rounded(ci[0], 4), "ci_high": rounded(ci[1], 4)} if ci is not None else {})


def claims_markdown(claims: list[dict], median: float, seconds: float | None = None) -> str:
    """The claims as a markdown table; fractions are shown in percent (points)."""

    def cell(value, unit="fraction"):
        if value is None:
            return ""
        return f"{value:g}" if unit == "tokens" else f"{round(100 * value, 1):g}"

    lines = [
        f"Base model's median unconstrained thinking: m = {median:g} tokens."
        + (f" Whole demo: {seconds / 60:.1f} min." if seconds else ""),
        "",
        "| claim | base (or baseline) | E1 | measured [95% CI] | holds |",
        "|---|---|---|---|---|",
    ]
    for claim in claims:
        unit = claim["unit"]
        measured = cell(claim["value"])
        if claim.get("ci_low") is not None:
            measured += f" [{cell(claim['ci_low'])}, {cell(claim['ci_high'])}]"
        lines.append(
            f"| {claim['claim']} | {cell(claim['base'], unit)} | {cell(claim['e1'], unit)} | {measured} | "
            f"{'yes' if claim['passed'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- demo-results:begin -->", "<!-- demo-results:end -->"


def check_readme(readme: Path) -> None:
    """``--readme`` is an existing, writable file with the demo markers: checked before the demo
    runs, not after minutes of training."""
    import os

    readme = Path(readme)
    if readme.is_dir():
        raise ConfigError(f"--readme {readme} is a folder", hint="pass the README file itself, e.g. README.md")
    if not readme.is_file():
        where = "its folder does not exist" if not readme.parent.is_dir() else "no such file"
        raise ConfigError(f"--readme {readme}: {where}", hint="pass an existing README.md")
    if not os.access(readme, os.R_OK | os.W_OK):
        raise ConfigError(f"--readme {readme} is not writable", hint="pass a README you can write to")
    try:
        text = readme.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"--readme {readme}: cannot read it ({err})", hint="pass a text README.md") from None
    if BEGIN not in text or END not in text:
        raise ConfigError(
            f"--readme {readme} has no demo markers", hint=f"add the lines {BEGIN} and {END} where the table goes"
        )


def update_readme(readme: Path, block: str) -> bool:
    """Replace the text between the demo markers in ``readme``; False if the markers are missing."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{block}{END}{tail}")
    return True
