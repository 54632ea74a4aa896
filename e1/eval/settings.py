"""The settings of an evaluation run that are its own (not its engine's, sampling's, scoring's,
prompt's or API's), declared once (:mod:`e1.settings`): `e1 eval` and `e1 sweep` build their
options from them, and :class:`~e1.eval.run.EvalConfig` holds them. Light: --help reads it.

    >>> parse_ks("16, 4,1,4"), parse_ks("")
    ((1, 4, 16), ())
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from e1.errors import ConfigError
from e1.numeric import Number
from e1.settings import DATA, INCLUDE_HELP, OUTPUT, SCALE, numbers, setting


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What problems an eval run reads, how many rows it decodes at once, and what it reports."""

    datasets: tuple[str, ...] = setting(
        help="Registry names (see e1 data list) or files (.parquet, .jsonl, .json, .csv); repeat or comma-separate.",
        panel=DATA,
        short="-d",
        shown=False,
        complete="datasets",
    )
    batch_size: int = setting(
        64, "Sequences decoded together (bounds memory).", SCALE, number=Number(int, min=1, max=1_000_000)
    )
    limit: int | None = setting(
        None, "Only the first N problems of each dataset.", DATA, shown="all", number=Number(int, min=1, optional=True)
    )
    data_dir: Path | None = setting(
        None, "Where prepared datasets live.", DATA, path=True, shown="$E1_DATA_DIR or ~/.cache/e1/data"
    )
    # pass@k reported for each k, beside pass@1 and pass@n (the command line's "1,4,16" is parse_ks'd)
    ks: tuple[int, ...] = setting(
        (),
        "Also report pass@k for these k (comma-separated, each <= n), e.g. 1,4,16.",
        OUTPUT,
        flag="--k",
        shown="pass@1 and pass@n",
        cli_type=str,
    )
    # results also to: tensorboard | wandb | tensorboard,wandb (e1.report.reporting)
    report_to: str = setting(
        "none",
        "Also send the results to tensorboard | wandb | tensorboard,wandb: each cell's "
        "metrics and a samples table (WANDB_MODE=offline needs no network).",
        OUTPUT,
    )
    # the user's code (rewards, datasets, prompts, modes), absolute paths
    include: tuple[str, ...] = setting(
        (),
        f"{INCLUDE_HELP} Recorded in config.json with its fingerprint: a resume names it again, unchanged.",
        DATA,
        shown=False,
    )


RUN_NUMBERS = numbers(RunSettings)  # what each numeric setting may hold (e1.numeric)


def parse_ks(text: str) -> tuple[int, ...]:
    """``--k 1,4,16`` as sorted distinct whole numbers (their range is checked by EvalConfig)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    from e1.names import DIGITS

    if not all(DIGITS.matches(part) and len(part) <= 18 for part in parts):
        raise ConfigError(f"--k {text!r}: give whole numbers, comma-separated", hint="e.g. --k 1,4,16")
    return tuple(sorted({int(part) for part in parts}))
