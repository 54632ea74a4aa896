"""Run folders written before the ``think_end`` vocabulary was recorded read in today's, never mixed.

Before abf6856 a reply that never opened thinking was stored ``open`` (today ``unopened``; today ``open``
means opened and never closed) and a prompt that closed thinking left ``think_end`` null (today
``prefilled``). The fixtures here are folders written with those old semantics (today's rows mapped back
by :func:`as_stored_then`, files without the vocabulary's stamp, as e1 wrote them then); every reader
(:meth:`SampleStore.table`) reads each old row as the rule says (:func:`rule`, restated from
``e1.engine.row_engine.think_end_before``'s docstring) and a resume leaves one vocabulary behind it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine import Mode
from e1.report.metrics import THINK_RATES, summarize
from e1.store import SampleStore, write_parquet
from e1.store.results import SAMPLE_KEY, SAMPLES, samples_frame
from tests.test_samples_store import row

RATES = list(THINK_RATES.values())
START, END = "<think>", "</think>"
PROMPTS = {  # a prompt's text by what it leaves thinking (None: no prompt stored, as in files before the column)
    "open": "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "closed": "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "absent": "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
    "open later": "<|im_start|>user\nQ </think> then<|im_end|>\n<|im_start|>assistant\n<think>\nI",
    "none": None,
}
# what e1 writes today after each kind of prompt (None: an API that reports none)
TODAY = {
    "open": ["natural", "budget", "pattern", "trial", "open", None],
    "closed": ["prefilled"],
    "absent": ["natural", "budget", "pattern", "trial", "open", "unopened", None],
    "none": ["natural", "budget", "open", "unopened", "prefilled", None],
}
TODAY["open later"] = TODAY["open"]


def as_stored_then(end: str | None) -> str | None:
    """Today's value as e1 stored it before abf6856."""
    return {"unopened": "open", "prefilled": None}.get(end, end)


def rule(stored: str | None, prompt: str | None, markers: bool) -> str | None:
    """An old row read today: as stored after a prompt that opened thinking; a missing value after one that
    closed it is prefilled (a stored one unknown: e1 before 46b4845 decoded such a reply as thinking); unknown after
    a prompt that left thinking to the model, or without a prompt."""
    kind = next((k for k, text in PROMPTS.items() if text == prompt), "none") if markers else "none"
    if kind in ("open", "open later"):
        return stored
    if kind == "closed":
        return "prefilled" if stored is None else None
    return None


def write_old(path: Path, rows: list[dict]) -> None:
    """A samples file as e1 wrote it before the vocabulary was recorded (pandas, no stamp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    samples_frame(rows).to_parquet(path, index=False)


def config(out: Path, markers: bool) -> None:
    record = {"kind": "eval", "modes": ["elastic"]}
    if markers:
        record["markers"] = {"think_start": START, "think_end": END, "end_ids": [4]}
    (out / "config.json").write_text(json.dumps(record))


PROBLEM = st.tuples(st.sampled_from(list(PROMPTS)), st.integers(1, 4))  # its prompt, its samples
# per sample: today's value (an index into TODAY[kind]), and where it is: the compacted file or part 0-2,
# written then (old) or now (a part's choice; the compacted file's is drawn once)
PLACE = st.tuples(st.integers(0, 6), st.sampled_from(["compacted", 0, 1, 2]), st.booleans())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(PROBLEM, st.lists(PLACE, min_size=4, max_size=4)), min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_every_row_of_an_old_file_reads_as_the_rule_says_and_so_do_the_rates(
    tmp_path_factory, problems, markers, compacted_old
):
    out = tmp_path_factory.mktemp("run")
    config(out, markers)
    files: dict[tuple, list[dict]] = {}
    truth, expected = {}, {}
    for p, ((kind, n), places) in enumerate(problems):
        for index, (pick, where, old) in enumerate(places[:n]):
            old = compacted_old if where == "compacted" else old
            today = TODAY[kind][pick % len(TODAY[kind])]
            stored = as_stored_then(today) if old else today
            sample = row(f"p{p}", index) | {"think_end": stored, "prompt": PROMPTS[kind] if index == 0 else None}
            files.setdefault((where, old), []).append(sample)
            truth[(f"p{p}", index)] = today
            expected[(f"p{p}", index)] = rule(stored, PROMPTS[kind], markers) if old else today
    for (where, old), rows in sorted(files.items(), key=lambda item: item[0][0] != "compacted"):
        if where == "compacted" and old:
            write_old(out / SAMPLES, rows)
        elif where == "compacted":
            write_parquet(samples_frame(rows), out / SAMPLES)
        elif old:
            write_old(out / "samples" / f"part-r{where}-{'ab' * 8}.parquet", rows)
        else:
            SampleStore(out, writer=where).append(rows)
    store = SampleStore(out, legacy=Mode.legacy)
    read = store.read().sort_values(["problem_id", "sample_index"], ignore_index=True)
    got = {(r.problem_id, r.sample_index): (None if pd.isna(r.think_end) else r.think_end) for r in read.itertuples()}
    assert got == expected
    assert all(value is None or value == truth[key] for key, value in got.items())  # unknown, never wrong
    wanted = read.assign(think_end=[expected[(r.problem_id, r.sample_index)] for r in read.itertuples()])
    rates = summarize(read)[RATES]
    assert rates.equals(summarize(samples_frame(frame=wanted.astype({"think_end": "string"})))[RATES])
    # a filter on think_end is on today's values, and a column read alone is too
    unopened = store.table(where=_field("think_end") == "unopened").num_rows
    assert unopened == sum(value == "unopened" for value in expected.values())
    assert store.table(["think_end"]).num_rows == len(expected)
    # ... whichever columns are asked for (a filter on a column not asked for reads it too)
    whole = store.table()
    for where in (_field("think_end") == "unopened", _field("think_end").is_null(), _field("sample_index") == 1):
        for columns in (["problem_id"], ["think_end", "mode"]):
            got, wanted = store.table(columns, where=where), whole.filter(where).select(columns)
            assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, wanted.to_pylist()))  # rows, in any order
    # written so once, the folder holds one vocabulary: the same rows read the same, with nothing to convert
    store.upgrade()
    assert not store.parts() and not store.old_files()
    again = store.read().sort_values(["problem_id", "sample_index"], ignore_index=True)
    assert again["think_end"].equals(read["think_end"])


def _field(name):
    import pyarrow.dataset as ds

    return ds.field(name)


def _eval_config(out, data, model, modes, limit=None):
    from e1.engine.base import Sampling
    from e1.eval.run import EvalConfig

    return EvalConfig(
        model=str(model),
        datasets=(str(data),),
        budgets=(Budget(2, 4),),
        modes=tuple(Mode.parse(m) for m in modes),
        n=3,
        sampling=Sampling(temperature=1.0, max_tokens=12),
        out=out,
        batch_size=16,
    )


@pytest.fixture(scope="module")
def unopened_model(tmp_path_factory):
    """The tiny model with a template that leaves ``<think>`` to the model (it rarely writes it)."""
    from e1.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "absent", opens_thinking=False)


def test_a_resume_into_an_old_folder_reads_its_rows_by_the_rule_and_leaves_one_vocabulary(tmp_path, unopened_model):
    """A fresh run of prompts that leave thinking to the model (none, elastic) and prefill it (nothinking); then
    the same folder as the old e1 left it, interrupted after problem q0 (old values, no stamp, no summary); a
    resume decodes q1 and q2 alone, and the folder it leaves holds one stamped file whose q0 rows are read by the
    rule (unknown after these prompts, prefilled after nothinking's), its summary's rates computed from them."""
    from e1.engine.hf.hf_engine import HFEngine
    from e1.eval.run import evaluate

    data = tmp_path / "toy.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"q{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(3))
    )
    engine = HFEngine.load(str(unopened_model), batch_size=16)
    modes = ["none", "elastic", "nothinking"]
    fresh, _ = evaluate(_eval_config(tmp_path / "fresh", data, unopened_model, modes), engine=engine)
    assert "unopened" in set(fresh["think_end"]) and "prefilled" in set(fresh["think_end"])
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text((tmp_path / "fresh" / "config.json").read_text())
    kept = fresh[fresh["problem_id"] == "q0"]
    write_old(old / SAMPLES, kept.assign(think_end=kept["think_end"].map(as_stored_then)).to_dict("records"))
    resumed, summary = evaluate(_eval_config(old, data, unopened_model, modes), engine=engine)
    on_disk = pd.read_parquet(old / SAMPLES)
    q0 = on_disk[on_disk["problem_id"] == "q0"].merge(kept, on=SAMPLE_KEY, suffixes=("", "_fresh"))
    assert len(q0) == len(kept) == 9
    for r in q0.to_dict("records"):  # after a prompt that closed thinking: prefilled; one left to the model: unknown
        prompt = kept[(kept["mode"] == r["mode"]) & (kept["sample_index"] == 0)]["prompt"].iloc[0]
        closed = prompt.endswith("</think>")
        assert closed == (r["mode"] == "nothinking") and prompt.count("<think>") == closed
        assert as_stored_then(r["think_end_fresh"]) is None if closed else r["think_end_fresh"] is not None
        assert (None if pd.isna(r["think_end"]) else r["think_end"]) == ("prefilled" if closed else None)
    later = on_disk[on_disk["problem_id"] != "q0"]
    assert later["think_end"].notna().all() and "unopened" in set(later["think_end"])  # decoded today
    assert summary[RATES].equals(summarize(on_disk)[RATES]) and summary[RATES].equals(summarize(resumed)[RATES])
    from e1.store import THINK_END_VOCABULARY, think_end_vocabulary

    assert not (old / "samples").exists() and think_end_vocabulary(old / SAMPLES) == THINK_END_VOCABULARY
    assert think_end_vocabulary(old / "summary.parquet") == THINK_END_VOCABULARY
    assert pq.read_schema(old / SAMPLES).metadata  # the stamp is in the file itself


def test_the_viewer_shows_no_think_rates_from_a_summary_written_before_the_vocabulary(tmp_path):
    frame = pd.DataFrame(
        [{"dataset": "d", "mode": "elastic", "think_budget": 1, "solve_budget": 1, **dict.fromkeys(RATES, 0.5)}]
    )
    frame.to_parquet(tmp_path / "summary.parquet", index=False)  # as e1 wrote it before
    store = SampleStore(tmp_path)
    assert store.labelled(frame, source=tmp_path / "summary.parquet")[RATES].isna().all().all()
    write_parquet(frame, tmp_path / "summary.parquet")
    assert store.labelled(frame, source=tmp_path / "summary.parquet")[RATES].eq(0.5).all().all()


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="<>/tk\n", max_size=24),
    st.sampled_from([("<t>", "</t>"), ("t", "k"), ("<k>", "k>"), ("</t>", "<t>")]),
)
def test_a_stored_prompt_s_text_reads_as_its_ids_would(text, markers):
    """The one rule of what a prompt leaves thinking (its last marker) read on a text, as old rows are, says
    what it says on the same prompt's ids (each character an id)."""
    from e1.engine.markers import last_marker

    start, end = markers
    assert last_marker(text, start, end) == last_marker(
        [ord(c) for c in text], list(map(ord, start)), list(map(ord, end))
    )


def _old_run(out: Path, prompt: str, stored: list[str | None], end_ids: list[int]) -> SampleStore:
    """A folder as the old e1 left it: one problem's samples (``stored`` think_end values, the prompt on sample 0),
    no stamp, and a config.json whose markers record ``end_ids``."""
    out.mkdir(parents=True, exist_ok=True)
    markers = {"think_start": START, "think_end": END, "end_ids": end_ids}
    (out / "config.json").write_text(json.dumps({"kind": "eval", "modes": ["elastic"], "markers": markers}))
    rows = [row("p", i) | {"think_end": end, "prompt": prompt if i == 0 else None} for i, end in enumerate(stored)]
    write_old(out / SAMPLES, rows)
    return SampleStore(out, legacy=Mode.legacy)


def _read_ends(store: SampleStore) -> list[str | None]:
    return [None if pd.isna(end) else end for end in store.read().sort_values("sample_index")["think_end"]]


CHAT_TEXT = st.lists(st.sampled_from(["Q", " ", "\n", START, END, "<answer>"]), max_size=8).map("".join)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["system", "user"]), CHAT_TEXT), min_size=1, max_size=3), st.integers(1, 4))
def test_old_rows_of_a_run_without_a_tokenizer_read_unknown_whatever_its_messages_hold(tmp_path_factory, chat, n):
    """A chat API without --tokenizer (or a hosted vendor) stores its messages as the prompt (JSON), not a text a model
    continued from, and records no marker ids; its rows' think_end is null (the server reported none). A message that
    mentions ``</think>`` last (R1-Zero's system prompt: "... within <think> </think> tags") must not make those rows
    read as prefilled: they stay unknown, and the cell's think rates NaN."""
    from e1.engine.api.client import ChatMessages

    prompt = ChatMessages().apply_chat_template([{"role": role, "content": text} for role, text in chat])
    store = _old_run(tmp_path_factory.mktemp("chat"), prompt, [None] * n, end_ids=[])
    assert _read_ends(store) == [None] * n
    assert summarize(store.read())[RATES].isna().all().all()


_BPE: list = []


def _bpe_markers():
    """A byte-level BPE tokenizer whose markers are several tokens each (no added <think>): `` </think>`` (a space
    before) is other ids than ``</think>``, so a prompt's text can show a marker its ids do not hold."""
    if not _BPE:
        from e1.engine.markers import resolve_markers
        from e1.models.tiny import DEFAULT_CORPUS, build_tokenizer

        corpus = [*DEFAULT_CORPUS, *["<think>\nok</think>\n\nyes", "a <think>\n b </think>\n c"] * 20]
        tokenizer = build_tokenizer(corpus, 512, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        _BPE.append((tokenizer, resolve_markers(tokenizer, START, END)))
    return _BPE[0]


PIECES = ["Q", " ", "\n", START, END, " " + END, " " + START, "<|im_start|>assistant\n"]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=8), st.lists(st.sampled_from(["natural", "budget", "open"]), max_size=3)
)
def test_old_rows_read_by_a_prompt_text_never_contradict_its_ids(tmp_path_factory, pieces, ends):
    """Old e1 decided what a prompt left thinking from its ids (``Markers.prompt_thinking``) and stored think_end by
    that; a reading of the stored text must not say otherwise. With markers of several tokens the text can hold
    ``</think>`` where the ids hold no marker (`` </think>``): a row read from it is unknown, or what today's e1
    writes for those ids (after ids that opened thinking: as stored; that closed it: prefilled; that left it to the
    model: unknown, as "open" was also "unopened" then)."""
    from e1.engine.markers import PROMPT_CLOSED, PROMPT_OPEN

    tokenizer, markers = _bpe_markers()
    prompt = "".join(pieces)
    phase = markers.prompt_thinking(tokenizer.encode(prompt, add_special_tokens=False))
    stored = [None] if phase == PROMPT_CLOSED else ends or ["open"]  # as old e1 stored them after those ids
    today = {PROMPT_OPEN: stored, PROMPT_CLOSED: ["prefilled"]}.get(phase, [None] * len(stored))
    store = _old_run(tmp_path_factory.mktemp("bpe"), prompt, stored, end_ids=list(markers.end_ids))
    assert all(read is None or read == truth for read, truth in zip(_read_ends(store), today, strict=True))


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["natural", "budget", "pattern", "trial", "open", "unopened", "prefilled"]),
    st.text(alphabet="ab </think>", max_size=8),
    st.text(alphabet="ab\\{}", max_size=6),
    st.integers(1, 5),
)
def test_an_exported_output_reads_the_same_when_its_think_end_is_read_as_unknown(end, think, solution, solve_tokens):
    """An old row read as unknown (after a prompt that left thinking to the model) is exported (lm-eval, lighteval)
    as the model wrote it: no end marker after thinking that never ended ("open", "unopened": no solution, no
    solution token), the marker where a solution began, just as for the row whose think_end is known."""
    from e1.report.run_results import output_text

    ended = end not in ("open", "unopened")
    think = "" if end == "prefilled" else think
    row = {"think_text": think, "solution_text": solution if ended else "", "solve_tokens": solve_tokens * ended}
    known = output_text(row | {"think_end": end}, END)
    for unknown in (None, float("nan"), pd.NA):
        assert output_text(row | {"think_end": unknown}, END) == known


@settings(max_examples=40, deadline=None)
@given(
    st.binary(max_size=6).filter(lambda stamp: stamp != b"2"),
    st.sampled_from(["compacted", "part"]),
    st.lists(st.sampled_from(TODAY["open"]), min_size=1, max_size=3),
)
def test_a_file_stamped_with_a_vocabulary_e1_never_wrote_reads_unknown_and_is_not_rewritten(
    tmp_path_factory, stamp, where, ends
):
    """A stamp e1 never wrote (a later e1's vocabulary, an edited file: b"3", b"2 ", bytes that are no text) says the
    words mean something e1 cannot know: every row reads unknown (not by the older vocabulary's rule, which would
    read them as stored after a prompt that opened thinking), a summary so stamped shows no think rates, and a
    resume refuses in one line rather than rewrite the file in today's vocabulary (its words would be lost)."""
    import pyarrow as pa

    from e1.errors import ResultsError
    from e1.store import THINK_END_KEY

    out = tmp_path_factory.mktemp("foreign")
    config(out, markers=True)
    rows = [
        row("p", i) | {"think_end": end, "prompt": PROMPTS["open"] if i == 0 else None} for i, end in enumerate(ends)
    ]

    def stamped(frame):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        return table.replace_schema_metadata({**table.schema.metadata, THINK_END_KEY.encode(): stamp})

    path = out / SAMPLES if where == "compacted" else out / "samples" / f"part-r0-{'ab' * 8}.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(stamped(samples_frame(rows)), path)
    store = SampleStore(out, legacy=Mode.legacy)
    assert _read_ends(store) == [None] * len(ends)
    before = path.read_bytes()
    with pytest.raises(ResultsError, match="never wrote") as refused:
        store.upgrade()
    assert "\n" not in str(refused.value) and path.read_bytes() == before
    summary = pd.DataFrame([{"dataset": "d", "mode": "elastic", **dict.fromkeys(RATES, 0.5)}])
    pq.write_table(stamped(summary), out / "summary.parquet")
    assert store.labelled(summary, source=out / "summary.parquet")[RATES].isna().all().all()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["natural", "budget", "open", None]), min_size=1, max_size=4))
def test_a_value_stored_after_a_prompt_that_closed_thinking_is_unknown_not_thought(tmp_path_factory, stored):
    """e1 from abf6856 back to 46b4845 stored no think_end after a prompt that closed thinking (Qwen3 with
    enable_thinking false); before 46b4845 it did not read such a prompt and decoded the reply as thinking, cut
    at t ("budget") or never ended ("open"). Such a value read as stored would count a reply the prompt kept from
    thinking as thought: it reads unknown, and only a missing value is prefilled."""
    store = _old_run(tmp_path_factory.mktemp("closed"), PROMPTS["closed"], stored, end_ids=[4])
    assert _read_ends(store) == ["prefilled" if end is None else None for end in stored]
    assert summarize(store.read())["think_rate"].fillna(0).eq(0).all()
