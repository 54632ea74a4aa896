"""Evaluation under budgets: datasets → prompts → engine → rewards → samples + summary.

    config = EvalConfig(model="./my-model", datasets=("aime",), budgets=(Budget(1024, 1024),))
    samples, summary = evaluate(config)

Resumable: samples already stored in ``out`` are skipped. Each finished batch is appended
once, as its own part (:mod:`e1.store.samples`; the cost of a write does not grow with the
run), and the parts are compacted into ``samples.parquet`` at the end, so a kill at any moment
loses at most the batches in flight and a rerun neither redoes nor duplicates a sample. A
batch is scored in a background thread while the next one generates (:mod:`e1.eval.overlap`).
Under torchrun the ranks share the work (:mod:`e1.eval.distributed`). Metrics follow the paper
(accuracy = avg@n: mean correctness over all samples) plus the unbiased pass@k estimator;
every rate is a fraction in [0, 1] (tables show percent).

What loads the model is an :class:`~e1.engine.spec.EngineSpec` (``config.engine``); how answers
are scored a :class:`~e1.rewards.scoring.ScoringSpec` (``config.scoring``): code problems a batch at
a time in the sandbox, ``workers`` programs at once, each test limited to ``test_time_limit_s``; a
sample's row records the fraction of tests passed and the first failure. Training shares both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from e1 import __version__
from e1.budget import Budget
from e1.data import PromptOptions, record_includes
from e1.engine import ApiSettings, EngineSpec, Mode, Sampling, api_identity, check_api
from e1.errors import ConfigError, redact
from e1.eval.generation import _batches, _generate_and_score
from e1.eval.grid import check_grid
from e1.numeric import Number, check_numbers
from e1.report import NullProgress, check_trackers, parse_report_to, report_results, summarize
from e1.rewards import ScoringSpec, check_tasks
from e1.eval.settings import RUN_NUMBERS, RunSettings, parse_ks
from e1.settings import record, spec
from e1.store import (
    CONFIG,
    FINGERPRINTS,
    MODE_FORMAT,
    MODE_FORMAT_KEY,
    SAMPLE_KEY,
    SUMMARY,
    check_datasets,
    check_run_dir,
    mode_format,
    model_identity,
)

# settings that make two runs' samples comparable; a run directory refuses a different value
API_REPLIES = "api-replies.jsonl"  # --backend openai: replies as they arrive (e1.engine.api.client)
RUN_IDENTITY = (
    "model",
    "n",
    "sampling",
    "think_start",
    "think_end",
    "max_tests",
    "test_time_limit_s",
    "share_prefixes",
    "prompt",
)


# what each numeric setting may hold (e1.numeric); the engine's and the scoring's are checked by their specs
EVAL_NUMBERS = {"n": Number(int, min=1, max=1_000_000), **RUN_NUMBERS}


@dataclass(frozen=True)
class EvalConfig(RunSettings):
    """One evaluation: a model on datasets over budgets × modes, ``n`` samples per problem, into ``out``.
    The settings named in :data:`RUN_IDENTITY` must match for a run directory to be resumed. The run's
    own settings (datasets, batch_size, limit, data_dir, ks, report_to, include: keyword-only) are
    :class:`~e1.eval.settings.RunSettings`'."""

    model: str
    budgets: tuple[Budget, ...] = (Budget(1024, 1024),)
    modes: tuple[Mode, ...] = (Mode(),)
    n: int = 1
    sampling: Sampling = field(default_factory=Sampling)
    out: Path = Path("runs/eval")
    engine: EngineSpec = spec(factory=EngineSpec, flat=True)  # backend, dtype, device, vLLM settings, think markers
    scoring: ScoringSpec = spec(factory=ScoringSpec, flat=True)  # code: sandbox, workers, per-test time, max tests
    share_prefixes: bool = False  # one trajectory per sample serves every budget and mode (e1.eval.shared)
    prompt: PromptOptions = field(default_factory=PromptOptions)  # system prompt, template kwargs, stated budget
    api: ApiSettings | None = None  # --backend openai: the server (model is then its served name)

    def __post_init__(self):
        if isinstance(self.ks, str):  # the command line's --k 1,4,16
            object.__setattr__(self, "ks", parse_ks(self.ks))
        if not self.datasets:
            raise ConfigError("no dataset given", hint="pass --datasets NAME_OR_FILE (see `e1 data list`)")
        check_numbers(
            self, EVAL_NUMBERS, {name: "--" + name.removesuffix("_s").replace("_", "-") for name in EVAL_NUMBERS}
        )
        for k in self.ks:
            Number(int, min=1, max=self.n, hint=f"pass@k needs k <= n ({self.n} samples per problem)").check(k, "--k")
        if self.share_prefixes and self.prompt.budget:
            raise ConfigError(
                "a budget stated in the prompt makes each cell's prompt differ: prefixes cannot be shared",
                hint="sweep with --independent (e1 sweep does so by itself)",
            )
        check_api(self.engine.backend, self.api, self.modes)
        parse_report_to(self.report_to)

    def to_json(self) -> dict:
        data = record(self)  # the engine's and the scoring's settings flat, beside the run's own
        data["budgets"] = [asdict(b) for b in self.budgets]
        data["modes"] = [str(m) for m in self.modes]
        data[MODE_FORMAT_KEY] = MODE_FORMAT  # how these texts read (e1.store.mode_format)
        data["out"], data["data_dir"] = str(self.out), self.data_dir and str(self.data_dir)
        # what the model is, however it was typed (behind an API: the URL, served name and tokenizer)
        data["model_identity"] = api_identity(self.model, self.api) if self.api else model_identity(self.model)
        if self.api is not None and self.api.url:  # a key in the URL (userinfo, query) is never written
            data["api"]["url"] = redact(self.api.url)
        return record_includes(data)  # with what each include was; config.json stays as it was without one


def evaluate(config: EvalConfig, engine=None, progress=None, group=None, grow: bool = False):
    """Run (or resume) an evaluation; returns (samples, summary) DataFrames, also written to ``config.out``.

    Holds the run directory (:func:`e1.store.lock.run_lock`) for the duration. Under torchrun every
    rank calls this; ranks share the work (:mod:`e1.eval.distributed`) and only rank 0 gets the
    frames (the others get ``(None, None)``). ``grow``: ``config`` may hold more cells than the
    folder (a sweep grown by :func:`e1.eval.grid.grown`); without it another grid is refused.
    """
    from e1.eval.distributed import current_group, group_lock

    group = group or current_group(eval_tp(config), config.engine.device)
    check_eval_dir(config, model=engine is None, grow=grow)
    with group_lock(Path(config.out), "e1 eval", group):
        return _evaluate(config, engine, progress or NullProgress(), group)


def check_eval_dir(config: EvalConfig, model: bool = True, grow: bool = False, fingerprints: dict | None = None):
    """Every check of an eval run's folder that comes before its first write: the includes (each as its
    record says), --out and (``model``) the model, the run's identity and grid (``grow``: a grown sweep's
    cells), and with ``fingerprints`` (:func:`dataset_fingerprints`) its datasets' content. Returns the
    folder's record (None for a new one)."""
    from e1.data import load_includes

    load_includes(config.include, out=config.out)  # the command line loaded them already; a library caller may not have
    preflight(config, model=model)
    previous = check_run_dir(Path(config.out), config.to_json(), RUN_IDENTITY, kind="eval")
    check_grid(Path(config.out), previous, config.to_json(), grow=grow)
    if fingerprints is not None:
        check_datasets(Path(config.out), fingerprints)
    return previous


def dataset_fingerprints(config: EvalConfig) -> dict[str, str]:
    """Each of ``config``'s datasets' fingerprint (what :func:`e1.store.check_datasets` compares)."""
    return _load_datasets(config)[1]


def _evaluate(config: EvalConfig, engine, progress, group):
    from e1.store import SampleStore, write_json, write_parquet

    out, ranks = Path(config.out), group.ranks
    datasets, fingerprints = _load_datasets(config)
    record = {
        **config.to_json(),
        "kind": "eval",
        "e1_version": __version__,
        FINGERPRINTS: check_datasets(out, fingerprints),
    }
    store = SampleStore(out, writer=ranks.rank, legacy=Mode.legacy)
    if ranks.main:
        upgrade_run(out, store)
    group.barrier()  # an old run's labels are today's before any rank lists its work
    todo = _pending(datasets, store.keys(), config)
    group.barrier()  # every rank listed the same work before any rank writes
    if todo:
        _check_sandbox(todo, config)  # seconds, not after the model has loaded
        if engine is None:
            with progress.stage(f"loading {config.model}"):
                engine = load_engine_for(config, ranks)
        if ranks.main:
            write_json(
                {**record, "markers": _marker_info(engine), **_api_info(engine, config), **_weights_info(engine)},
                out / CONFIG,
            )
        batches = ranks.share(_batches(todo, config))  # whole generate calls: each rank its own
        wanted = sum(map(len, datasets.values())) * len(config.modes) * len(config.budgets) * config.n
        _generate_and_score(
            engine,
            batches,
            config,
            store if ranks.writer else None,
            progress,
            kept=max(0, wanted - len(todo) * config.n),
        )
        if config.api is not None:
            engine.finish_run()  # every reply is in the store now
    elif ranks.main:
        _record_datasets(out, record)
    group.barrier()  # every part is written
    samples = summary = None
    if ranks.main:
        samples = _wanted_rows(store.compact(), datasets, config)
        summary = summarize(samples, ks=config.ks)
        write_parquet(summary, out / SUMMARY)
        report_results(parse_report_to(config.report_to), out, summary, samples, record)
    group.barrier()  # nobody leaves (and starts another run) before the results are complete
    return samples, summary


def upgrade_run(out: Path, store) -> None:
    """A run directory written before today's mode texts (:func:`e1.store.mode_format`) or before its
    ``think_end`` vocabulary was recorded (:mod:`e1.store.think_ends`) is rewritten to today's once, before
    anything is added to it, so that no folder holds two: its samples first, then its ``config.json``
    (modes and format). Its texts are :meth:`Mode.legacy`'s rewrite, as every reader reads them."""
    from e1.store import write_json

    store.upgrade()  # labels and think_end as every reader reads them; nothing when both are today's
    if mode_format(out) >= MODE_FORMAT:
        return
    if (out / CONFIG).exists():
        previous = json.loads((out / CONFIG).read_text())
        modes = previous.get("modes")
        modes = [Mode.legacy(m) for m in modes] if isinstance(modes, list) else modes
        write_json({**previous, "modes": modes, MODE_FORMAT_KEY: MODE_FORMAT}, out / CONFIG)


def _load_datasets(config: EvalConfig) -> tuple[dict, dict]:
    """The datasets by name (two datasets under one name are refused: :mod:`e1.data.identity`) and
    the fingerprint of each, taken over the whole dataset (``--limit`` does not change it)."""
    from e1.data import fingerprint, load_datasets

    datasets = load_datasets(config.datasets, config.data_dir)
    for name, frame in datasets.items():  # a local file's task column names rewards --include may have added
        check_tasks(frame, f"--datasets {name}")  # each row's answer too (code: a test list), before any request
    fingerprints = {name: fingerprint(frame) for name, frame in datasets.items()}
    if config.limit:
        datasets = {name: frame.head(config.limit) for name, frame in datasets.items()}
    return datasets, fingerprints


def _record_datasets(out: Path, record: dict) -> None:
    """A run with nothing left to generate writes ``config.json`` only when it lacks something:
    when there is none, or its kind or a dataset's fingerprint is not recorded yet."""
    from e1.store import write_json

    previous = json.loads((out / CONFIG).read_text()) if (out / CONFIG).exists() else None
    if previous is None:
        write_json(record, out / CONFIG)
    elif previous.get("kind") != "eval" or previous.get(FINGERPRINTS) != record[FINGERPRINTS]:
        write_json({**previous, "kind": "eval", FINGERPRINTS: record[FINGERPRINTS]}, out / CONFIG)


def _check_sandbox(todo: list[tuple], config: EvalConfig) -> None:
    """Code problems need the sandbox: start it now, so a machine that cannot confine model code
    refuses before any model loads (the sandbox's one-line error says what is missing)."""
    if any(problem.task == "code" for _, _, problem in todo):
        from e1.sandbox import isolation

        isolation(config.scoring.sandbox)


def preflight(config: EvalConfig, model: bool = True) -> None:
    """What can be checked before the model loads: --out, and (``model``: it is to be loaded) the
    model path and the budgets against its context."""
    from e1.store import check_context, check_model_path, check_writable

    check_writable(config.out)
    check_trackers(parse_report_to(config.report_to))  # a tracker that cannot log fails now, not after the run
    if model and config.api is None:  # a served model is checked by asking its server
        check_model_path(config.model)
        check_context(config.model, config.budgets, [m for m in config.modes if m.bounded], config.engine.max_model_len)


def eval_tp(config: EvalConfig) -> int:
    """Ranks per engine under torchrun: ``--tp`` for vLLM; transformers engines are one per rank."""
    from e1.engine import resolve_backend

    engine = config.engine
    return engine.tp if engine.tp > 1 and resolve_backend(engine.backend) == "vllm" else 1


def load_engine_for(config: EvalConfig, ranks=None):
    """The engine ``config`` asks for (backend, dtype, device, markers, vLLM or API settings); under
    torchrun a vLLM engine joins the ranks of its shard (``external_launcher``), and a backend behind
    an API is refused (its server batches)."""
    from e1.engine import BACKENDS, load_engine, resolve_backend

    spec = config.engine
    backend = resolve_backend(spec.backend)
    launched = ranks is not None and ranks.world > 1
    if launched and BACKENDS[backend].served:
        raise ConfigError(
            f"--backend {backend} runs in one process (the server batches)",
            hint="run without torchrun and raise --concurrency instead",
        )
    options = (
        {"distributed_executor_backend": "external_launcher", "colocate": True}
        if launched and backend == "vllm"
        else {}
    )
    return load_engine(
        config.model,
        spec,
        batch_size=config.batch_size,
        api=config.api,
        modes=config.modes,
        journal=Path(config.out) / API_REPLIES,
        **options,
    )


def _pending(datasets: dict, keys, config: EvalConfig) -> list[tuple]:
    """(mode, budget, problem row) for every problem whose n samples are not all written yet
    (``keys``: the :data:`SAMPLE_KEY` columns of the stored samples)."""
    done = set()
    if len(keys):
        counts = keys.groupby(["dataset", "problem_id", "mode", "think_budget", "solve_budget"]).size()
        done = {key for key, count in counts.items() if count >= config.n}
    todo = []
    for frame in datasets.values():
        for mode in config.modes:
            for budget in config.budgets:
                for problem in frame.itertuples(index=False):
                    key = (problem.dataset, str(problem.id), str(mode), budget.think, budget.solve)
                    if key not in done:
                        todo.append((mode, budget, problem))
    return todo


def _wanted_rows(samples, datasets: dict, config: EvalConfig):
    """The rows of this configuration (a run directory may hold more from earlier calls)."""
    if not len(samples):
        return samples
    ids = {name: set(frame["id"].astype(str)) for name, frame in datasets.items()}
    modes = {str(m) for m in config.modes}
    budgets = {(b.think, b.solve) for b in config.budgets}
    keep = [
        ds in ids and pid in ids[ds] and mode in modes and (t, s) in budgets and index < config.n
        for ds, pid, mode, t, s, index in zip(
            samples["dataset"],
            samples["problem_id"],
            samples["mode"],
            samples["think_budget"],
            samples["solve_budget"],
            samples["sample_index"],
        )
    ]
    return samples[keep].sort_values(SAMPLE_KEY).reset_index(drop=True)


def _api_info(engine, config: EvalConfig) -> dict:
    """Behind an API: where, which model, and the method each mode used (see e1.engine.api.openai_engine)."""
    return {"api_method": engine.describe()} if config.api is not None else {}


def _weights_info(engine) -> dict:
    """A local engine's weights dtype as it decoded (``--dtype auto``: the checkpoint's), for the summary line."""
    dtype = getattr(engine, "dtype", None)
    return {"weights_dtype": dtype} if isinstance(dtype, str) else {}


def _marker_info(engine) -> dict:
    markers = engine.markers
    return {"think_start": markers.start_text, "think_end": markers.end_text, "end_ids": list(markers.end_ids)}
