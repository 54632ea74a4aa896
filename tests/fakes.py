"""A scripted fake causal LM for engine tests.

It keeps each row's token history in the KV cache itself (the ids stored as "keys"), so it
follows the engine through prefill sharing and row compaction exactly as a real model's
cache would. For a prompt scripted as (k, m) it thinks for k tokens — the last of which
complete the end marker — then writes m solution tokens, the last being EOS. ``k=None``
never ends thinking. After any end marker in its history (natural or forced) it switches to
the solution, so forced markers are exercised too.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


class ScriptedModel(torch.nn.Module):
    def __init__(
        self,
        vocab_size: int,
        scripts: dict[tuple, tuple],
        markers,
        think_token: int,
        solve_token: int,
        max_positions: int = 4096,
        solution: list[int] | None = None,
    ):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the engine a device
        self.config = SimpleNamespace(max_position_embeddings=max_positions)
        self.vocab_size, self.scripts, self.markers = vocab_size, scripts, markers
        self.think_token, self.solve_token = think_token, solve_token
        self.eos = min(markers.eos_ids)
        self.default_script = (None, 2)  # for prompts not in `scripts`: think until forced
        self.solution = solution  # if given: the solution written token by token (m is then ignored)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache=True):
        history, _ = past_key_values.update(input_ids.float()[:, None, :, None], input_ids.float()[:, None, :, None], 0)
        history = history[:, 0, :, 0].long()  # [B, T]
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab_size), -1e9)
        for row in range(input_ids.shape[0]):
            valid = history[row][attention_mask[row].bool()].tolist()
            logits[row, -1, self._next(valid)] = 0.0
        return SimpleNamespace(logits=logits)

    def _next(self, tokens: list[int]) -> int:
        prompt = next((p for p in self.scripts if tuple(tokens[: len(p)]) == p), None)
        k, m = self.scripts[prompt] if prompt is not None else self.default_script
        prompt = prompt or ()
        generated = tokens[len(prompt) :]
        end = list(self.markers.end_ids)
        ends = [i + len(end) for i in range(len(generated) - len(end) + 1) if generated[i : i + len(end)] == end]
        if ends and self.solution is not None:
            written = len(generated) - ends[-1]
            return self.solution[written] if written < len(self.solution) else self.eos
        if ends:  # solving: m - 1 solution tokens, then EOS
            return self.solve_token if len(generated) - ends[-1] < m - 1 else self.eos
        if k is not None:
            script = [self.think_token] * (k - len(end)) + end
            if len(generated) < k:
                return script[len(generated)]
        return self.think_token


class Interrupting:
    """Wraps an engine; raises KeyboardInterrupt on the k-th generate call (a kill mid-run)."""

    def __init__(self, engine, fail_on: int):
        self.engine, self.fail_on, self.calls = engine, fail_on, 0
        self.tokenizer, self.markers = engine.tokenizer, engine.markers

    def generate(self, *args, **kw):
        self.calls += 1
        if self.calls == self.fail_on:
            raise KeyboardInterrupt
        return self.engine.generate(*args, **kw)


def assert_engine_invariants(c, budget, mode, end_ids, max_tokens: int, exit_ids=()) -> None:
    """The engine contract every backend must keep for one completion, whatever was sampled.
    ``exit_ids``: the mode's exit text, forced before the end marker."""
    from e1.engine.base import Mode

    mode = Mode.parse(mode)
    name = mode.name
    assert len(c.token_ids) == len(c.forced_mask)
    assert c.finish_reason in ("stop", "length")
    if name in ("elastic", "soft"):
        limit = mode.think_limit(budget)  # t, or soft's ceiling
        assert c.think_tokens <= limit + mode.grace and c.solve_tokens <= budget.solve
        # prefilled: the prompt closed thinking itself (its last marker the end one): all solution, nothing forced
        assert c.think_end in ("natural", "budget", "pattern", "open", "unopened") or (
            c.think_end == "prefilled" and not c.think_tokens and not c.forced
        )
        assert c.forced == (c.think_end == "budget") and c.closed == (c.think_end not in ("open", "unopened"))
        natural_end = c.think_end == "natural"
        if c.think_end == "pattern":  # a stop pattern matched: forced whenever it matched, before the limit
            assert mode.stop and c.think_tokens <= limit + mode.grace
        elif mode.grace:  # inside the window a row may also end by EOS or run out of room, unforced
            assert not c.forced or limit <= c.think_tokens <= limit + mode.grace
        else:
            assert c.forced == (c.think_tokens == limit and not natural_end)
        forced_ids = [t for t, f in zip(c.token_ids, c.forced_mask) if f]
        cut = list(exit_ids) if c.think_end == "budget" else []  # a pattern forces the bare marker
        assert forced_ids == (cut + list(end_ids) if c.think_end in ("budget", "pattern") else [])
        assert len(c.token_ids) == c.think_tokens + c.solve_tokens + len(forced_ids)
    elif name == "truncate":
        assert c.think_tokens + c.solve_tokens <= budget.total and not c.forced
    elif name == "none":
        assert not c.forced and len(c.token_ids) <= max_tokens
    else:
        assert c.think_tokens <= budget.think and c.solve_tokens <= budget.solve


def build_chatty_model(path):
    """The tiny model with its </think> and EOS embeddings scaled up, so rows sometimes end by themselves."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from e1.models.tiny import build_tiny_model

    path = build_tiny_model(path)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        for token in ("</think>", "<|im_end|>"):
            model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(token)] *= 16
    model.save_pretrained(path)
    return path


def engine_pair(path):
    """(vLLM, transformers) engines on one model folder, float32 on the CPU, with one context length."""
    import os

    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.vllm_engine import VLLMEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    vllm_engine = VLLMEngine.load(str(path), EngineSpec(dtype="float32", max_model_len=512), colocate=True)
    hf_engine = HFEngine.load(str(path), EngineSpec(dtype="float32", device="cpu"))
    hf_engine.max_context = vllm_engine.max_context
    return vllm_engine, hf_engine
