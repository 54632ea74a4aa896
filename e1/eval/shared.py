"""Sweeps that share prefixes: one unconstrained trajectory per sample serves every cell of the grid.

    batches = problem_batches(todo, problems_per_call=16)         # all pending cells of a problem together
    generated = generate_shared(engine, batches[0], config)       # [(mode, budget, problem, completion, prompt)]

Why it is exact. Without the budget in the prompt, a budgeted row writes exactly what an
unconstrained row would, token for token in distribution, until its mode makes it differ: a
forced token is due (the end marker at ``t``, after an exit text or a grace window), a sampled
id is replaced (s1's "Wait"), or the row ends. So for every (problem, sample) e1 draws one
*root*: an unconstrained sample (mode ``none``) as long as the longest cell can use. Each cell's
row then takes the root's ids as its own while its mode keeps them unchanged
(:meth:`~e1.engine.row_state.RowState.follow`) and decodes on from where it departs, with
fresh randomness (its cell's seed, as an independent run would use):

- ``none`` is the root itself; ``truncate`` at total ``B`` is its first ``B`` ids;
- ``elastic`` at ``t`` takes the first ``t`` thinking ids, then the marker is forced and a fresh
  solution of up to ``s`` ids is drawn; a row whose root ended thinking naturally at ``e <= t``
  takes the root's solution too (it is what that row would have drawn). A root's solution is
  never reused for a budget ``t < e``: that row is forced at ``t`` and solves afresh;
- ``exit=...``, ``grace=g`` and ``budget-forcing`` (with or without ``wait=k``) share the same way,
  each departing where its own rules first change a token — no option needs a fallback;
- ``early-exit`` takes the root's ids up to its first transition: the trial there needs the model,
  so the row decodes on from it (its trials and the rest with its own seed) — shared, not independent.
- ``exit=...``, ``grace=g``, ``stop=...`` and ``budget-forcing`` (with or without ``wait=k``) share the
  same way, each departing where its own rules first change a token — no option needs a fallback;
- ``soft`` shares only up to ``start * t`` thinking ids: from there its bias changes the distribution
  of every next token, so the row cannot take an unconstrained row's ids (``RowState.follow``
  stops before the first biased draw) and decodes on by itself (after a natural end before
  ``start * t`` it takes the root's solution too, as elastic does).

Every cell's samples are therefore exact draws from that cell's distribution; across cells
they are paired (the same root), which makes "elastic vs truncate at equal budget" a paired
comparison (:func:`e1.report.metrics.mode_differences`). Roots are deterministic given the seed (they derive from the
seed, dataset and problem id only), so a resumed sweep regrows the same roots for the cells
still to do. Under greedy decoding a shared sweep equals an independent one row for row.
"""

from __future__ import annotations

from dataclasses import replace

from e1.budget import Budget
from e1.engine import Mode

ROOT = Mode("none")


def problem_batches(todo: list[tuple], problems_per_call: int) -> list[list[tuple]]:
    """``todo`` items ``(mode, budget, problem)`` regrouped so that every batch holds all the pending
    cells of ``problems_per_call`` problems (a problem's root is grown once, in one batch)."""
    by_problem: dict[tuple, list[tuple]] = {}
    for item in todo:
        by_problem.setdefault(_key(item[2]), []).append(item)
    groups = list(by_problem.values())
    return [
        [item for group in groups[start : start + problems_per_call] for item in group]
        for start in range(0, len(groups), problems_per_call)
    ]


def root_seed(seed: int, dataset: str, problem_id) -> int:
    """The seed of a problem's roots: the same for every cell (that is what pairs the cells)."""
    from e1.engine import derive_seed

    return derive_seed(seed, dataset, problem_id, "shared-root")


def followable_tokens(mode: Mode, budget: Budget, max_tokens: int) -> int:
    """The most root ids a row of ``mode`` at ``budget`` can take: thinking up to ``t`` (+ a grace
    window) and, after a natural end, up to ``s`` solution ids; ``truncate`` its total; ``none`` all.

    >>> followable_tokens(Mode("elastic"), Budget(512, 1024), 32768), followable_tokens(Mode("truncate"), Budget(512, 1024), 32768)
    (1536, 1536)
    >>> followable_tokens(Mode("elastic"), Budget(0, 1024), 32768)  # forced at once: nothing to follow
    0
    """
    return mode.followable_tokens(budget, max_tokens)


ROOT_SHARE = 0.5  # of each sample's progress, counted when the root it follows is grown (the long part)


def call_works(batch: list[tuple], config) -> list[int]:
    """What each generate call of :func:`generate_shared` on ``batch`` weighs for time left
    (:mod:`e1.report.eta`), in order: the roots (the longest a cell can follow) when grown, then
    each cell's ``t + s``; a call lasts as long as its longest row, which these bound."""
    cells = dict.fromkeys((mode, budget) for mode, budget, _ in batch)
    length = _root_length(cells, config)
    return ([length] if length else []) + [max(budget.total, 1) for _, budget in cells]


def generate_shared(engine, batch: list[tuple], config, progress=None, worked=None) -> list[tuple]:
    """Generate one batch of ``(mode, budget, problem)`` cells by sharing: each problem's ``n`` roots
    once, then every cell's rows following them. Returns ``(mode, budget, problem, completion, prompt)``
    for every sample, like the independent path (``config``: an :class:`e1.eval.run.EvalConfig`).
    ``progress(amount)`` adds up to ``len(batch) * n``: a finished root counts :data:`ROOT_SHARE` of
    the samples that follow it (on average over the batch), a finished row the rest; ``worked(weight)``
    hears of each call as it ends (:func:`call_works`)."""
    from e1.data import build_prompt
    from e1.engine import prefilled, problem_seed

    problems, cells = {}, {}
    for mode, budget, problem in batch:
        problems.setdefault(_key(problem), problem)
        cells.setdefault((mode, budget), []).append(_key(problem))
    prompts = {
        key: build_prompt(engine.tokenizer, p._asdict(), p.task, options=config.prompt) for key, p in problems.items()
    }
    per_root = ROOT_SHARE * len(batch) / len(problems)  # samples a root serves, on average, times the share
    works = iter(call_works(batch, config))
    roots = _grow_roots(
        engine, problems, prompts, cells, config, progress and (lambda count: progress(count * per_root))
    )
    if roots and worked is not None:
        worked(next(works))
    row_share = 1.0 - ROOT_SHARE if roots else 1.0
    rows_done = progress and (lambda count: progress(count * row_share))
    generated = []
    for (mode, budget), keys in cells.items():
        seeds = [problem_seed(config.sampling.seed, problems[k].dataset, problems[k].id, mode, budget) for k in keys]
        # a mode that writes into its prompt (nothinking) follows nothing: the roots grew from another prompt
        prefixes = [roots[k][j] for k in keys for j in range(config.n)] if roots and not mode.prefills else None
        texts = {k: prefilled(prompts[k], mode, engine.markers) for k in keys}
        completions = engine.generate(
            list(texts.values()),
            budget,
            mode,
            config.sampling,
            n=config.n,
            seeds=seeds,
            prefixes=prefixes,
            progress=rows_done,
        )
        generated += [
            (mode, budget, problems[keys[c.prompt_index]], c, texts[keys[c.prompt_index]]) for c in completions
        ]
        if worked is not None:
            worked(next(works))
    return generated


def _grow_roots(
    engine, problems: dict, prompts: dict, cells: dict, config, progress=None
) -> dict[tuple, list[list[int]]]:
    """Each problem's ``n`` unconstrained samples, as long as the longest cell of the batch can use
    (``{}`` when no cell follows anything, e.g. only ``t = 0``)."""
    length = _root_length(cells, config)
    if length == 0:
        return {}
    keys = list(problems)
    seeds = [root_seed(config.sampling.seed, problems[k].dataset, problems[k].id) for k in keys]
    budget = next(iter(cells))[1]  # mode none ignores it (its length is the sampling's max_tokens)
    roots = engine.generate(
        [prompts[k] for k in keys],
        budget,
        ROOT,
        replace(config.sampling, max_tokens=length),
        n=config.n,
        seeds=seeds,
        progress=progress,
    )
    grown: dict[tuple, list[list[int]]] = {k: [] for k in keys}
    for c in roots:
        grown[keys[c.prompt_index]].append(c.token_ids)
    return grown


def _root_length(cells, config) -> int:
    """How long the roots grow: the most ids any of ``cells`` ((mode, budget) pairs) can follow."""
    return max(followable_tokens(mode, budget, config.sampling.max_tokens) for mode, budget in cells)


def _key(problem) -> tuple[str, str]:
    return problem.dataset, str(problem.id)
