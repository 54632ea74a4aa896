"""The transformers backend: one batched KV-cache decode loop with a per-row phase state.

    engine = HFEngine.load("./my-model")
    completions = engine.generate(["What is 2+2?"], Budget(1024, 1024), Mode.parse("elastic"))

How it stays one pass: each step every active row consumes exactly one token — the one
the model sampled or, when its :class:`~e1.engine.row_state.RowState` says so, a forced one (the
end marker when thinking reaches ``t``). A forced token goes through the same forward as a
sampled one, into the running cache; nothing is prefilled twice. Samples of one prompt
share its prefill (the cache is expanded n-fold), and rows that finish are dropped from
the batch so the remaining ones decode at full speed.

Per step the loop avoids work that grows with the sequence: the KV cache and the attention
mask live in buffers that double when full (no ``torch.cat`` of the whole history per layer
per step), and with SDPA attention the mask is handed over already in its 4D additive form,
so transformers does not rebuild it and SDPA does not convert it in every layer. Attention
reads the cache in key buckets (:mod:`e1.engine.hf.kv_cache`): one decode presents a few attention
shapes, not a new one per token, which on a GPU each cost a one-off plan/kernel selection.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from e1.budget import Budget
from e1.cpu import pace
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.hf.kv_cache import growing_cache, key_bucket
from e1.engine.hf.sampling import draw_tokens
from e1.engine.markers import Markers, generation_eos, resolve_markers
from e1.engine.row_engine import RowEngine
from e1.engine.seeds import prompt_seeds, sample_seed
from e1.engine.spec import EngineSpec
from e1.errors import ConfigError, ModelError
from e1.store import CONTEXT_FIELDS

Progress = Callable[[int], None]  # called with the number of sequences just finished


def pick_device(device: str = "auto") -> torch.device:
    from e1.engine.load_options import check_device

    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # short names of --dtype
WEIGHT_DTYPES = ("float32", "bfloat16", "float16")


def checkpoint_dtype(model: str) -> str | None:
    """The dtype ``model``'s checkpoint was saved in (its config's ``dtype``/``torch_dtype``), or
    None when the config does not say (or cannot be read). ``--dtype auto`` is this dtype on every
    backend, so the transformers and vLLM backends decode the same weights (vLLM's own ``auto`` turns
    a float32 checkpoint into bfloat16)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError, TypeError):
        return None
    found = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(found).removeprefix("torch.") if found is not None else None
    return name if name in WEIGHT_DTYPES else None


def weights_dtype(dtype: str, model: str, on_cuda: bool) -> str:
    """The weights dtype ``--dtype`` means for ``model``: a named one as given; ``auto`` the
    checkpoint's (:func:`checkpoint_dtype`), or where its config does not say, bfloat16 on a GPU
    and float32 on the CPU."""
    dtype = DTYPE_NAMES.get(dtype, dtype)
    if dtype == "auto":
        return checkpoint_dtype(model) or ("bfloat16" if on_cuda else "float32")
    if dtype not in WEIGHT_DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}", hint="use auto, float32, bfloat16 or float16")
    return dtype


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(model: str):
    """The tokenizer of a model folder or hub id, with a one-line error when it is missing."""
    from transformers import AutoTokenizer

    from e1.store import check_model_path

    check_model_path(model)  # an empty folder, or one holding a GGUF, says so (not "no tokenizer files")
    folder = Path(model)
    if folder.is_dir() and not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ModelError(
            f"{model} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)",
            hint="copy the tokenizer files of the model it was trained from into the folder",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError, TypeError) as err:
        raise ModelError(
            f"no usable tokenizer for {model!r}: {str(err).splitlines()[0]}", hint=_load_hint(model)
        ) from err
    if isinstance(tokenizer, bool) or not hasattr(tokenizer, "encode"):
        raise ModelError(f"no usable tokenizer for {model!r}", hint=_load_hint(model))
    return tokenizer


def _load_hint(model: str) -> str:
    if Path(model).exists():
        return "the folder must hold a Hugging Face model: config.json, weights and tokenizer files"
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return "HF_HUB_OFFLINE=1 is set and the model is not in the local cache; pass a model folder"
    return "check the hub id, your network, or pass a local model folder"


def load_model(model: str, dtype: str = "auto", device: str = "auto"):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    torch_device = pick_device(device)
    try:
        weights = getattr(torch, weights_dtype(dtype, model, torch_device.type == "cuda"))
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=weights)
    except SafetensorError as err:
        raise ModelError(
            f"a weights file of {model!r} is damaged or incomplete: {str(err).splitlines()[0]}",
            hint="copy or download the model again (an interrupted copy leaves a truncated file)",
        ) from err
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot load model {model!r}: {str(err).splitlines()[0]}", hint=_load_hint(model)) from err
    return loaded.to(torch_device).eval()


def context_length(model) -> int | None:
    config = model.config
    for name in CONTEXT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class HFEngine(RowEngine):
    """Budgeted decoding with a transformers causal LM."""

    def __init__(self, model, tokenizer, markers: Markers, batch_size: int = 64):
        if batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {batch_size}")
        self.model, self.tokenizer, self.markers, self.batch_size = model, tokenizer, markers, batch_size
        self.max_context = context_length(model)
        # the prefill needs only the last position's logits; models that can skip the rest say so
        accepts = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._last_logit_only = {"logits_to_keep": 1} if accepts else {}
        self._cache = cache_keyword(model)
        self._sdpa = getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"
        self.key_bucket = key_bucket  # the key columns a decode step attends over (e1.engine.hf.kv_cache)

    @classmethod
    def load(cls, model: str, spec: EngineSpec = EngineSpec(), *, batch_size: int = 64) -> HFEngine:
        """``spec``'s dtype, device and think markers (its vLLM settings are not transformers')."""
        tokenizer = load_tokenizer(model)  # fail fast, before the weights load
        markers = resolve_markers(tokenizer, spec.think_start, spec.think_end, generation_eos(model))
        return cls(load_model(model, spec.dtype, spec.device), tokenizer, markers, batch_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> str:
        """The weights' dtype, e.g. ``float32`` (the run's summary line says it)."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @torch.inference_mode()
    def generate(
        self,
        prompts,
        budget: Budget,
        mode: Mode = Mode(),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress: Progress | None = None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]:
        mode, prompt_ids, rows = self.prepare(prompts, budget, mode, sampling, n)
        per_prompt = prompt_seeds(sampling, len(prompt_ids), seeds)
        row_seeds = [sample_seed(per_prompt[p], j) for p, j in rows]
        states, taken = self.start_states(prompt_ids, rows, budget, mode, sampling, prefixes)
        todo = [i for i, state in enumerate(states) if not state.done]  # rows a prefix finished need no decoding
        if progress and len(todo) < len(rows):
            progress(len(rows) - len(todo))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            self._decode_chunk(
                [prompt_ids[rows[i][0]] for i in chunk],
                [states[i] for i in chunk],
                [row_seeds[i] for i in chunk],
                sampling,
                progress,
            )
        return self.completions(states, rows, prompt_ids, taken)

    def _decode_chunk(
        self, prompts: list[list[int]], states: list, row_seeds: list[int], sampling: Sampling, progress
    ) -> None:
        """Decode rows until their states are done. Row b continues from ``prompts[b]`` plus the ids its
        state already holds (a followed prefix); rows with the same context (a prompt's samples) share
        one prefill. Each step attends over ``key_bucket(length)`` key columns (see
        :mod:`e1.engine.hf.kv_cache`): the mask's columns past the cache's keys are False."""
        cache, logits, mask, next_pos = self._prefill(prompts, states)
        active = list(range(len(states)))  # row index of each batch slot
        seeds = np.array(row_seeds, dtype=np.uint64)  # [B]
        finished_since_compaction = 0
        trialing = states[0].mode.trials  # rows that may decode trial answers (one mode per call)
        length, dtype = cache.get_seq_length(), self._mask_dtype()  # keys in the cache, the same for every row
        while True:
            pace()  # torch's CPU team for the cores other processes leave free (e1.cpu)
            tokens = draw_tokens(logits, [states[row] for row in active], seeds[active], sampling)  # [B], soft's bias
            fed, finished, rewinds = _accept_step(
                states,
                active,
                tokens,
                _trial_picks(logits, states, active) if trialing else {},
                self.markers.pad_id,
                progress,
            )
            finished_since_compaction += finished
            if all(states[row].done for row in active):
                break
            if finished_since_compaction and finished_since_compaction * 8 >= len(active):  # drop finished rows
                keep = [slot for slot, row in enumerate(active) if not states[row].done]
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
                fed = [fed[slot] for slot in keep]
                active = [active[slot] for slot in keep]
                finished_since_compaction = 0
            step = torch.tensor(fed, device=self.device).unsqueeze(-1)  # [B, 1]
            length += 1  # the new token's key
            width = self.key_bucket(length)  # [B, width] keys attended: few distinct widths per decode
            mask = _with_room(mask, width)
            mask[:, length - 1] = True
            if rewinds:
                next_pos = _rewind(mask, next_pos, active, rewinds, length)
            logits = self.model(
                input_ids=step,
                attention_mask=self._step_mask(mask[:, :width], dtype),
                position_ids=next_pos.unsqueeze(-1),
                **{self._cache: cache},
                use_cache=True,
            ).logits[:, -1]  # [B, V]
            next_pos = next_pos + 1

    def _prefill(self, prompts: list[list[int]], states: list):
        """Prefill each distinct context once, left-padded, then expand to one row per sample:
        (cache, the next logits [B, V], the attention mask [B, W], the next positions [B])."""
        contexts = [tuple(prompt) + tuple(state.tokens) for prompt, state in zip(prompts, states)]
        where = {context: i for i, context in enumerate(dict.fromkeys(contexts))}
        unique = list(where)

        width = max(map(len, unique))
        ids = torch.full((len(unique), width), self.markers.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unique), width), dtype=torch.long)
        for i, context in enumerate(unique):
            ids[i, width - len(context) :] = torch.tensor(context)
            mask[i, width - len(context) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)  # [P, W]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [P, W]
        cache = growing_cache(width + max(s.max_new_tokens - len(s.tokens) for s in states), self.key_bucket)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **{self._cache: cache},
            use_cache=True,
            **self._last_logit_only,
        ).logits[:, -1]  # [P, V]
        expand = torch.tensor([where[c] for c in contexts], device=self.device)  # [B]
        cache.batch_select_indices(expand)
        logits, mask = logits[expand], mask[expand].bool()  # [B, V], [B, W]
        next_pos = positions[expand, -1] + 1  # [B]
        return cache, logits, mask, next_pos

    def _step_mask(self, mask: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        """The attention mask of one decode step. mask: [B, L] bool.
        SDPA's mask for a single query is the padding mask itself, [B, 1, 1, L]: handed over in
        4D it spares transformers rebuilding it, and as an additive ``dtype`` mask (0 or -inf,
        what SDPA turns a bool mask into) it is converted once per step, not once per layer.
        Other attention implementations get the 2D mask."""
        if self._sdpa and dtype is not None:
            bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
            return bias[:, None, None, :]  # [B, 1, 1, L]
        if self._sdpa:
            return mask[:, None, None, :]  # [B, 1, 1, L] bool
        return mask.long()  # [B, L]

    def _mask_dtype(self) -> torch.dtype | None:
        """The dtype of the model's queries (its embeddings'), which an additive SDPA mask must have;
        None when the model does not say (the mask then stays bool)."""
        embeddings = getattr(self.model, "get_input_embeddings", lambda: None)()
        dtype = getattr(getattr(embeddings, "weight", None), "dtype", None)
        return dtype if dtype is not None and dtype.is_floating_point else None

    # ---- training: the rollout engine of e1.grpo.rollout ------------------------------------

    @property
    def can_sleep(self) -> bool:
        """False: transformers decodes with a module the trainer holds; there is no memory to give back."""
        return False

    def sync_weights(self, module: torch.nn.Module) -> None:
        """Decode with ``module``'s weights from now on: nothing to do when it is the module this
        engine decodes with (the policy itself), else its tensors are copied in (a ZeRO-3 copy)."""
        if module is self.model:
            return
        with torch.no_grad():
            for target, source in zip(self.model.parameters(), module.parameters()):
                target.copy_(source.data)

    def sleep(self, level: int = 2) -> None:
        """Nothing to free (see :attr:`can_sleep`)."""

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to take back (see :attr:`can_sleep`)."""


def _accept_step(states: list, active: list[int], tokens: list[int], picks: dict, pad_id: int, progress):
    """Hand each active row its sampled token (or, in a trial answer, its greedy pick and probability):
    (the ids to feed [B], how many rows just finished, {row: cache columns a just-ended trial leaves to mask})."""
    fed, finished, rewinds = [], 0, {}
    for slot, row in enumerate(active):
        state = states[row]
        if state.done:
            fed.append(pad_id)
            continue
        fed.append(state.accept(*picks[slot]) if slot in picks else state.accept(tokens[slot]))  # forced overrides
        if state.rollback:
            rewinds[row] = state.rollback
        if state.done:
            finished += 1
            if progress:
                progress(1)
    return fed, finished, rewinds


def _trial_picks(logits: torch.Tensor, states: list, active: list[int]) -> dict[int, tuple[int, float]]:
    """{slot: (greedy token, its probability at temperature 1)} for the rows decoding a trial answer."""
    slots = [slot for slot, row in enumerate(active) if states[row].trial_answering]
    if not slots:
        return {}
    best, token = torch.softmax(logits[slots].float(), dim=-1).max(dim=-1)  # [T], [T]
    return dict(zip(slots, zip(token.tolist(), best.tolist())))


def _rewind(mask: torch.Tensor, next_pos: torch.Tensor, active: list[int], rewinds: dict[int, int], length: int):
    """Roll back ended trials: a row re-feeds its last real token (the new column ``length - 1``) at
    that token's own position, with the ``r`` columns before it (its first copy and the trial's) masked
    out — they stay in the cache, unseen. mask: [B, >= length] bool, changed in place; returns positions [B]."""
    next_pos = next_pos.clone()  # [B]
    for slot, row in enumerate(active):
        if row in rewinds:
            r = rewinds[row]
            mask[slot, length - 1 - r : length - 1] = False
            next_pos[slot] -= r
    return next_pos


def _with_room(mask: torch.Tensor, width: int) -> torch.Tensor:
    """``mask`` ([B, C] bool) with at least ``width`` columns, doubling C when it is short.
    New columns are False: a key column is switched on when its token is fed."""
    if mask.shape[1] >= width:
        return mask
    return torch.cat([mask, mask.new_zeros((mask.shape[0], max(width, 2 * mask.shape[1]) - mask.shape[1]))], dim=-1)


def cache_keyword(model) -> str:
    """The keyword under which ``model``'s forward takes its KV cache: ``cache`` from transformers
    5.24, where ``past_key_values`` still works but warns (a FutureWarning on every decoded token);
    ``past_key_values`` before it. A DeepSpeed engine is asked about the model it wraps."""
    forward = getattr(getattr(model, "module", model), "forward", None)
    try:
        parameters = inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a forward without a signature: the name every version takes
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"
