"""Generating and scoring an evaluation's work, a batch at a time: the phase of
:func:`e1.eval.run.evaluate` after the pending work is listed and the engine is loaded.

    batches = _batches(todo, config)                      # whole generate calls
    _generate_and_score(engine, batches, config, store, progress)

Batch k + 1 generates while batch k is scored in the background (:mod:`e1.eval.overlap`); each
scored batch becomes its sample rows (:func:`_sample_row`) and is appended to the store once.
``config`` is the run's :class:`~e1.eval.run.EvalConfig`.
"""

from __future__ import annotations

from e1.budget import Budget
from e1.engine import Mode


def _batches(todo: list[tuple], config) -> list[list[tuple]]:
    """The work in generate calls of ``batch_size // n`` problems; shared prefixes keep all the
    cells of a problem in one batch."""
    problems_per_call = max(1, config.batch_size // config.n)
    if config.share_prefixes:
        from e1.eval.shared import problem_batches

        return problem_batches(todo, problems_per_call)
    return [todo[start : start + problems_per_call] for start in range(0, len(todo), problems_per_call)]


def _generate_and_score(engine, batches: list[list[tuple]], config, store, progress, kept: int = 0) -> None:
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


def _call_works(batch: list[tuple], config) -> list[int]:
    """The weights for time left of the generate calls :func:`_generate_batch` makes, in order: each
    cell's ``t + s`` (a call lasts as long as its longest row, which that bounds); shared prefixes:
    :func:`e1.eval.shared.call_works`."""
    if config.share_prefixes:
        from e1.eval.shared import call_works

        return call_works(batch, config)
    return [max(budget.total, 1) for _, budget in dict.fromkeys((mode, budget) for mode, budget, _ in batch)]


def _generate_batch(engine, batch: list[tuple], config, progress=None, worked=None) -> list[tuple]:
    """Generate one batch (its problems may differ in mode/budget, so by group):
    (mode, budget, problem, completion, prompt) for every sample. ``progress(count)`` hears of
    samples as the engine finishes them (``len(batch) * n`` in all); ``worked(weight)`` of each
    generate call as it ends (:func:`_call_works`)."""
    from e1.data import build_prompt
    from e1.engine import RequestError, prefilled, problem_seed

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
            prefilled(
                build_prompt(engine.tokenizer, p._asdict(), p.task, options=config.prompt, budget_tokens=stated),
                mode,
                engine.markers,
            )
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
