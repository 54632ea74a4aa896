"""vLLM's logits processor on its stepping path (soft's bias and stop= patterns as arrays over the rows)
against the one definition, each request's RowState fed the ids vLLM shows it: generated batches of rows,
streams and batch changes, the very logits RowState says at every step."""

from __future__ import annotations

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode
from tests.test_soft_stop import GENERATED, id_stream

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

MODES = [
    "soft",
    "soft:start=0:strength=4",
    "soft:start=0.5:shape=exp:ceiling=2",
    "soft:start=1:strength=3",
    "soft:start=0.2:grace=3",
    "elastic",
    "budget-forcing:wait=2",
    "soft:start=0:stop='ab'",
    "elastic:stop='b c'",
    "elastic:stop='(?i)AB'",
    "soft:start=0.4:stop='^c'",
    "none",
]
TEXTS = ["ab", " c", "x", "é", "ab c"]  # plain pieces; the stop patterns are made of them


@pytest.fixture(scope="module")
def setting():
    from e1.engine.markers import resolve_markers
    from e1.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    markers = resolve_markers(tokenizer)
    plain = sorted({i for text in TEXTS for i in tokenizer.encode(text, add_special_tokens=False)})
    special = [*markers.end_ids, *markers.start_ids, min(markers.eos_ids)]
    return tokenizer, markers, plain, special


def processor(tokenizer):
    from e1.engine.vllm.processor import BudgetProcessor

    class Processor(BudgetProcessor):
        def tokenizer(self):
            return tokenizer

    return Processor(None, torch.device("cpu"), False)


class Reference:
    """A request's RowState (the one definition) fed the ids its output shows (up to an async placeholder),
    and the logits it says: only the forced id finite (EOS once done), else soft's bias on the end marker."""

    def __init__(self, args: dict, tokenizer):
        from e1.engine.markers import sentence_end_ids
        from e1.engine.vllm.processor import row_state

        mode = Mode.parse(args["mode"])
        self.state = row_state(
            args, sentence_end_ids(tokenizer) if mode.grace else frozenset(), tokenizer if mode.stop else None
        )
        self.fed = 0

    def logits(self, output: list[int], before: torch.Tensor) -> torch.Tensor | None:
        """None: vLLM itself has ended the request (an EOS sampled, ``max_tokens``, or the end marker that
        "Wait" replaces, which the vLLM backend sends as a stop id and continues in a new request)."""
        ready = output.index(-1) if -1 in output else len(output)
        if ready > self.fed and not self.state.done:
            self.state.extend(output[self.fed : ready])
        self.fed = max(self.fed, ready)
        state, after = self.state, before.clone()
        if state.done and (state.finish_reason == "stop" or len(state.tokens) >= state.max_new_tokens):
            return None
        taken = min(len(state.tokens), self.fed)
        if state.tokens[:taken] != output[:taken]:  # an id the state replaced ("Wait")
            return None
        forced = min(state.markers.eos_ids) if state.done else state.forced_token()
        if forced is not None:
            after[:] = float("-inf")
            after[forced] = 0.0
        elif bias := state.end_bias():
            column = state.markers.end_ids[0]
            after[column] = before[column] + torch.tensor(bias, dtype=torch.float32)
        return after


ROW = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(MODES),
        "think": st.integers(0, 14),
        "solve": st.integers(1, 5),
        "room": st.integers(1, 40),
        "opens": st.sampled_from(["open", "closed", "absent"]),
        "stream": st.lists(st.tuples(st.integers(0, 9), st.integers(0, 99)), min_size=40, max_size=40),
        "sizes": st.lists(st.sampled_from([1] * 12 + [0, 2, -1]), min_size=40, max_size=40),
    }
)


@settings(max_examples=40, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(
    rows=st.lists(ROW, min_size=1, max_size=6),
    events=st.lists(
        st.tuples(st.integers(0, 39), st.sampled_from(["swap", "drop", "add"]), st.integers(0, 5), st.integers(0, 5)),
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
)
def test_the_stepping_path_gives_the_logits_each_row_state_says(setting, rows, events, seed):
    """Invariant: at every step the processor returns the logits each row's RowState says (soft's bias to the bit, the
    forced token, a stop pattern firing at the same id), whatever the modes, budgets, ids (markers and EOS
    among them), steps of 0, 1 or 2 ids, async placeholders (-1, filled in a step later), and swaps,
    removals and additions of rows between steps."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from e1.engine.vllm.processor import KEY, budget_args

    tokenizer, markers, plain, special = setting
    vocab = max(len(tokenizer), *plain, *special) + 1
    ours = processor(tokenizer)
    outputs, references = {}, {}  # batch index -> the output list vLLM would hand the processor, its RowState
    cursor = {}

    def settings(spec):
        return budget_args(
            Budget(spec["think"], spec["solve"]),
            Mode.parse(spec["mode"]),
            markers,
            prompt_thinking=spec["opens"],
            room=spec["room"],
        )

    def add(index, spec):
        outputs[index], references[index] = [], Reference(settings(spec), tokenizer)
        ours.update_state(
            BatchUpdate(
                len(rows), [], [(index, SamplingParams(extra_args={KEY: settings(spec)}), [1], outputs[index])], []
            )
        )
        cursor[index] = (spec, 0)

    for index, spec in enumerate(rows):
        add(index, spec)
    generator = torch.Generator().manual_seed(seed)
    for step in range(40):
        for at, what, a, b in events:
            if at != step or a >= len(rows) or b >= len(rows) or a == b:
                continue
            if what == "swap":
                if a not in cursor or b not in cursor:
                    continue  # vLLM moves live rows only
                change = BatchUpdate(len(rows), [], [], [(a, b, MoveDirectionality.SWAP)])
                outputs[a], outputs[b] = outputs[b], outputs[a]
                references[a], references[b] = references[b], references[a]
                cursor[a], cursor[b] = cursor[b], cursor[a]
            elif what == "drop":
                change = BatchUpdate(len(rows), [a], [], [])
                cursor.pop(a, None)
            else:
                add(a, rows[b])
                continue
            ours.update_state(change)
        logits = torch.randn(len(rows), vocab, generator=generator)  # [B, V]
        mine = ours.apply(logits.clone())
        for index in range(len(rows)):  # a dropped row is left alone
            expected = references[index].logits(outputs[index], logits[index]) if index in cursor else logits[index]
            if expected is not None:
                assert torch.equal(mine[index], expected), explain(
                    step, index, mine[index], expected, ours, cursor, outputs
                )
        for index, (spec, at) in list(cursor.items()):
            size = spec["sizes"][step]
            output = outputs[index]
            if output and output[-1] == -1:  # an async placeholder: filled in now
                output[-1] = plain[(step + index) % len(plain)]
            for _ in range(abs(size)):
                finite = mine[index].isfinite().nonzero().flatten().tolist()
                kind, value = spec["stream"][at % 40]
                token = (
                    finite[0]
                    if len(finite) == 1
                    else special[value % len(special)]
                    if kind == 0
                    else plain[value % len(plain)]
                )
                output.append(-1 if size < 0 else token)
                at += 1
            cursor[index] = (spec, at)


def test_a_stop_match_on_the_stepping_path_forces_the_marker_at_the_same_id(setting):
    """Rows on the stepping path: the pattern's match forces the end marker at the step after the id
    that completed it, as the row-by-row path does, and the row's state holds every id in order."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.vllm.processor import KEY, budget_args

    tokenizer, markers, _, _ = setting
    ids = tokenizer.encode("x x x x x ab c x x", add_special_tokens=False)
    args = budget_args(Budget(100, 4), Mode.parse("elastic:stop='b c'"), markers, prompt_thinking="open", room=200)
    proc, output = processor(tokenizer), []
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={KEY: args}), [1], output)], []))
    forced_at = None
    for token in ids:
        finite = proc.apply(torch.zeros(1, len(tokenizer) + 1))[0].isfinite().nonzero().flatten().tolist()
        if len(finite) == 1:
            forced_at = (len(output), finite[0])
            break
        output.append(token)
    assert proc.rows[0].held is None  # released: the state has every id
    assert proc.rows[0].state.tokens == output and proc.rows[0].state.think_end == "pattern"
    reference = Reference(args, tokenizer).state  # the one definition, fed id by id
    for token in ids:
        if reference.forced_token() is not None:
            break
        reference.accept(token)
    assert forced_at == (len(reference.tokens), reference.forced_token()) and forced_at[1] == markers.end_ids[0]
    assert tokenizer.decode(ids[: forced_at[0]]).endswith("ab c")


def test_soft_rows_on_the_stepping_path_are_counted_as_arrays_not_fed(setting):
    """Past soft's start the rows go on the stepping path: their states are not fed while they think
    plainly (the ids are held), and the bias still follows the count to the bit."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.vllm.processor import KEY, budget_args

    tokenizer, markers, plain, _ = setting
    mode = Mode.parse("soft:start=0.25:strength=5:shape=exp:ceiling=2")
    args = budget_args(Budget(16, 4), mode, markers, prompt_thinking="open", room=100)
    proc, output = processor(tokenizer), []
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={KEY: args}), [1], output)], []))
    end = markers.end_ids[0]
    for written in range(32):
        logits = proc.apply(torch.zeros(1, len(tokenizer) + 1))
        assert logits[0, end].item() == torch.tensor(mode.end_bias(written, 16)).item()
        output.append(plain[written % len(plain)])
    assert proc.rows[0].held is not None and proc.rows[0].fed < 10  # held, not fed
    assert proc.apply(torch.zeros(1, len(tokenizer) + 1))[0].isfinite().nonzero().flatten().tolist() == [end]  # 2t


def explain(step, index, mine, expected, ours, cursor, outputs) -> str:
    """How a row differs from its RowState (the assertion's message)."""
    spec = cursor.get(index, ({"mode": "?"}, 0))[0]
    differ = (mine != expected).nonzero().flatten().tolist()[:5]
    row = ours.rows.get(index)
    where = (row.fed, row.held, row.check_at, row.state.think_tokens) if row is not None else None
    return (
        f"step {step} row {index} {spec['mode']} t={spec.get('think')} s={spec.get('solve')} room={spec.get('room')} "
        f"opens={spec.get('opens')} sizes={spec.get('sizes', [])[:step]} ours={where} output={outputs.get(index)} "
        f"columns {differ}: {mine[differ].tolist()} vs {expected[differ].tolist()}"
    )


@settings(max_examples=40, deadline=None)
@given(data=st.data(), patterns=st.lists(st.one_of(st.none(), st.just(r"\\boxed\{")), min_size=1, max_size=5))
def test_stop_rows_on_the_stepping_path_stop_where_the_plain_scanner_first_matches(setting, data, patterns):
    """Invariant: rows with generated stop patterns (several rows sharing a pattern and its quiet table, and
    rows without one) over generated id streams (characters split between ids, special ids): the stepping
    path, which gives a row's scanner only the ids its quiet table cannot rule out, forces the end marker
    right after the id at which the plain scanner (every id through the detokenizer) first matches."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.stop import StopPattern
    from e1.engine.vllm.processor import KEY, budget_args
    from e1.errors import ConfigError

    tokenizer, markers, _, _ = setting
    patterns = [p if p is None or i % 2 else data.draw(GENERATED) for i, p in enumerate(patterns)]
    phase = {*markers.end_ids, *markers.start_ids, *markers.eos_ids}
    proc, rows = processor(tokenizer), []
    for index, pattern in enumerate(patterns):
        try:
            mode = Mode.parse("elastic" if pattern is None else f"elastic:stop='{pattern}'")
        except ConfigError:  # not RE2, or empty
            mode = Mode.parse("elastic")
        stop = StopPattern(tokenizer, mode.stop) if mode.stop else None
        ids = [i for i in data.draw(id_stream(tokenizer, stop.lead if stop else "")) if i not in phase][:80]
        plain = stop.scanner(prefilter=False) if stop else None
        first = next((n + 1 for n, i in enumerate(ids) if plain is not None and plain.push(i)), None)
        args = budget_args(Budget(1000, 4), mode, markers, prompt_thinking="open", room=2000)
        output = []
        proc.update_state(
            BatchUpdate(len(patterns), [], [(index, SamplingParams(extra_args={KEY: args}), [1], output)], [])
        )
        rows.append((ids, first, output))
    forced_at = [None] * len(rows)
    for _ in range(82):
        logits = proc.apply(torch.zeros(len(rows), len(tokenizer) + 1))
        for index, (ids, _, output) in enumerate(rows):
            if forced_at[index] is not None:
                continue
            if logits[index].isfinite().sum() == 1:
                forced_at[index] = len(output)
            elif len(output) < len(ids):
                output.append(ids[len(output)])
    assert forced_at == [first for _, first, _ in rows]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_soft_bias_is_one_addition_in_the_logits_dtype_on_each_row(setting, dtype):
    """Rows on the stepping path and rows looked at one by one (a later start) in one step: each row's end
    marker logit is its own plus its bias, rounded once to the logits' dtype; nothing else moves."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.vllm.processor import KEY, budget_args

    tokenizer, markers, plain, _ = setting
    modes = [Mode.parse(f"soft:start={start}:strength=3:shape=exp") for start in (0, 0, 0.5, 0.9)]
    outputs = [[] for _ in modes]
    added = [
        (i, SamplingParams(extra_args={KEY: budget_args(Budget(12, 4), mode, markers, "open", room=60)}), [1], out)
        for i, (mode, out) in enumerate(zip(modes, outputs))
    ]
    proc, end = processor(tokenizer), markers.end_ids[0]
    proc.update_state(BatchUpdate(len(modes), [], added, []))
    generator = torch.Generator().manual_seed(0)
    for written in range(14):
        before = torch.randn(len(modes), len(tokenizer) + 1, generator=generator).to(getattr(torch, dtype))
        after = proc.apply(before.clone())
        expected = before.clone()
        for row, mode in enumerate(modes):
            expected[row, end] += torch.tensor(mode.end_bias(written, 12)).to(expected.dtype)
        assert torch.equal(after, expected), written
        for out in outputs:
            out.append(plain[written % len(plain)])
