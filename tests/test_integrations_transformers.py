"""``model.generate`` under e1's budgets (e1/integrations/transformers.py): token for token the hf engine's
(``e1 eval --backend hf``) on the same prompts, budgets, modes and seeds, greedy and sampled, batched with
left padding; its arguments cross one gate (generated hostile values: a one-line ConfigError or a processor)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine import Mode, Sampling
from e1.errors import ConfigError
from e1.integrations.transformers import BudgetLogitsProcessor

MODES = [
    "elastic",
    "elastic:exit=qwen",
    "elastic:grace=4",
    "elastic:stop='5'",
    "budget-forcing",
    "budget-forcing:wait=2",
    "soft:start=0.5:strength=6",
    "truncate",
    "none",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The hf engine on the tiny model whose </think> and EOS come up by themselves (natural ends happen)."""
    from e1.engine.hf.hf_engine import HFEngine
    from tests.fakes import build_chatty_model

    return HFEngine.load(str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty")))


def prompts_of(tokenizer, count: int) -> list[str]:
    from e1.data.prompts import build_prompt

    return [build_prompt(tokenizer, f"What is {i} + {i * 3}?" + " x" * (2 * i)) for i in range(count)]


def generate(engine, prompts, processor, n: int = 1):
    """``model.generate`` with the processor, prompts left-padded and each repeated n times: [B, new ids]."""
    tokenizer = engine.tokenizer
    inputs = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    inputs = {key: value.repeat_interleave(n, dim=0) for key, value in inputs.items()}
    out = engine.model.generate(
        **inputs,
        logits_processor=[processor],
        stopping_criteria=[processor.stopping_criteria],
        do_sample=False,
        max_new_tokens=processor.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    return out[:, inputs["input_ids"].shape[1] :].tolist()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    think=st.integers(0, 8),
    solve=st.integers(1, 6),
    mode=st.sampled_from(MODES),
    temperature=st.sampled_from([0.0, 0.7, 1.3]),
    seed=st.integers(0, 2**32),
    prompts=st.integers(1, 3),
    n=st.integers(1, 2),
)
def test_generate_equals_the_hf_engine_token_for_token(engine, think, solve, mode, temperature, seed, prompts, n):
    texts = prompts_of(engine.tokenizer, prompts)
    sampling = Sampling(temperature=temperature, top_p=0.9, seed=seed, max_tokens=24)
    expected = engine.generate(texts, Budget(think, solve), Mode.parse(mode), sampling, n=n)
    processor = BudgetLogitsProcessor(
        engine.tokenizer, think, solve, mode, temperature=temperature, top_p=0.9, seed=seed, max_tokens=24,
        samples_per_prompt=n,
    )  # fmt: skip
    rows = generate(engine, texts, processor, n)
    for row, state, completion in zip(rows, processor.states, expected, strict=True):
        k = len(completion.token_ids)
        assert row[:k] == completion.token_ids == state.tokens, (mode, think, solve)
        assert set(row[k:]) <= {engine.tokenizer.pad_token_id}  # the row ended where e1's state did
        assert (state.think_tokens, state.solve_tokens) == (completion.think_tokens, completion.solve_tokens)


def test_per_prompt_seeds_and_a_second_call_start_afresh(engine):
    """``seeds`` (one per prompt) give e1 eval's samples; the same processor, called again, starts new states."""
    texts = prompts_of(engine.tokenizer, 2)
    sampling = Sampling(temperature=1.0, top_p=1.0, max_tokens=24)
    expected = engine.generate(texts, Budget(4, 4), Mode("elastic"), sampling, seeds=[11, 12])
    processor = BudgetLogitsProcessor(engine.tokenizer, 4, 4, temperature=1.0, top_p=1.0, seeds=[11, 12])
    for _ in range(2):
        rows = generate(engine, texts, processor)
        assert [row[: len(c.token_ids)] for row, c in zip(rows, expected)] == [c.token_ids for c in expected]


def test_an_id_that_e1_did_not_choose_is_refused(engine):
    """A processor after e1's that changes the chosen id would decode outside the budget: refused in one line."""

    def other(input_ids, scores):
        return torch.flip(scores, dims=[-1])  # the finite id moves elsewhere

    processor = BudgetLogitsProcessor(engine.tokenizer, 4, 4, temperature=0)
    inputs = engine.tokenizer(prompts_of(engine.tokenizer, 1), return_tensors="pt", add_special_tokens=False)
    with pytest.raises(ConfigError, match="where e1's budget chose") as err:
        engine.model.generate(
            **inputs, logits_processor=[processor, other], do_sample=False, max_new_tokens=8, pad_token_id=0
        )
    assert "\n" not in str(err.value)

    # rows whose earlier ids changed mid-call (a reordering search) are refused, never decoded from fresh states
    processor.reset()
    ids, scores = inputs["input_ids"], torch.zeros(1, len(engine.tokenizer))
    chosen = int(processor(ids, scores.clone()).argmax())
    changed = torch.cat([ids, torch.tensor([[chosen]])], dim=1)
    changed[0, 0] += 1
    with pytest.raises(ConfigError, match="changed ids of rows"):
        processor(changed, scores.clone())


def test_a_right_padded_batch_and_early_exit_are_refused(engine):
    tokenizer = engine.tokenizer
    with pytest.raises(ConfigError, match="rolled back"):
        BudgetLogitsProcessor(tokenizer, 4, 4, "early-exit")
    processor = BudgetLogitsProcessor(tokenizer, 4, 4, temperature=0)
    inputs = tokenizer(prompts_of(tokenizer, 2), return_tensors="pt", padding=True, padding_side="right")
    with pytest.raises(ConfigError, match="left padding"):
        engine.model.generate(**inputs, logits_processor=[processor], do_sample=False, max_new_tokens=4)


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["1k", "early-exit", "elastic:grace=-1", "x" * 10_000, "soft:strength=nan", "</think>"]),
    st.lists(st.integers(-3, 600), max_size=3),
    st.binary(max_size=4),
)
VALID = dict(think=4, solve=4, mode="elastic", temperature=0.6, top_p=0.95, top_k=0, seed=0, max_tokens=16)
ARGUMENTS = [*VALID, "seeds", "samples_per_prompt", "think_start", "think_end", "eos_token_id", "tokenizer"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(ARGUMENTS), value=HOSTILE)
def test_every_argument_crosses_one_gate(engine, name, value):
    """Any value of any argument: a processor whose settings are e1's typed values, or a one-line ConfigError."""
    kwargs = {**VALID, name: value}
    tokenizer = kwargs.pop("tokenizer", engine.tokenizer)
    try:
        processor = BudgetLogitsProcessor(tokenizer, **kwargs)
    except ConfigError as err:
        assert "\n" not in str(err) and err.message
        return
    made = processor.settings
    assert isinstance(made.budget, Budget) and isinstance(made.mode, Mode) and isinstance(made.sampling, Sampling)
    assert not made.mode.trials and made.samples_per_prompt >= 1
    assert made.seeds is None or all(isinstance(s, int) and 0 <= s < 2**64 for s in made.seeds)
    assert processor.max_new_tokens >= 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=st.integers(0, 5), prompts=st.integers(1, 3), row=st.integers(0, 2), shift=st.integers(1, 50))
def test_an_id_changed_at_the_final_step_is_refused(engine, step, prompts, row, shift):
    """A processor after e1's that changes one row's id at generate's last step (no next step to see it): the
    stopping criterion refuses it in one line, never returns a token e1 did not choose."""
    row = row % prompts

    def other(input_ids, scores):  # [B, V]: at ``step``, the finite id of ``row`` moves ``shift`` ids on
        if input_ids.shape[1] - width == step:
            scores[row] = torch.roll(scores[row], shift)
        return scores

    processor = BudgetLogitsProcessor(engine.tokenizer, 8, 8, temperature=0)
    texts = prompts_of(engine.tokenizer, prompts)
    inputs = engine.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    width = inputs["input_ids"].shape[1]
    with pytest.raises(ConfigError, match="where e1's budget chose") as err:
        engine.model.generate(
            **inputs, logits_processor=[processor, other], stopping_criteria=[processor.stopping_criteria],
            do_sample=False, max_new_tokens=step + 1, pad_token_id=engine.tokenizer.pad_token_id,
        )  # fmt: skip
    assert "\n" not in str(err.value)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 3), groups=st.integers(1, 2), temperature=st.sampled_from([0.0, 0.9]))
def test_samples_per_prompt_over_distinct_prompts_is_refused(engine, n, groups, temperature):
    """samples_per_prompt=n over n * groups distinct prompts (no num_return_sequences) would give each prompt
    another prompt's sample seeds: refused in one line; the same prompts repeated n times decode."""
    processor = BudgetLogitsProcessor(engine.tokenizer, 2, 2, temperature=temperature, samples_per_prompt=n)
    with pytest.raises(ConfigError, match="different prompts") as err:
        generate(engine, prompts_of(engine.tokenizer, n * groups), processor)
    assert "\n" not in str(err.value)
    assert len(generate(engine, prompts_of(engine.tokenizer, groups), processor, n)) == n * groups
