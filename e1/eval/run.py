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
    from e1.data import load_includes
    from e1.eval.distributed import current_group, group_lock

    group = group or current_group(eval_tp(config), config.engine.device)
    load_includes(config.include, out=config.out)  # the command line loaded them already; a library caller may not have
    preflight(config, model=engine is None)
    previous = check_run_dir(Path(config.out), config.to_json(), RUN_IDENTITY, kind="eval")
    check_grid(Path(config.out), previous, config.to_json(), grow=grow)
    with group_lock(Path(config.out), "e1 eval", group):
        return _evaluate(config, engine, progress or NullProgress(), group)


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
    """A run directory written before today's mode texts (:func:`e1.store.mode_format`) is rewritten
    to them once, before anything is added to it: its samples' labels first, then its ``config.json``
    (modes and format). Its texts are :meth:`Mode.legacy`'s rewrite, as every reader reads them."""
    from e1.store import write_json

    if mode_format(out) >= MODE_FORMAT:
        return
    store.upgrade()
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


def _batches(todo: list[tuple], config: EvalConfig) -> list[list[tuple]]:
    """The work in generate calls of ``batch_size // n`` problems; shared prefixes keep all the
    cells of a problem in one batch."""
    problems_per_call = max(1, config.batch_size // config.n)
    if config.share_prefixes:
        from e1.eval.shared import problem_batches

        return problem_batches(todo, problems_per_call)
    return [todo[start : start + problems_per_call] for start in range(0, len(todo), problems_per_call)]


def _generate_and_score(engine, batches: list[list[tuple]], config: EvalConfig, store, progress, kept: int = 0) -> None:
    """Generate batch k + 1 while batch k is scored in the background; each batch is appended to
    ``store`` once scored, in order (``store`` None: a rank that only decodes). ``kept``: samples
    a resumed run found done ("16 of 80 kept, generating 64 samples")."""
    from e1.eval.overlap import overlapped

    if store is None:  # a tensor-parallel rank after its shard's first: it decodes alongside; the first scores
        for batch in batches:
            _generate_batch(engine, batch, config)
        return
    total = sum(len(batch) for batch in batches) * config.n
    described = f"{kept} of {kept + total} kept, generating {total} samples" if kept else f"generating {total} samples"
    with config.scoring.scorer() as scorer, progress.task(described, total=total) as bar:

        def write(rows: list[dict]) -> None:
            store.append(rows)

        # the bar moves as the engine finishes each sample, not once per batch (a sweep's first batch
        # may hold every cell of its problems: minutes at 0/320); time left comes from work as each
        # generate call ends (e1.report.eta: short samples finish first): a batch makes one call per
        # cell, as long as its longest row, which the cell's t + s bounds
        weights = [sum(_call_works(batch, config)) for batch in batches]
        work, done = getattr(bar, "work", None), [0]

        def worked(amount: int) -> None:
            done[0] += amount
            if work is not None:
                work(done[0], sum(weights))

        overlapped(
            batches,
            produce=lambda batch: _generate_batch(engine, batch, config, bar.advance, worked),
            finish=lambda generated: _score_batch(generated, scorer),
            emit=write,
        )


def _call_works(batch: list[tuple], config: EvalConfig) -> list[int]:
    """The weights for time left of the generate calls :func:`_generate_batch` makes, in order: each
    cell's ``t + s`` (a call lasts as long as its longest row, which that bounds); shared prefixes:
    :func:`e1.eval.shared.call_works`."""
    if config.share_prefixes:
        from e1.eval.shared import call_works

        return call_works(batch, config)
    return [max(budget.total, 1) for _, budget in dict.fromkeys((mode, budget) for mode, budget, _ in batch)]


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


def _generate_batch(engine, batch: list[tuple], config: EvalConfig, progress=None, worked=None) -> list[tuple]:
    """Generate one batch (its problems may differ in mode/budget, so by group):
    (mode, budget, problem, completion, prompt) for every sample. ``progress(count)`` hears of
    samples as the engine finishes them (``len(batch) * n`` in all); ``worked(weight)`` of each
    generate call as it ends (:func:`_call_works`)."""
    from e1.data import build_prompt
    from e1.engine import RequestError, problem_seed

    if config.share_prefixes:
        from e1.eval.shared import generate_shared

        return generate_shared(engine, batch, config, progress, worked)
    groups: dict[tuple, list] = {}
    for mode, budget, problem in batch:
        groups.setdefault((mode, budget), []).append(problem)
    generated = []
    for (mode, budget), problems in groups.items():
        seeds = [problem_seed(config.sampling.seed, p.dataset, p.id, mode, budget) for p in problems]
        stated = budget.total if mode.bounded else None  # --prompt-budget: N = t + s
        prompts = [
            build_prompt(engine.tokenizer, p._asdict(), p.task, options=config.prompt, budget_tokens=stated)
            for p in problems
        ]
        try:
            completions = engine.generate(
                prompts, budget, mode, config.sampling, n=config.n, seeds=seeds, progress=progress
            )
        except RequestError as err:  # an API request that failed: name the problem
            problem = problems[err.prompt_index] if 0 <= err.prompt_index < len(problems) else None
            raise (
                err.about(f"{problem.dataset} problem {problem.id} ({mode}, t={budget.think} s={budget.solve})")
                if problem is not None
                else err
            ) from err
        generated += [(mode, budget, problems[c.prompt_index], c, prompts[c.prompt_index]) for c in completions]
        if worked is not None:
            worked(max(budget.total, 1))
    return generated


def _score_batch(generated: list[tuple], scorer) -> list[dict]:
    """Score a generated batch at once (code: all its programs through the sandbox); its sample rows."""
    from e1.data import carried_fields
    from e1.engine import DEFAULT_END
    from e1.rewards import gold_text

    scores = scorer.score(
        [g[2].task for g in generated],
        [g[3].text(DEFAULT_END) for g in generated],
        [str(g[2].answer) for g in generated],
    )
    from e1.eval.trials import overthinking_tokens

    overthinking = overthinking_tokens(generated, scorer)  # NaN outside early-exit
    golds = {}  # one summary per problem (code tests can be large)
    rows = []
    for (mode, budget, problem, c, prompt), scored, late in zip(generated, scores, overthinking):
        key = (problem.dataset, str(problem.id))
        if key not in golds:
            golds[key] = gold_text(problem.task, str(problem.answer))
        rows.append(
            _sample_row(mode, budget, problem, c, scored, golds[key], prompt if c.sample_index == 0 else None)
            | {"overthinking_tokens": late}
            | carried_fields(problem)
        )
    return rows


def _sample_row(mode: Mode, budget: Budget, problem, c, scored, gold: str, prompt: str | None) -> dict:
    """One samples.parquet row, keyed by :data:`e1.store.results.SAMPLE_COLUMNS`."""
    return dict(
        dataset=problem.dataset,
        problem_id=str(problem.id),
        sample_index=c.sample_index,
        mode=str(mode),
        think_budget=budget.think,
        solve_budget=budget.solve,
        prompt_tokens=c.prompt_tokens,
        think_tokens=c.think_tokens,
        solve_tokens=c.solve_tokens,
        forced=c.forced,
        finish_reason=c.finish_reason,
        think_text=c.think_text,
        solution_text=c.solution_text,
        extracted_answer=scored.extracted,
        gold=gold,
        reward=scored.reward,
        correct=scored.reward >= 1.0,
        tests_passed=scored.tests_passed,
        first_failure=scored.first_failure,
        prompt=prompt,
        decoded_tokens=c.decoded_tokens,
        think_end=c.think_end or None,
        forced_text=c.forced_text,
    )


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
