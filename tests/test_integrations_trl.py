"""e1's budgeted rollouts inside TRL's GRPOTrainer (e1.integrations.trl): two real training steps on a tiny
model, every rollout within (t, s), the forced marker in the completion ids and out of TRL's loss mask;
the two gates (the integration's arguments, the trainer's settings) over generated values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine import Mode
from e1.errors import E1Error
from e1.integrations import BudgetedRollouts, budgeted_rollouts, sampling_of

trl = pytest.importorskip("trl")

THINK, SOLVE = 4, 6


def trl_trainer(model_dir, rollouts, out, record: dict, **config):
    """A GRPOTrainer on the tiny model whose rollouts are e1's, recording what each step trains on."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    class Recording(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            record.setdefault("batches", []).append(batch)
            return batch

    def rollout_func(prompts, trainer):
        output = rollouts(prompts, trainer)
        record.setdefault("rollouts", []).append(output)
        return output

    def reward(completions, e1_completion, e1_think_tokens, **_):
        record.setdefault("rewards", []).append((list(e1_completion), list(e1_think_tokens)))
        return [float(len(c.solution or "")) for c in e1_completion]

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=THINK
        + SOLVE
        + 3,  # + <think> (forced where a prompt leaves it to the model), </think>, room
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        model_init_kwargs={"dtype": torch.float32},
        seed=0,
        **({"max_steps": 2} | config),
    )
    prompts = [[{"role": "user", "content": f"What is {i} + {i}?" + " x" * i}] for i in range(8)]
    return Recording(
        model=str(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        rollout_func=rollout_func,
    )


@pytest.mark.filterwarnings("ignore")
def test_two_trl_steps_roll_out_within_the_budget_with_the_forced_marker_masked(tiny_model_dir, tmp_path):
    record: dict = {}
    rollouts = budgeted_rollouts(think=THINK, solve=SOLVE, forced_tokens="mask")
    trainer = trl_trainer(tiny_model_dir, rollouts, tmp_path / "trl", record)
    trainer.train()
    assert trainer.state.global_step == 2 and len(record["rollouts"]) == 2 == len(record["batches"])
    end = trainer.processing_class.convert_tokens_to_ids("</think>")
    cut = 0
    for output, batch in zip(record["rollouts"], record["batches"]):
        # the tiny template opens <think>: a completion is thinking, </think>, solution (TRL's own ids)
        for ids, env_mask in zip(output["completion_ids"], output["env_mask"]):
            think = ids.index(end) if end in ids else len(ids)
            assert think <= THINK and len(ids) - think - 1 <= SOLVE  # within (t, s) exactly
            if think == THINK:  # thinking reached t: the marker is the forced id at t, and out of the loss
                cut += 1
                assert env_mask == [1] * THINK + [0] + [1] * (len(ids) - THINK - 1)
            else:  # the model closed thinking itself (or never did): nothing forced, all trained
                assert env_mask == [1] * len(ids)
        # TRL's loss mask is completion_mask * tool_mask (grpo_trainer.py:2497, :3027): e1's mask, padded
        trained = (batch["completion_mask"] * batch["tool_mask"]).tolist()
        for ids, env_mask, row in zip(output["completion_ids"], output["env_mask"], trained):
            assert row[: len(ids)] == env_mask and not any(row[len(ids) :])
        assert batch["prompt_ids"].shape[0] == len(output["completion_ids"]) == 4  # one completion per prompt row
    assert cut > 0, "no rollout reached t: the test would not see a forced marker"
    for texts, think_tokens in record["rewards"]:
        assert all(t <= THINK for t in think_tokens) and all("</think>" in t for t in texts if t.solution is not None)


@pytest.mark.filterwarnings("ignore")
def test_forced_tokens_train_keeps_the_forced_marker_in_the_loss(tiny_model_dir, tmp_path):
    record: dict = {}
    trainer = trl_trainer(tiny_model_dir, budgeted_rollouts(THINK, SOLVE), tmp_path / "trl", record, max_steps=1)
    trainer.train()
    assert all(set(mask) == {1} for output in record["rollouts"] for mask in output["env_mask"])


# ---- the gate of the integration's arguments ------------------------------------------------------------

TEXTS = st.one_of(st.text(max_size=12), st.sampled_from(["1k", "1.5k", "0", "-1", "2K", " 8 ", "1e3", "nan"]))
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=True), TEXTS)


@settings(max_examples=150, deadline=None)
@given(
    think=VALUES,
    solve=VALUES,
    mode=st.one_of(
        st.sampled_from(["elastic", "truncate", "none", "soft:strength=4", "elastic:grace=3", "early-exit"]),
        st.text(max_size=20),
        st.integers(),
    ),
    forced=st.one_of(st.sampled_from(["train", "mask", "Mask", ""]), st.integers(), st.none()),
    marker=st.one_of(st.none(), st.just("</think>"), st.text(max_size=300), st.integers()),
    batch_size=VALUES,
)
def test_the_arguments_become_rollouts_or_one_line(think, solve, mode, forced, marker, batch_size):
    try:
        rollouts = budgeted_rollouts(think, solve, mode, forced, think_end=marker, batch_size=batch_size)
    except E1Error as err:
        assert "\n" not in str(err) and str(err)
        return
    assert isinstance(rollouts, BudgetedRollouts) and rollouts.mode.bounded
    assert rollouts.forced_tokens in ("train", "mask") and rollouts.batch_size >= 1
    assert rollouts.budget.think >= 0 and rollouts.budget.solve >= 1
    assert marker is None or (isinstance(marker, str) and marker.strip() and len(marker) <= 256)


@settings(max_examples=100, deadline=None)
@given(
    budget=st.one_of(st.builds(Budget, st.integers(0, 99), st.integers(1, 99)), st.text(max_size=4), st.none()),
    mode=st.one_of(st.sampled_from(["elastic", "none", "truncate"]).map(Mode.parse), st.text(max_size=8)),
    forced=st.one_of(st.sampled_from(["train", "mask"]), st.text(max_size=5), st.integers()),
    marker=st.one_of(st.none(), st.just("</think>"), st.just(" "), st.integers()),
    batch_size=st.one_of(st.integers(-2, 10**6), st.floats(), st.booleans()),
)
def test_rollouts_built_directly_are_checked_alike(budget, mode, forced, marker, batch_size):
    try:
        rollouts = BudgetedRollouts(budget, mode, forced, None, marker, batch_size)
    except E1Error as err:
        assert "\n" not in str(err) and str(err)
        return
    assert isinstance(rollouts.budget, Budget) and isinstance(rollouts.mode, Mode) and rollouts.mode.bounded
    assert forced in ("train", "mask") and 1 <= batch_size <= 65536 and batch_size is not True
    assert marker in (None, "</think>")


# ---- the gate of the trainer's settings ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


NEUTRAL = dict(
    use_vllm=False,
    use_transformers_continuous_batching=False,
    min_p=None,
    repetition_penalty=1.0,
    generation_kwargs=None,
    cache_implementation=None,
    temperature=1.0,
    top_p=1.0,
    top_k=0,
    seed=0,
    max_completion_length=512,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changed=st.dictionaries(
        st.sampled_from(sorted(NEUTRAL)),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-5, 10**6),
            st.floats(allow_nan=True),
            st.just({"num_beams": 2}),
            st.just({}),
            st.text(max_size=8),
        ),
        max_size=3,
    ),
    think=st.integers(0, 600),
)
def test_the_trainer_settings_become_sampling_or_one_line(tokenizer, changed, think):
    args = SimpleNamespace(**(NEUTRAL | changed))
    trainer = SimpleNamespace(args=args, processing_class=tokenizer)
    rollouts = budgeted_rollouts(think, 8)
    try:
        sampling = sampling_of(trainer, rollouts)
    except E1Error as err:
        assert "\n" not in str(err) and str(err)
        return
    for name in ("use_vllm", "use_transformers_continuous_batching", "min_p", "cache_implementation"):
        assert getattr(args, name) in (None, False) and getattr(args, name) is not True
    assert args.repetition_penalty == 1.0 and not args.generation_kwargs
    longest = rollouts.max_tokens(tokenizer)
    assert longest == think + 8 + 2 + 1  # t + s, one-token <think> and </think> (either may be forced), room for one
    assert args.max_completion_length is None or args.max_completion_length >= longest
    assert (sampling.temperature, sampling.top_p, sampling.seed) == (args.temperature, args.top_p, args.seed)


def test_a_setting_e1_would_ignore_is_refused_by_name(tokenizer):
    trainer = SimpleNamespace(args=SimpleNamespace(**(NEUTRAL | {"min_p": 0.1})), processing_class=tokenizer)
    with pytest.raises(E1Error, match=r"GRPOConfig\(min_p=0.1\) is not honoured"):
        sampling_of(trainer, budgeted_rollouts(4, 4))
    trainer.args.min_p, trainer.args.max_completion_length = None, 9
    with pytest.raises(E1Error, match="max_completion_length=11"):
        sampling_of(trainer, budgeted_rollouts(4, 4))


@settings(max_examples=80, deadline=None)
@given(
    step=st.integers(0, 10**6),
    micros=st.tuples(st.integers(0, 63), st.integers(0, 63)).filter(lambda pair: pair[0] != pair[1]),
    extra=st.integers(1, 64),
    rows=st.integers(1, 8),
)
def test_every_generation_of_one_optimizer_step_draws_its_own_seeds(step, micros, extra, rows):
    """steps_per_generation below gradient_accumulation_steps: TRL generates several times in one optimizer step
    (``trainer._step`` advancing, ``global_step`` not); each generation's rows get seeds of their own (the same
    prompt at the same row would otherwise draw the same rollout), and the same micro-step draws alike again."""
    from e1.integrations.trl import rollout_seeds

    first, second = micros
    accumulation = max(micros) + extra

    def trainer(micro: int):
        return SimpleNamespace(
            args=SimpleNamespace(seed=0),
            state=SimpleNamespace(global_step=step),
            accelerator=SimpleNamespace(process_index=0),
            current_gradient_accumulation_steps=accumulation,
            _step=step * accumulation + micro,
        )

    one, other = rollout_seeds(trainer(first), rows), rollout_seeds(trainer(second), rows)
    assert not set(one) & set(other)
    assert rollout_seeds(trainer(first), rows) == one
