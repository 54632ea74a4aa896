"""Two stages over a stream of batches, overlapped: the second stage of batch k runs in a
background thread while the first stage of batch k + 1 (and k + 2: ``depth``) runs in the caller's.

    overlapped(batches, produce=generate, finish=score, emit=write)

Evaluation generates a batch (the accelerator busy) and then scores it (math workers, the
code sandbox: seconds per test). Run one after the other, each waits for the other; overlapped,
a run takes about max(generate, score) instead of their sum. ``emit`` runs in the caller's
thread, in batch order, so writes and progress stay ordered and single-threaded.

Errors keep their type: an exception in ``finish`` is raised from the ``emit`` point (the same
one-line :class:`~e1.errors.E1Error` the CLI prints); an exception in ``produce`` (a kill,
Ctrl-C) first lets the batches already being scored finish and be emitted, so no finished work
is lost. A trainer can score rollout chunk k while chunk k + 1 generates the same way:
``overlapped(chunks, produce=rollout, finish=score, emit=collect)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item, Produced, Finished = TypeVar("Item"), TypeVar("Produced"), TypeVar("Finished")


def overlapped(
    items: Iterable[Item],
    produce: Callable[[Item], Produced],
    finish: Callable[[Produced], Finished],
    emit: Callable[[Finished], object],
    depth: int = 2,
) -> None:
    """``emit(finish(produce(item)))`` for each item in order; ``finish`` runs in background
    threads while ``produce`` of the next items runs here. Up to ``depth`` produced items wait
    for or are in ``finish`` at once (then ``produce`` waits): with 2, a batch that generates
    quickly does not leave scoring idle, nor does one that scores slowly hold generation back,
    so uneven batches cost less than with strict alternation (``depth=1``).

    >>> seen = []
    >>> overlapped([1, 2, 3], produce=lambda x: x * 10, finish=lambda y: y + 1, emit=seen.append)
    >>> seen
    [11, 21, 31]
    """
    pending: deque[Future] = deque()  # oldest first, at most `depth`

    def emit_oldest() -> None:
        try:
            emit(pending.popleft().result())
        except BaseException:
            pending.clear()  # nothing is emitted after a batch that failed (its successors still finish)
            raise

    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="e1-finish") as pool:
        try:
            for item in items:
                produced = produce(item)
                while pending and (len(pending) >= depth or pending[0].done()):
                    emit_oldest()
                pending.append(pool.submit(finish, produced))
        finally:
            while pending:
                emit_oldest()
