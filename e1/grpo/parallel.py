"""How the trainer's update runs: on one device (torch AdamW), or data-parallel with DeepSpeed ZeRO.

    strategy = parallel_strategy(config, model, rank, world)   # SingleDevice or ZeRO
    strategy.zero_grad()
    for mb in mini_batch:
        strategy.backward(objective(mb, strategy.normalizer(local_count))[0])
    grad_norm = strategy.step()
    with strategy.full_weights() as module: ...   # every weight, gathered under ZeRO-3

Both give the trainer the same small interface, so its step never asks which one runs.
ZeRO (stage 1, 2 or 3) is launched by ``torchrun`` or ``deepspeed``::

    torchrun --nproc_per_node 2 -m e1 train --config train.toml --deepspeed zero2
    deepspeed --num_gpus 8 $(which e1) train --config train.toml --deepspeed ds.json

How one step is split over W ranks:

- **Rollouts.** Every rank draws the same step's problems (same seed) and keeps every W-th one
  from its rank; its shard is cut into mini-batches of ``mini_batch_prompts / W`` problems, so
  every optimizer step sees ``mini_batch_prompts`` problems in all. A prompt's whole group lives
  on one rank: rewards and advantages stay per group and local. With W = 1 the metrics equal the
  single-device loop's (tested); with W > 1 the rollouts differ (decoding batches differ).
- **Loss normalisation.** ZeRO averages gradients over ranks, so each rank passes the mini-batch's
  *global* token count / W as the normaliser (see :mod:`e1.grpo.core`): the averaged gradient is
  that of the single-device loss. ``engine.backward(loss, scale_wrt_gas=False)`` stops DeepSpeed
  dividing again by its accumulation steps; ``gradient_accumulation_steps`` is the micro-batches
  per rank per mini-batch, so ``engine.step()`` steps the optimizer exactly at mini-batch ends.
- **ZeRO-3 rollouts.** A partitioned module cannot decode alone (each layer's forward is a
  collective, and ranks stop decoding at different times), so under stage 3 (``resident`` is
  False) transformers rollouts use a plain copy of the policy on every rank, refreshed in the
  ``sync`` phase from :meth:`ZeRO.full_weights`. Under stages 1–2 every rank holds the full
  weights and decodes with the policy module itself.
- **Checkpoints.** ``checkpoints/step_N`` is the Hugging Face folder (``e1 eval`` loads it) plus,
  at resume points (``--resume-every``), ``deepspeed/``: DeepSpeed's own sharded optimizer state
  (fp32 master weights and Adam moments, 12 bytes a weight over the ranks), which resume loads.
  Ranks need a shared filesystem for ``--out``. ``e1.grpo.memory`` counts what each rank holds.

Precision: bf16 when ``dtype = "bfloat16"`` (use it on GPUs), else fp32. Optimizer: torch's AdamW
(``"torch_adam": true``), which needs no compiled op. Importing this module does not import torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

from e1.errors import ConfigError

PRESETS = {"zero1": 1, "zero2": 2, "zero3": 3}


class SingleDevice:
    """Plain torch on one device: AdamW, global-norm clipping, nothing to reduce."""

    rank, world, resident = 0, 1, True

    def __init__(self, model, config):
        import torch

        self.model = self.policy = model  # forwards and weights: the same module
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.grad_clip = config.grad_clip

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss) -> None:
        loss.backward()

    def step(self) -> float:
        """Clip and step at the end of a mini-batch; the gradient norm before clipping."""
        import torch

        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return float(norm)

    def normalizer(self, local: float) -> float:
        return local

    def sum(self, values: list[float]) -> list[float]:
        return values

    def gather(self, items: list) -> list:
        return items

    def full_weights(self):
        return nullcontext(self.policy)

    def reference(self, load: Callable[[str], object]):
        """The frozen reference model of the KL term: ``load(device)``'s whole model, on the policy's device."""
        return load(str(next(self.policy.parameters()).device)).requires_grad_(False)

    def save_optimizer(self, directory: Path) -> dict:
        """The optimizer state, to store in the checkpoint's state file."""
        return self.optimizer.state_dict()

    def load_optimizer(self, directory: Path, saved: dict) -> None:
        self.optimizer.load_state_dict(saved)

    def barrier(self) -> None:
        pass

    def finish(self) -> None:
        pass


class ZeRO:
    """DeepSpeed ZeRO over the ranks of a process group; see the module docstring."""

    def __init__(self, model, config, rank: int, world: int):
        import deepspeed

        rows = config.mini_batch_prompts // world * config.samples_per_prompt  # per rank per optimizer step
        ds_config = deepspeed_config(config.deepspeed, config, world, micro_batches=-(-rows // config.micro_batch))
        self.engine, *_ = deepspeed.initialize(
            model=model, config=ds_config, model_parameters=[p for p in model.parameters() if p.requires_grad]
        )
        self.model, self.policy, self.optimizer = self.engine, self.engine.module, self.engine.optimizer
        self.rank, self.world, self.ds_config = rank, world, ds_config
        self.resident = self.engine.zero_optimization_stage() < 3  # every rank holds every weight
        self.ref_offload = config.ref_offload

    def reference(self, load: Callable[[str], object]):
        """The frozen reference model, held as the policy is: under stages 1-2 a whole copy on
        every rank (no optimizer shards it); under ZeRO-3 a DeepSpeed engine with no optimizer
        (:func:`reference_config`) that partitions it over the ranks like the policy and gathers
        each layer for its forward. Under ZeRO-3 it is built partitioned (:func:`zero3_loading`),
        so no rank ever holds all of it on the accelerator, at load or after; with
        ``ref_offload`` its partition lives in CPU memory from the start."""
        import deepspeed
        import torch

        if self.resident:
            return load(str(self.engine.device)).requires_grad_(False)
        config = reference_config(self.ds_config, self.ref_offload)
        with zero3_loading(config):
            # on the policy's device: only the module's buffers (rotary tables) move there whole;
            # each weight is by now an empty placeholder there and its partition where config says
            model = load(str(self.engine.device)).requires_grad_(False)
        # Weights made under zero.Init carry ``ds_id``, so DeepSpeed's engine skips its whole-module
        # ``self.module.to(self.device)`` (deepspeed 0.19.8 runtime/engine.py:2077-2094,
        # _configure_distributed_model) and ZeRO-3 keeps the partitions where zero.Init put them.
        engine, *_ = deepspeed.initialize(model=model, config=config)
        engine.eval()  # DeepSpeed's eval() returns None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the per-layer gathers of the load, back to the allocator's pool
        return engine

    def zero_grad(self) -> None:
        pass  # DeepSpeed clears gradients itself when it steps

    def backward(self, loss) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)  # e1's normaliser already averages
        self.engine.step()  # steps the optimizer only at the mini-batch's last micro-batch

    def step(self) -> float:
        return float(self.engine.get_global_grad_norm())  # before clipping, like clip_grad_norm_

    def normalizer(self, local: float) -> float:
        return self.sum([float(local)])[0] / self.world  # ranks' gradients are averaged: global count / W

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (gloo and nccl both accept a float64 tensor on the right device)."""
        import torch
        import torch.distributed as dist

        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, items: list) -> list:
        """Every rank's list, concatenated in rank order."""
        import torch.distributed as dist

        parts = [None] * self.world
        dist.all_gather_object(parts, items)
        return [x for part in parts for x in part]

    @contextmanager
    def full_weights(self):
        """The policy with all its weights; under ZeRO-3 gathered on every rank (all ranks enter)."""
        if self.resident:
            yield self.policy
            return
        import deepspeed
        import torch

        with deepspeed.zero.GatheredParameters(list(self.policy.parameters()), modifier_rank=None), torch.no_grad():
            yield self.policy

    def save_optimizer(self, directory: Path) -> None:
        """Every rank writes its shard of the optimizer state under ``directory/deepspeed``."""
        self.engine.save_checkpoint(str(directory / "deepspeed"), tag="state", save_latest=False)

    def load_optimizer(self, directory: Path, saved: None) -> None:
        self.engine.load_checkpoint(str(directory / "deepspeed"), tag="state")

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def finish(self) -> None:
        """Leave the process group together: a rank exiting while another still talks aborts (SIGABRT)."""
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


Parallel = SingleDevice | ZeRO


def launch(config) -> tuple[int, int, str]:
    """(rank, world size, device) of this process; under DeepSpeed, starts the process group."""
    if config.deepspeed is None:
        return 0, 1, config.engine.device
    check_divisible(config, world_size())
    import deepspeed
    import torch

    cuda = torch.cuda.is_available() and config.engine.device != "cpu"
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), f"cuda:{local}" if cuda else "cpu"


def parallel_strategy(config, model, rank: int, world: int) -> Parallel:
    """ZeRO over ``model`` when ``config.deepspeed`` is set (after :func:`launch`), else one device."""
    return SingleDevice(model, config) if config.deepspeed is None else ZeRO(model, config, rank, world)


def deepspeed_config(spec: str, config, world_size: int, micro_batches: int) -> dict:
    """The DeepSpeed config of ``--deepspeed zero1|zero2|zero3|FILE.json``; e1's own keys win.

    ``micro_batches`` is the number of micro-batches per rank in one mini-batch (one optimizer step).
    """
    return deepspeed_base(spec) | {
        "train_micro_batch_size_per_gpu": config.micro_batch,
        "gradient_accumulation_steps": micro_batches,
        "train_batch_size": config.micro_batch * micro_batches * world_size,
        "gradient_clipping": config.grad_clip,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": config.lr, "weight_decay": config.weight_decay, "torch_adam": True},
        },
        "bf16": {"enabled": config.engine.dtype == "bfloat16"},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,
    }


def reference_config(policy: dict, offload: bool) -> dict:
    """The inference-only ZeRO-3 config of the reference model: the policy's, less the optimizer
    and its clipping (nothing steps it), with ``offload_param`` to the CPU when ``offload``."""
    zero = {**policy.get("zero_optimization", {}), "stage": 3}
    zero.pop("offload_optimizer", None)
    if offload:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    dropped = ("optimizer", "scheduler", "gradient_clipping", "zero_optimization")
    return {key: value for key, value in policy.items() if key not in dropped} | {"zero_optimization": zero}


@contextmanager
def zero3_loading(config: dict):
    """While open, transformers' ``from_pretrained`` builds a model partitioned under ZeRO-3 with
    ``config``: it creates the modules inside ``deepspeed.zero.Init(config_dict_or_path=config)``
    (transformers 5.x modeling_utils, ``_from_config``/``get_init_context``), which partitions
    each module's weights as soon as that module is built (deepspeed 0.19.8
    runtime/zero/partition_parameters.py:1232-1254, ``Init._post_init_method``) onto the
    ``offload_param`` device when the config has one (the same file, lines 1160-1169: CPU memory
    with ``ref_offload``), then loads the checkpoint one module at a time, gathering only that
    module's weights (transformers' ``_load_state_dict_into_zero3_model``). Transformers learns of
    ZeRO-3 from a registered config object; its own ``HfDeepSpeedConfig`` needs ``accelerate``, so
    this registers a minimal one (the two things transformers asks of it) and clears it on exit,
    so later loads (a rollout copy, a whole model) load whole again."""
    from transformers import integrations

    registered = _ZeRO3Config(config)  # transformers keeps only a weak reference: held here
    integrations.set_hf_deepspeed_config(registered)
    try:
        yield registered
    finally:
        integrations.unset_hf_deepspeed_config()


class _ZeRO3Config:
    """What transformers reads of a registered DeepSpeed config: ``config`` and ``is_zero3()``."""

    def __init__(self, config: dict):
        self.config = config

    def is_zero3(self) -> bool:
        return self.config.get("zero_optimization", {}).get("stage") == 3


def zero_stage(spec: str) -> int:
    """The ZeRO stage that ``--deepspeed spec`` runs (a preset's, or the JSON file's; 0 if it sets none)."""
    return int(deepspeed_base(spec).get("zero_optimization", {}).get("stage", 0))


def deepspeed_base(spec: str) -> dict:
    """The DeepSpeed config ``--deepspeed`` names before e1 adds its own keys: a preset's, or the file's."""
    if spec in PRESETS:
        return {"zero_optimization": {"stage": PRESETS[spec]}}
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(
            f"--deepspeed {spec}: no such preset or file", hint="use zero1, zero2, zero3 or a DeepSpeed JSON file"
        )
    try:
        base = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot parse: {err}", hint="fix the JSON") from None
    if not isinstance(base, dict) or not isinstance(base.get("zero_optimization", {}), dict):
        raise ConfigError(
            f"{path}: expected a JSON object with a zero_optimization object", hint="see DeepSpeed's config docs"
        )
    return base


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_divisible(config, world: int) -> None:
    """Each rank must get whole groups and the same number of them in every mini-batch."""
    if config.prompts_per_step % world:
        raise ConfigError(
            f"prompts_per_step ({config.prompts_per_step}) is not divisible by the world size ({world})",
            hint="each rank rolls out whole groups: pick a multiple of the number of processes",
        )
    if config.mini_batch_prompts % world:
        raise ConfigError(
            f"mini_batch_prompts ({config.mini_batch_prompts}) is not divisible by the world size ({world})",
            hint="every rank takes the same number of problems from each mini-batch",
        )
