"""Engine invariants, on a scripted fake (exact expectations) and a tiny random model (bounds)."""

from __future__ import annotations

import itertools

import pytest
import torch

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.engine.markers import resolve_markers
from e1.errors import ConfigError, MarkerError
from tests.fakes import ScriptedModel, assert_engine_invariants

GREEDY = Sampling(temperature=0.0, max_tokens=64)


def make_fake(tokenizer, scripts_by_length, think_end=None, batch_size=64):
    """Prompts of distinct lengths, each scripted (k, m); returns (engine, prompts)."""
    markers = resolve_markers(tokenizer, think_end=think_end)
    think, solve = (
        tokenizer.encode("a", add_special_tokens=False)[0],
        tokenizer.encode("b", add_special_tokens=False)[0],
    )
    prompts = [tuple([think] * (3 + i)) + markers.start_ids for i in range(len(scripts_by_length))]
    model = ScriptedModel(len(tokenizer), dict(zip(prompts, scripts_by_length)), markers, think, solve)
    return HFEngine(model, tokenizer, markers, batch_size=batch_size), [list(p) for p in prompts]


def expected_elastic(k, m, t, s):
    natural = k is not None and k <= t
    think = k if natural else t
    return think, min(m, s), not natural, "stop" if m <= s else "length"


SCRIPTS = [(1, 1), (3, 2), (5, 4), (9, 3), (None, 2)]


@pytest.mark.parametrize("t,s", list(itertools.product([0, 1, 3, 5, 8], [1, 2, 4])))
def test_elastic_on_scripted_model_matches_hand_derived_counts(tiny_engine, t, s):
    engine, prompts = make_fake(tiny_engine.tokenizer, SCRIPTS)
    completions = engine.generate(prompts, Budget(t, s), Mode("elastic"), GREEDY, n=2)
    assert len(completions) == len(prompts) * 2
    for c in completions:
        k, m = SCRIPTS[c.prompt_index]
        assert (c.think_tokens, c.solve_tokens, c.forced, c.finish_reason) == expected_elastic(k, m, t, s)
        assert c.think_tokens <= t and c.solve_tokens <= s
        end = engine.markers.end_ids
        # forced ids are exactly the end marker, placed right after the t thinking tokens
        forced_ids = [tok for tok, f in zip(c.token_ids, c.forced_mask) if f]
        assert forced_ids == (list(end) if c.forced else [])
        if c.forced:
            assert c.forced_mask[t : t + len(end)] == [True] * len(end)
        assert len(c.token_ids) == c.think_tokens + c.solve_tokens + len(forced_ids)
        assert c.closed


@pytest.mark.parametrize("t,s", [(0, 3), (2, 2), (4, 1), (6, 6), (20, 5)])
def test_truncate_uses_one_budget_and_never_forces(tiny_engine, t, s):
    engine, prompts = make_fake(tiny_engine.tokenizer, SCRIPTS)
    for c in engine.generate(prompts, Budget(t, s), Mode("truncate"), GREEDY):
        k, m = SCRIPTS[c.prompt_index]
        total = t + s
        assert not c.forced and not any(c.forced_mask)
        assert c.think_tokens + c.solve_tokens <= total
        if k is not None and k <= total:
            assert c.think_tokens == k and c.solve_tokens == min(m, total - k)
        else:
            assert (c.think_tokens, c.solve_tokens, c.finish_reason) == (total, 0, "length")


def test_none_mode_runs_to_max_tokens_without_forcing(tiny_engine):
    engine, prompts = make_fake(tiny_engine.tokenizer, SCRIPTS)
    for c in engine.generate(prompts, Budget(1, 1), Mode("none"), Sampling(temperature=0, max_tokens=40)):
        k, m = SCRIPTS[c.prompt_index]
        assert not c.forced
        if k is None:
            assert (c.think_tokens, c.finish_reason) == (40, "length")
        else:
            assert (c.think_tokens, c.solve_tokens, c.finish_reason) == (k, m, "stop")


def test_budget_forcing_appends_final_answer_and_waits(tiny_engine):
    engine, prompts = make_fake(tiny_engine.tokenizer, [(3, 2), (None, 2)])
    plain = engine.generate(prompts, Budget(6, 4), Mode("budget-forcing"), GREEDY)
    assert not plain[0].forced and plain[0].think_tokens == 3
    # s1's layout: a line break, the marker, a line break, "Final Answer:", recorded apart from the
    # solution, which is only what the model wrote
    assert (
        plain[1].forced and plain[1].forced_text == "\n\nFinal Answer:" and "Final Answer" not in plain[1].solution_text
    )
    assert plain[0].forced_text == ""
    markers = engine.markers
    newline = markers.newline_ids
    assert [t for t, f in zip(plain[1].token_ids, plain[1].forced_mask) if f] == list(
        newline + markers.end_ids + newline + markers.answer_ids
    )
    inline = engine.generate(prompts, Budget(6, 4), Mode.parse("budget-forcing:answer=inline"), GREEDY)[1]
    assert [t for t, f in zip(inline.token_ids, inline.forced_mask) if f] == list(markers.end_ids + markers.answer_ids)
    assert inline.forced_text == "Final Answer:"
    # wait=1: the natural end at token 3 becomes "Wait"; the fake then thinks on until t forces the end
    waited = engine.generate(prompts[:1], Budget(12, 4), Mode.parse("budget-forcing:wait=1"), GREEDY)[0]
    assert waited.forced and waited.think_tokens == 12
    assert "Wait" in waited.think_text
    assert waited.token_ids[2 : 2 + len(markers.wait_ids)] == list(markers.wait_ids)


def test_multi_token_end_marker_is_matched_and_forced_as_a_sequence(tiny_engine):
    tokenizer = tiny_engine.tokenizer
    marker = "So the answer"
    engine, prompts = make_fake(tokenizer, [(6, 2), (None, 2)], think_end=marker)
    end = engine.markers.end_ids
    assert len(end) > 1
    natural, forced = engine.generate(prompts, Budget(8, 3), Mode("elastic"), GREEDY)
    assert not natural.forced and natural.think_tokens == 6 and marker not in natural.think_text
    assert forced.forced and forced.think_tokens == 8
    assert [t for t, f in zip(forced.token_ids, forced.forced_mask) if f] == list(end)
    assert forced.solve_tokens == 2 and forced.finish_reason == "stop"


def test_template_without_think_opens_thinking_when_forcing(tiny_engine):
    """If neither the prompt nor the model opened <think>, forcing inserts <think></think>."""
    engine, _ = make_fake(tiny_engine.tokenizer, [])
    tok = tiny_engine.tokenizer
    a = tok.encode("a", add_special_tokens=False)[0]
    prompt = (a, a, a)  # no <think> at the end of the prompt
    engine.model.scripts = {prompt: (None, 2)}
    c = engine.generate([list(prompt)], Budget(0, 3), Mode("elastic"), GREEDY)[0]
    m = engine.markers
    assert c.token_ids[: len(m.start_ids) + len(m.end_ids)] == list(m.start_ids + m.end_ids)
    assert c.think_tokens == 0 and c.forced


def test_engine_refuses_bad_arguments(tiny_engine):
    with pytest.raises(ConfigError):
        tiny_engine.generate(["x"], Budget(1, 1), Mode(), GREEDY, n=0)
    with pytest.raises(ConfigError):
        Mode.parse("elastik")
    with pytest.raises(ConfigError):
        Mode.parse("elastic:wait=2")


def test_budget_beyond_the_context_is_refused_before_decoding(tiny_engine):
    engine, prompts = make_fake(tiny_engine.tokenizer, SCRIPTS)
    engine.max_context = 64
    with pytest.raises(ConfigError, match="more than the model's context of 64"):
        engine.generate(prompts, Budget(40, 40), Mode("elastic"), GREEDY)
    # mode none is capped by the context instead: it runs to its end
    for c in engine.generate(prompts, Budget(1, 1), Mode("none"), Sampling(temperature=0, max_tokens=500)):
        assert c.prompt_tokens + len(c.token_ids) <= 64


def test_missing_markers_give_a_clear_error():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel()
    core.train_from_iterator(["hello world"], trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>")
    with pytest.raises(MarkerError, match="--think-end"):
        resolve_markers(tok)
    assert resolve_markers(tok, think_start="[", think_end="]").end_text == "]"


# -- the tiny random model -------------------------------------------------------------


def prompts_for(engine, count=4):
    from e1.data.prompts import build_prompt

    return [build_prompt(engine.tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(count)]


@pytest.mark.parametrize(
    "mode", ["elastic", "truncate", "budget-forcing", "none", "elastic:exit=qwen", "elastic:grace=4"]
)
def test_invariants_hold_on_tiny_random_model(tiny_engine, mode):
    budget, exit_ids = Budget(6, 5), tiny_engine.exit_ids(Mode.parse(mode))
    room = 20 + len(exit_ids)  # the context room must hold the forced exit text too
    sampling = Sampling(temperature=1.0, top_p=0.9, top_k=50, seed=3, max_tokens=room)
    completions = tiny_engine.generate(prompts_for(tiny_engine), budget, Mode.parse(mode), sampling, n=3)
    assert len(completions) == 12
    for c in completions:
        assert_engine_invariants(c, budget, mode, tiny_engine.markers.end_ids, max_tokens=room, exit_ids=exit_ids)


def test_qwen_exit_text_reaches_the_model(tiny_engine):
    """The exit text is fed to the model (the solution follows it), not just appended to records."""
    exit_ids = tiny_engine.exit_ids(Mode.parse("elastic:exit=qwen"))
    assert len(exit_ids) > 10
    greedy = Sampling(temperature=0.0, max_tokens=200)
    for c in tiny_engine.generate(prompts_for(tiny_engine, 2), Budget(3, 4), Mode.parse("elastic:exit=qwen"), greedy):
        assert c.forced and c.token_ids[3 : 3 + len(exit_ids)] == list(exit_ids)
        assert c.forced_mask[3 : 3 + len(exit_ids)] == [True] * len(exit_ids)
        assert "Considering the limited time" not in c.think_text + c.solution_text
        assert c.forced_text.strip().startswith("Considering the limited time")  # recorded apart, never scored


def test_think_zero_forces_the_marker_at_once(tiny_engine):
    for c in tiny_engine.generate(prompts_for(tiny_engine, 2), Budget(0, 4), Mode(), GREEDY, n=2):
        assert c.forced and c.think_tokens == 0 and c.think_text == ""
        assert c.token_ids[0] == tiny_engine.markers.end_ids[0] and c.forced_mask[0]


def test_sampling_is_reproducible_for_a_seed(tiny_engine):
    prompts = prompts_for(tiny_engine, 3)
    sampling = Sampling(temperature=1.0, top_p=1.0, seed=7, max_tokens=16)
    first = [c.token_ids for c in tiny_engine.generate(prompts, Budget(8, 8), Mode("none"), sampling, n=2)]
    again = [c.token_ids for c in tiny_engine.generate(prompts, Budget(8, 8), Mode("none"), sampling, n=2)]
    other = [
        c.token_ids
        for c in tiny_engine.generate(
            prompts, Budget(8, 8), Mode("none"), Sampling(temperature=1.0, top_p=1.0, seed=8, max_tokens=16), n=2
        )
    ]
    assert first == again
    assert first != other
    # samples of one prompt differ from each other (the n-fold expanded prefill is not one sample copied)
    assert first[0] != first[1]


def test_batched_greedy_decoding_equals_one_prompt_at_a_time_and_hf_generate(tiny_engine):
    """Left padding, shared prefill, compaction and chunking must not change greedy tokens."""
    prompts = prompts_for(tiny_engine, 5)
    sampling = Sampling(temperature=0.0, max_tokens=12)
    batched = [c.token_ids for c in tiny_engine.generate(prompts, Budget(6, 6), Mode("none"), sampling)]
    small = HFEngine(tiny_engine.model, tiny_engine.tokenizer, tiny_engine.markers, batch_size=2)
    chunked = [c.token_ids for c in small.generate(prompts, Budget(6, 6), Mode("none"), sampling)]
    alone = [tiny_engine.generate([p], Budget(6, 6), Mode("none"), sampling)[0].token_ids for p in prompts]
    assert batched == alone == chunked
    model, tok = tiny_engine.model, tiny_engine.tokenizer
    for prompt, ours in zip(prompts, alone):
        ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
        reference = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=sorted(tiny_engine.markers.eos_ids),
            pad_token_id=tiny_engine.markers.pad_id,
        )
        assert reference[0, ids.shape[1] :].tolist() == ours


def test_elastic_text_splits_thinking_and_solution(tiny_engine):
    c = tiny_engine.generate(prompts_for(tiny_engine, 1), Budget(5, 7), Mode(), GREEDY)[0]
    tok = tiny_engine.tokenizer
    assert "</think>" not in c.think_text and "</think>" not in c.solution_text
    assert c.text("</think>") == c.think_text + "</think>" + c.solution_text
    think_ids = [t for t, f in zip(c.token_ids, c.forced_mask) if not f][: c.think_tokens]
    assert tok.decode(think_ids, skip_special_tokens=True) == c.think_text


# -- sampling and the growing cache ----------------------------------------------------


def test_inverse_cdf_sampling_matches_the_probabilities_and_skips_zero_ones():
    import numpy as np

    from e1.engine.hf.sampling import row_uniforms, sample_from

    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).expand(20_000, 6)  # [N, V]
    # one row's successive counters, as a sample drawing 20,000 tokens would use them
    uniforms = row_uniforms(np.full(20_000, 12345, dtype=np.uint64), np.arange(20_000, dtype=np.uint64))
    picks = sample_from(probs, torch.from_numpy(uniforms))  # [N]
    counts = torch.bincount(picks, minlength=6) / len(picks)
    assert counts[[0, 2, 5]].sum() == 0  # probability 0: never drawn, not even at u = 0 or u ~ total
    # binomial standard error at 20,000 draws is at most sqrt(0.25 / 20000) = 0.0035; allow 4 of them
    assert torch.allclose(counts, probs[0], atol=0.014)


def test_top_p_keeps_the_smallest_set_reaching_p():
    from e1.engine.hf.sampling import _top_p

    logits = torch.tensor([[0.1, 0.5, 0.15, 0.25]]).log()  # probabilities, shuffled
    # sorted 0.5, 0.25, 0.15, 0.1: 0.5 + 0.25 = 0.75 reaches 0.7, so 0.15 and 0.1 are dropped
    kept = _top_p(logits, 0.7).isfinite()
    assert kept.tolist() == [[False, True, False, True]]


@pytest.mark.parametrize("mode", ["elastic", "truncate", "budget-forcing"])
def test_max_tokens_caps_mode_none_only(tiny_engine, mode):
    # --max-tokens 3 is documented as the cap of mode none; t=8, s=4 must still be used in full:
    # (None, 2) thinks until forced (8 tokens), then writes 2 solution tokens (the last is EOS)
    engine, prompts = make_fake(tiny_engine.tokenizer, [(None, 2)])
    capped = Sampling(temperature=0.0, max_tokens=3)
    c = engine.generate(prompts, Budget(8, 4), Mode.parse(mode), capped)[0]
    # budget-forcing's forced "Final Answer:" counts as the fake's solution, so it writes one token less
    expected = {"elastic": (8, 2), "truncate": (12, 0), "budget-forcing": (8, 1)}[mode]
    assert (c.think_tokens, c.solve_tokens) == expected
    none = engine.generate(prompts, Budget(8, 4), Mode("none"), capped)[0]
    assert len(none.token_ids) == 3  # the cap it is documented for
