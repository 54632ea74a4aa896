"""The transformers backend presents few attention shapes per decode, and the same tokens as before.

Invariant (e1.engine.hf.kv_cache): after the prefill (exact), a decode step over ``length`` keys
attends over ``key_bucket(length)`` key columns, so a decode of N new tokens from a prompt of width W hands
attention at most ``N / 32 + 2`` distinct key lengths below 1024 keys (17 per doubling above),
instead of one new length per token. Checked on the shapes the attention functions really
receive (SDPA and eager), on generated prompts and budgets, and with the tokens compared to an
exact-length decode (the old behaviour) and to ``model.generate()``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.engine.hf.kv_cache import KEY_STEP, exact_keys, growing_cache, key_bucket

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    """(an SDPA engine, an eager-attention engine) on the same tiny model, EOS off: rows run their whole budget."""
    from transformers import AutoModelForCausalLM

    sdpa = HFEngine.load(str(tiny_model_dir))
    eager_model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), attn_implementation="eager").eval()
    eager = HFEngine(eager_model, sdpa.tokenizer, sdpa.markers)
    for engine in (sdpa, eager):
        engine.markers = dataclasses.replace(engine.markers, eos_ids=frozenset({-1}))
    assert (sdpa._sdpa, eager._sdpa) == (True, False)
    return sdpa, eager


@pytest.fixture
def key_lengths(monkeypatch):
    """The (batch, queries, keys) shapes every attention call of the model receives, in order."""
    seen: list[tuple[int, int, int]] = []
    sdpa, eager = torch.nn.functional.scaled_dot_product_attention, hf_eager_attention()

    def recording_sdpa(query, key, value, attn_mask=None, **kwargs):
        seen.append((query.shape[0], query.shape[-2], key.shape[-2]))
        assert attn_mask is None or attn_mask.shape[-1] == key.shape[-2]
        if query.shape[-2] == 1 < key.shape[-2]:  # a decode step: its mask is additive, in the queries' dtype
            assert attn_mask.dtype == query.dtype
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    def recording_eager(module, query, key, value, attention_mask, **kwargs):
        seen.append((query.shape[0], query.shape[-2], key.shape[-2]))
        assert attention_mask is None or attention_mask.shape[-1] == key.shape[-2]
        return eager(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    monkeypatch.setattr("transformers.models.qwen2.modeling_qwen2.eager_attention_forward", recording_eager)
    return seen


def hf_eager_attention():
    from transformers.models.qwen2 import modeling_qwen2

    return modeling_qwen2.eager_attention_forward


def text_prompts(lengths: list[int]) -> list[list[int]]:
    """Distinct token-id prompts of the given lengths (ids 20.., clear of the special tokens)."""
    return [[20 + i] + [30 + (i * 7 + j) % 200 for j in range(n - 1)] for i, n in enumerate(lengths)]


@given(n=st.integers(min_value=1, max_value=1 << 22))
def test_key_bucket_rounds_up_by_at_most_a_sixteenth_or_one_step(n):
    bucket = key_bucket(n)
    assert n <= bucket <= n + max(KEY_STEP - 1, n // 16)
    assert key_bucket(bucket) == bucket and key_bucket(n + 1) >= bucket  # idempotent, monotone
    if n < 2048:
        assert bucket % KEY_STEP == 0


@pytest.mark.parametrize("start", [2048, 3000, 4096, 5555, 8192, 1 << 14])
def test_key_bucket_takes_at_most_17_values_per_doubling(start):
    assert len({key_bucket(n) for n in range(start, 2 * start + 1)}) <= 17


@SETTINGS
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=4),
    tokens=st.integers(min_value=1, max_value=130),
    eager=st.booleans(),
)
def test_one_decode_presents_few_key_lengths(engines, key_lengths, lengths, tokens, eager):
    engine = engines[eager]
    key_lengths.clear()
    engine.generate(text_prompts(lengths), Budget(1, 1), Mode("none"), Sampling(temperature=0.0, max_tokens=tokens))
    width, layers = max(lengths), engine.model.config.num_hidden_layers
    prefill, decode = key_lengths[:layers], key_lengths[layers:]
    assert set(prefill) == {(len(lengths), width, width)}  # exact: one row per (distinct) prompt
    assert len(decode) == (tokens - 1) * layers  # the last token is never fed
    # step k attends over its W + k keys rounded up to a multiple of 32 (W + N < 1024 here)
    assert decode[::layers] == [(len(lengths), 1, -(-(width + k) // KEY_STEP) * KEY_STEP) for k in range(1, tokens)]
    assert len(set(decode)) <= (tokens - 1) // KEY_STEP + 2  # before: tokens - 1 distinct key lengths


@SETTINGS
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=3),
    think=st.integers(min_value=0, max_value=40),
    solve=st.integers(min_value=1, max_value=40),
    mode=st.sampled_from(["elastic", "none", "budget-forcing"]),
    n=st.integers(min_value=1, max_value=3),
    eager=st.booleans(),
    prefixed=st.booleans(),
)
def test_tokens_are_those_of_an_exact_length_decode(
    engines, monkeypatch, lengths, think, solve, mode, n, eager, prefixed
):
    """Bucketed keys (masked zeros past the cache) sample exactly the tokens an exact-length
    decode samples: seeded sampling, forced markers, shared prefills and, with prefixes of
    different lengths (rows then finish at different steps), compaction included."""
    engine = engines[eager]
    sampling = Sampling(temperature=1.0, top_p=0.9, seed=think * 41 + solve, max_tokens=think + solve)
    prompts, budget = text_prompts(lengths), Budget(think, solve)
    prefixes = [[50 + row] * (3 * row) for row in range(len(prompts) * n)] if prefixed else None

    def decode():
        return [c.token_ids for c in engine.generate(prompts, budget, Mode(mode), sampling, n=n, prefixes=prefixes)]

    bucketed = decode()
    monkeypatch.setattr(engine, "key_bucket", exact_keys)  # the old behaviour: attend over exactly the keys written
    assert bucketed == decode()


def test_greedy_tokens_equal_model_generate_across_a_bucket_boundary(engines):
    engine = engines[0]
    prompts = text_prompts([5, 33])  # decodes cross several buckets
    ours = [
        c.token_ids
        for c in engine.generate(prompts, Budget(1, 1), Mode("none"), Sampling(temperature=0.0, max_tokens=100))
    ]
    for prompt, row in zip(prompts, ours):
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            reference = engine.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=100,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=engine.markers.pad_id,
            )
        assert reference[0, len(prompt) :].tolist() == row


def test_cache_grows_in_buckets_keeps_zeros_past_its_keys_and_compacts():
    from transformers import DynamicCache

    grown, reference = growing_cache(max_length=70), DynamicCache()
    for length in (3, 1, 1, 1, 1):  # a prefill of 3, then 4 one-token steps
        kv = torch.randn(4, 2, length, 8)  # [B, H, T, D]
        keys, values = grown.update(kv, -kv, 0)
        exact = reference.update(kv, -kv, 0)[0]
        used = exact.shape[2]
        assert keys.shape[2] == (3 if length == 3 else KEY_STEP)  # the prefill is exact; a step attends 32 columns
        assert torch.equal(keys[:, :, :used], exact) and torch.equal(values, -keys)
        assert not keys[:, :, used:].any()  # zeros, which the mask hides
    assert grown.get_seq_length() == 7 and grown.layers[0]._keys.shape[2] == KEY_STEP
    assert grown.get_mask_sizes(1, 0) == (KEY_STEP, 0)  # transformers sizes a 2D-built mask by the next step's keys
    index = torch.tensor([3, 1])
    grown.batch_select_indices(index), reference.batch_select_indices(index)
    assert torch.equal(grown.layers[0].keys[:, :, :7], reference.layers[0].keys)
