"""Evaluation over many ranks: ``torchrun --nproc_per_node G -m e1 eval ...`` (and ``sweep``).

    torchrun --nnodes 2 --nproc_per_node 8 -m e1 eval --model M --datasets aime --n 16 --out runs/x

Every rank reads the run directory, lists the same pending work — (mode, budget, problem)
items whose ``n`` samples are not all written, cut into generate calls of ``batch_size // n``
problems — and takes every ``shards``-th call from its shard's index: the shares are disjoint
and cover the work. A shard is one rank, or with ``--tp T`` on
vLLM a group of T consecutive ranks driving one tensor-parallel engine
(``external_launcher``): they decode the same prompts and only the group's first rank writes.
Each writing rank appends its own parts (:mod:`e1.store.samples`); after a barrier rank 0
compacts them and writes ``config.json`` and ``summary.parquet``. Every sample is drawn from
its own seed, so the finished run equals a single-process run row for row; a rank that dies
loses only its batch in flight, and a rerun (any number of ranks) generates what is missing.

Only rank 0 takes the run-directory lock (:func:`e1.store.lock.run_lock`) and tells the others
whether it got it, so a second job into the same ``--out`` — torchrun or not — is refused on
every rank instead of hanging at a barrier.
"""

from __future__ import annotations

import atexit
import datetime
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from e1.errors import ConfigError, ResultsError

BARRIER_TIMEOUT_H = 24  # a rank that died is noticed by torchrun, which stops the others


@dataclass(frozen=True)
class Ranks:
    """This process's place: ``rank`` of ``world``, in shards of ``tp`` ranks that share one engine.

    >>> r = Ranks(rank=2, world=4, tp=2)
    >>> (r.shard, r.shards, r.writer, r.main, r.share(list("abcde")))
    (1, 2, True, False, ['b', 'd'])
    """

    rank: int = 0
    world: int = 1
    tp: int = 1

    def __post_init__(self):
        if self.world % self.tp:
            raise ConfigError(
                f"the world size ({self.world}) is not a multiple of --tp ({self.tp})",
                hint="start a multiple of --tp processes per job (torchrun --nproc_per_node)",
            )

    @property
    def shard(self) -> int:
        return self.rank // self.tp

    @property
    def shards(self) -> int:
        return self.world // self.tp

    @property
    def writer(self) -> bool:
        """The first rank of its shard writes the shard's samples."""
        return self.rank % self.tp == 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, items: list) -> list:
        """This shard's items: every ``shards``-th one, from the shard's index."""
        return items[self.shard :: self.shards]


class Group:
    """One process alone (or one rank seen alone, as tests use it): communication does nothing."""

    def __init__(self, ranks: Ranks = Ranks()):
        self.ranks = ranks

    def barrier(self) -> None:
        """Wait for every rank."""

    def broadcast(self, value):
        """Rank 0's ``value`` on every rank (any picklable object)."""
        return value


class TorchGroup(Group):
    """The ranks of ``torch.distributed`` (gloo on CPUs, nccl on GPUs)."""

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def broadcast(self, value):
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def current_group(tp: int = 1, device: str = "auto") -> Group:
    """This process's group: alone, or under torchrun (``WORLD_SIZE`` > 1) the default process
    group, started here when nobody has (gloo on CPUs; nccl with ``LOCAL_RANK``'s GPU)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Group()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = torch.cuda.is_available() and device != "cpu"
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        # ranks wait at barriers for the slowest share of a run of hours: the 30-minute default is too short
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(hours=BARRIER_TIMEOUT_H))
        atexit.register(_leave)
    return TorchGroup(Ranks(dist.get_rank(), dist.get_world_size(), tp))


def is_main_process() -> bool:
    """Rank 0 under torchrun, or a process on its own: the one that prints."""
    return os.environ.get("RANK", "0") == "0"


@contextmanager
def group_lock(out: Path, command: str, group: Group):
    """:func:`e1.store.lock.run_lock` held by rank 0 for the duration; every rank raises its refusal."""
    from e1.store import guard_dir, run_lock

    with ExitStack() as stack:
        refusal = None
        if group.ranks.main:
            try:
                stack.enter_context(run_lock(out, command))
            except ResultsError as err:
                refusal = (err.message, err.hint)
        refusal = group.broadcast(refusal)
        if refusal is not None:
            raise ResultsError(*refusal)
        if not group.ranks.main and Path(out).is_dir():  # rank 0's lock guards it for rank 0
            stack.enter_context(guard_dir(out))
        yield


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
