"""The options `e1 eval` and `e1 sweep` share: :class:`RunOptions`, built from the settings of the
configs an eval run holds (:func:`e1.cli.options.option_class`), and how they become an
:class:`~e1.eval.run.EvalConfig`.

    @with_options
    def eval_command(model: ModelOpt, options: RunOptions, out: OutOpt = Path("runs/eval")) -> None:
        config = options.eval_config(model=model, budgets=..., modes=..., n=1, out=out)
"""

from __future__ import annotations

from dataclasses import MISSING
from pathlib import Path

from e1.cli.options import option_class
from e1.data import PromptOptions
from e1.engine import API_FLAGS, API_NUMBERS, ApiSettings, EngineSpec, Sampling
from e1.eval import RunSettings, parse_ks
from e1.rewards import ScoringSpec
from e1.settings import declared

# every setting that `e1 eval` and `e1 sweep` share: the run's own, then its specs'
_RunSettings = option_class(
    "_RunSettings",
    RunSettings,
    Sampling,
    EngineSpec,
    ScoringSpec,
    PromptOptions,
    ApiSettings,
    defaults={"url": None, "ks": ""},
)


class RunOptions(_RunSettings):
    """The options of `e1 eval` and `e1 sweep` other than model, budgets, modes, n and --out: the
    settings of RunSettings (the run's own), Sampling, EngineSpec, ScoringSpec, PromptOptions and ApiSettings."""

    def settings(self, kind: type):
        """The ``kind`` (a settings dataclass) of these options; a setting left to be made when built
        (``--workers``) is left out."""
        values = {name: getattr(self, name) for name, (f, _) in declared(kind).items()}
        return kind(
            **{
                name: value
                for name, value in values.items()
                if value is not None or declared(kind)[name][0].default_factory is MISSING
            }
        )

    def includes(self, out: Path | None) -> tuple[str, ...]:
        """Load ``--include`` (on a resume, first checked against ``out``'s config.json: code it records
        that this command leaves out, or that changed since, is refused); their absolute paths."""
        from e1.data import load_includes

        return load_includes(self.include or (), out=out)

    def run_dir(self, out: Path | None, command: str, models: list[str]) -> Path:
        """``--out``, else a new folder per run: ``runs/<command>/MODEL-DATASETS-TIME``."""
        from e1.store import new_run_dir

        return out if out is not None else new_run_dir(Path("runs") / command, [*models, ",".join(self.datasets)])

    def api_settings(self):
        """The :class:`e1.engine.ApiSettings` of the --api-* options (None without --api-url, but
        for a hosted backend, whose endpoint is then the vendor's)."""
        from types import SimpleNamespace

        from e1.engine import HOSTED_BACKENDS
        from e1.numeric import check_numbers

        values = {name: getattr(self, name) for name in declared(ApiSettings)}
        check_numbers(SimpleNamespace(**values), API_NUMBERS, API_FLAGS)  # checked even without --api-url
        if self.url is None and self.backend not in HOSTED_BACKENDS:
            if self.tokenizer is not None or self.api_key_env is not None:
                from e1.errors import ConfigError

                raise ConfigError(
                    "--tokenizer and --api-key-env are for --backend openai",
                    hint="pass --backend openai --api-url URL, or leave them out",
                )
            return None
        return ApiSettings(**values, backend=self.backend if self.backend in HOSTED_BACKENDS else "openai")

    def eval_config(self, *, model: str, budgets, modes, n: int, out: Path):
        """The :class:`e1.eval.run.EvalConfig` of these options with a command's model, grid, n and --out."""
        from e1.eval import EvalConfig

        return EvalConfig(
            model=model,
            datasets=tuple(d.strip() for spec in self.datasets for d in spec.split(",") if d.strip()),
            budgets=tuple(budgets),
            modes=tuple(modes),
            n=n,
            out=out,
            batch_size=self.batch_size,
            limit=self.limit,
            data_dir=self.data_dir,
            sampling=self.settings(Sampling),
            engine=self.settings(EngineSpec),
            scoring=self.settings(ScoringSpec),
            api=self.api_settings(),
            prompt=self.settings(PromptOptions),
            ks=parse_ks(self.ks),
            report_to=self.report_to,
            include=self.includes(out),
        )
