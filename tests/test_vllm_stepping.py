"""vLLM's logits processor on its stepping path (soft's bias and stop= patterns as arrays over the rows)
against the path that looks at every row one by one (``BudgetProcessor.stepping = False``, the processor as
it was before): generated batches of rows, streams and batch changes, the very same logits at every step."""

from __future__ import annotations

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode
from tests.test_soft_stop import GENERATED, id_stream

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

MODES = ["soft", "soft:start=0:strength=4", "soft:start=0.5:shape=exp:ceiling=2", "soft:start=1:strength=3",
         "soft:start=0.2:grace=3", "elastic", "budget-forcing:wait=2", "soft:start=0:stop='ab'",
         "elastic:stop='b c'", "elastic:stop='(?i)AB'", "soft:start=0.4:stop='^c'", "none"]
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


def processor(tokenizer, stepping: bool):
    from e1.engine.vllm_processor import BudgetProcessor

    class Processor(BudgetProcessor):
        def tokenizer(self):
            return tokenizer

    made = Processor(None, torch.device("cpu"), False)
    made.stepping = stepping
    return made


ROW = st.fixed_dictionaries({
    "mode": st.sampled_from(MODES), "think": st.integers(0, 14), "solve": st.integers(1, 5),
    "room": st.integers(1, 40), "opens": st.sampled_from(["open", "closed", "absent"]),
    "stream": st.lists(st.tuples(st.integers(0, 9), st.integers(0, 99)), min_size=40, max_size=40),
    "sizes": st.lists(st.sampled_from([1] * 12 + [0, 2, -1]), min_size=40, max_size=40),
})


@settings(max_examples=40, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(rows=st.lists(ROW, min_size=1, max_size=6), events=st.lists(st.tuples(st.integers(0, 39), st.sampled_from(
    ["swap", "drop", "add"]), st.integers(0, 5), st.integers(0, 5)), max_size=3), seed=st.integers(0, 2**16))
def test_the_stepping_path_gives_the_same_logits_as_looking_at_each_row(setting, rows, events, seed):
    """Invariant: at every step both processors return the same logits (soft's bias to the bit, the same
    forced tokens, a stop pattern firing at the same id), whatever the modes, budgets, ids (markers and EOS
    among them), steps of 0, 1 or 2 ids, async placeholders (-1, filled in a step later), and swaps,
    removals and additions of rows between steps."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from e1.engine.vllm_processor import KEY, budget_args

    tokenizer, markers, plain, special = setting
    vocab = max(len(tokenizer), *plain, *special) + 1
    ours, theirs = processor(tokenizer, True), processor(tokenizer, False)
    outputs = {}  # (which, batch index) -> the output list vLLM would hand the processor
    cursor = {}

    def params(spec):
        args = budget_args(Budget(spec["think"], spec["solve"]), Mode.parse(spec["mode"]), markers,
                           prompt_thinking=spec["opens"], room=spec["room"])
        return SamplingParams(extra_args={KEY: args})

    def add(index, spec):
        for which, proc in (("ours", ours), ("theirs", theirs)):
            outputs[which, index] = []
            proc.update_state(BatchUpdate(len(rows), [], [(index, params(spec), [1], outputs[which, index])], []))
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
                for which in ("ours", "theirs"):
                    outputs[which, a], outputs[which, b] = outputs[which, b], outputs[which, a]
                cursor[a], cursor[b] = cursor[b], cursor[a]
            elif what == "drop":
                change = BatchUpdate(len(rows), [a], [], [])
                cursor.pop(a, None)
            else:
                add(a, rows[b])
                continue
            ours.update_state(change), theirs.update_state(change)
        logits = torch.randn(len(rows), vocab, generator=generator)  # [B, V]
        mine, reference = ours.apply(logits.clone()), theirs.apply(logits.clone())
        assert torch.equal(mine, reference), explain(step, mine, reference, ours, theirs, outputs, cursor)
        for index, (spec, at) in list(cursor.items()):
            size = spec["sizes"][step]
            for which in ("ours", "theirs"):
                output = outputs[which, index]
                if output and output[-1] == -1:  # an async placeholder: filled in now
                    output[-1] = plain[(step + index) % len(plain)]
            for _ in range(abs(size)):
                finite = mine[index].isfinite().nonzero().flatten().tolist()
                kind, value = spec["stream"][at % 40]
                token = finite[0] if len(finite) == 1 else special[value % len(special)] if kind == 0 \
                    else plain[value % len(plain)]
                for which in ("ours", "theirs"):
                    outputs[which, index].append(-1 if size < 0 else token)
                at += 1
            cursor[index] = (spec, at)


def test_a_stop_match_on_the_stepping_path_forces_the_marker_at_the_same_id(setting):
    """Rows on the stepping path: the pattern's match forces the end marker at the step after the id
    that completed it, as the row-by-row path does, and the row's state holds every id in order."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.vllm_processor import KEY, budget_args

    tokenizer, markers, _, _ = setting
    ids = tokenizer.encode("x x x x x ab c x x", add_special_tokens=False)
    args = budget_args(Budget(100, 4), Mode.parse("elastic:stop='b c'"), markers, prompt_thinking="open", room=200)
    forced_at = {}
    for stepping in (True, False):
        proc, output = processor(tokenizer, stepping), []
        proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={KEY: args}), [1], output)], []))
        for token in ids:
            finite = proc.apply(torch.zeros(1, len(tokenizer) + 1))[0].isfinite().nonzero().flatten().tolist()
            if len(finite) == 1:
                forced_at[stepping] = (len(output), finite[0])
                break
            output.append(token)
        if stepping:
            assert proc.rows[0].held is None  # released: the state has every id
            assert proc.rows[0].state.tokens == output and proc.rows[0].state.think_end == "pattern"
    assert forced_at[True] == forced_at[False]
    assert forced_at[True][1] == markers.end_ids[0]
    assert tokenizer.decode(ids[: forced_at[True][0]]).endswith("ab c")


def test_soft_rows_on_the_stepping_path_are_counted_as_arrays_not_fed(setting):
    """Past soft's start the rows go on the stepping path: their states are not fed while they think
    plainly (the ids are held), and the bias still follows the count to the bit."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from e1.engine.row_state import soft_bias
    from e1.engine.vllm_processor import KEY, budget_args

    tokenizer, markers, plain, _ = setting
    mode = Mode.parse("soft:start=0.25:strength=5:shape=exp:ceiling=2")
    args = budget_args(Budget(16, 4), mode, markers, prompt_thinking="open", room=100)
    proc, output = processor(tokenizer, True), []
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(extra_args={KEY: args}), [1], output)], []))
    end = markers.end_ids[0]
    for written in range(32):
        logits = proc.apply(torch.zeros(1, len(tokenizer) + 1))
        assert logits[0, end].item() == torch.tensor(soft_bias(written, 16, mode)).item()
        output.append(plain[written % len(plain)])
    assert proc.rows[0].held is not None and proc.rows[0].fed < 10  # held, not fed
    assert proc.apply(torch.zeros(1, len(tokenizer) + 1))[0].isfinite().nonzero().flatten().tolist() == [end]  # 2t


def explain(step, mine, reference, ours, theirs, outputs, cursor) -> str:
    """Which rows differ, and how (the assertion's message)."""
    lines = [f"step {step}"]
    for index in range(mine.shape[0]):
        if not torch.equal(mine[index], reference[index]):
            spec = cursor.get(index, ({"mode": "?"}, 0))[0]
            differ = (mine[index] != reference[index]).nonzero().flatten().tolist()[:5]
            lines.append(f"row {index} {spec['mode']} t={spec.get('think')} s={spec.get('solve')} room={spec.get('room')} "
                         f"opens={spec.get('opens')} sizes={spec.get('sizes', [])[:step]} ours={ours.rows[index].fed, ours.rows[index].held, ours.rows[index].check_at, ours.rows[index].state.think_tokens} theirs={theirs.rows[index].fed, theirs.rows[index].check_at, theirs.rows[index].state.think_tokens} output={outputs['ours', index]} columns {differ}: "
                         f"{mine[index, differ].tolist()} vs {reference[index, differ].tolist()}")
    return "\n".join(lines)


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
    from e1.engine.vllm_processor import KEY, budget_args
    from e1.errors import ConfigError

    tokenizer, markers, _, _ = setting
    patterns = [p if p is None or i % 2 else data.draw(GENERATED) for i, p in enumerate(patterns)]
    phase = {*markers.end_ids, *markers.start_ids, *markers.eos_ids}
    proc, rows = processor(tokenizer, True), []
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
        proc.update_state(BatchUpdate(len(patterns), [], [(index, SamplingParams(extra_args={KEY: args}), [1], output)], []))
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
