"""NoThinking (``nothinking``, Ma et al. 2025): the prompt ends in the authors' closed thinking box on every
chat template family (built offline, :mod:`tests.chat_templates`), a run decodes it as all solution under one
budget t + s, and a sweep never lets it follow another prompt's trajectory."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.data.prompts import PromptOptions, build_prompt
from e1.engine import Mode, Sampling, prefilled
from e1.engine.markers import PROMPT_CLOSED, resolve_markers
from e1.engine.row_engine import RowEngine
from e1.errors import ConfigError
from tests.chat_templates import family_tokenizer

AUTHORS = "Okay, I think I have finished thinking."  # arXiv 2504.09858, Sec. 2
# what each family's generation prompt ends in, and so what e1 must append (written out by hand)
AFTER = {
    ("r1_new", True): "{s}\n</think>",  # "<｜Assistant｜><think>\n": the template opened thinking
    ("r1_old", True): "<think>\n{s}\n</think>",  # "<｜Assistant｜>": left to the model
    ("qwen3", True): "<think>\n{s}\n</think>",  # enable_thinking on: "<|im_start|>assistant\n"
    ("plain", True): "<think>\n{s}\n</think>",
}
WORDS = st.text(st.characters(whitelist_categories=("L", "N", "Zs", "P")), min_size=1, max_size=40)


@pytest.fixture(scope="module")
def tokenizers():
    return {family: family_tokenizer(family) for family, _ in AFTER}


@settings(max_examples=40, deadline=None)
@given(family=st.sampled_from(sorted(f for f, _ in AFTER)), problem=WORDS, own=st.none() | WORDS)
def test_the_prompt_ids_are_the_template_then_the_closed_box(tokenizers, family, problem, own):
    tokenizer = tokenizers[family]
    sentence = own.strip() if own and own.strip() else None
    mode = Mode("nothinking") if sentence is None else Mode.parse(str(Mode("nothinking", text=sentence)))
    markers = resolve_markers(tokenizer)
    template = build_prompt(tokenizer, problem)
    engine = RowEngine()
    engine.tokenizer = tokenizer
    [ids] = engine.encode([prefilled(template, mode, markers)])
    expected = template + AFTER[family, True].format(s=sentence or AUTHORS)
    assert ids == tokenizer.encode(expected, add_special_tokens=False)
    assert markers.prompt_thinking(ids) == PROMPT_CLOSED  # every backend reads it as answering


def test_a_template_that_closed_thinking_or_a_marker_in_the_sentence_is_refused(tokenizers):
    markers = resolve_markers(tokenizers["qwen3"])
    closed = build_prompt(
        tokenizers["qwen3"], "2 + 3?", options=PromptOptions(template_kwargs='{"enable_thinking": false}')
    )
    with pytest.raises(ConfigError, match="closed thinking already"):
        prefilled(closed, Mode.parse("nothinking"), markers)
    with pytest.raises(ConfigError, match="holds a think marker"):
        prefilled("x", Mode.parse("nothinking:text='a </think> b'"), markers)
    with pytest.raises(ConfigError, match="as text"):
        prefilled([1, 2], Mode.parse("nothinking"), markers)
    once = prefilled("x", Mode.parse("nothinking"), markers)
    assert prefilled(once, Mode.parse("nothinking"), markers) == once  # a prompt that holds the box already


@pytest.mark.parametrize(
    "text",
    [
        "nothinking:text=",
        "nothinking:text=''",
        "nothinking:text=word",
        "nothinking:grace=2",
        "nothinking:text='a':text='b'",
        "nothinking:text='\\ud800'",
        "nothinking:text='" + "x" * 3000 + "'",
        "nothinking:text='a <think> b'",
    ],
)
def test_hostile_option_values_are_one_line(text):
    with pytest.raises(ConfigError):
        Mode.parse(text)


def test_a_run_decodes_the_box_as_all_solution_and_a_sweep_never_shares_it(tmp_path, problems_file, tiny_engine):
    from e1.eval.run import EvalConfig, evaluate

    def run(out, share):
        config = EvalConfig(
            model="tiny",
            datasets=(str(problems_file),),
            budgets=(Budget(4, 6), Budget(8, 6)),
            modes=(Mode("elastic"), Mode.parse("nothinking")),
            n=2,
            sampling=Sampling(temperature=1.0, seed=3, max_tokens=64),
            out=out,
            batch_size=8,
            share_prefixes=share,
        )
        return evaluate(config, engine=tiny_engine)

    samples, summary = run(tmp_path / "alone", False)
    boxed = samples[samples["mode"] == "nothinking"]
    assert (boxed["think_end"] == "prefilled").all() and (boxed["think_tokens"] == 0).all()
    assert ((boxed["solve_tokens"]) <= boxed["think_budget"] + boxed["solve_budget"]).all()
    assert boxed["prompt"].dropna().str.endswith(f"<think>\n{AUTHORS}\n</think>").all()
    rates = summary.set_index("mode")
    assert (rates.loc["nothinking", "prefilled_rate"] == 1.0).all() and (
        rates.loc["elastic", "prefilled_rate"] == 0
    ).all()
    from e1.report.export import export

    written, _ = export(tmp_path / "alone", "lm-eval", tmp_path / "lm-eval")
    results = [p for p in written if p.name.startswith("results")]
    exported = json.loads(results[0].read_text())["results"]
    assert sorted(cell["prefilled_rate,none"] for cell in exported.values()) == [0.0, 0.0, 1.0, 1.0]
    shared, _ = run(tmp_path / "shared", True)
    key = ["problem_id", "sample_index", "think_budget"]
    columns = ["solution_text", "solve_tokens", "think_end"]
    ours = shared[shared["mode"] == "nothinking"].sort_values(key)[columns].reset_index(drop=True)
    assert ours.equals(boxed.sort_values(key)[columns].reset_index(drop=True))  # drawn on its own, as alone


def test_vllm_decodes_the_box_as_the_transformers_backend(tmp_path_factory):
    pytest.importorskip("vllm")
    import os

    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.vllm_engine import VLLMEngine
    from tests.fakes import build_chatty_model

    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    vllm_engine = VLLMEngine.load(path, EngineSpec(max_model_len=512), colocate=True)
    try:
        hf_engine = HFEngine.load(path, EngineSpec(device="cpu"))
        hf_engine.max_context = vllm_engine.max_context
        mode = Mode.parse("nothinking")
        prompts = [
            prefilled(build_prompt(hf_engine.tokenizer, f"What is {i} + {i * 3}?"), mode, hf_engine.markers)
            for i in range(3)
        ]
        greedy = Sampling(temperature=0.0, max_tokens=40)
        expected = hf_engine.generate(prompts, Budget(4, 6), mode, greedy)
        decoded = vllm_engine.generate(prompts, Budget(4, 6), mode, greedy)
        assert [c.token_ids for c in decoded] == [c.token_ids for c in expected]
        assert all(c.think_end == "prefilled" and c.think_tokens == 0 and c.solve_tokens <= 10 for c in decoded)
    finally:
        vllm_engine.close()


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.serve.budgets import Served, ServeDefaults

    tokenizer = load_tokenizer(str(tiny_model_dir))
    return Served(ServeDefaults(think=6, solve=4), tokenizer, resolve_markers(tokenizer), 256)


PROMPTS = st.one_of(
    st.text(max_size=30),
    st.lists(st.integers(0, 600), max_size=6),
    st.lists(st.text(max_size=8), max_size=3),
    st.lists(st.lists(st.integers(0, 600), max_size=4), max_size=2),
    st.sampled_from([None, {}, 5, True, [[]], "</think>", "a<think>\n"]),
)


@settings(max_examples=150, deadline=None)
@given(prompt=PROMPTS, chat=st.booleans())
def test_e1_serve_prefills_a_text_prompt_and_refuses_in_one_line_what_it_cannot(served, prompt, chat):
    """Whatever prompt a nothinking request holds, ``e1 serve`` hands vLLM a prompt ending in the box, or refuses
    the request in one line before any work (a chat request, ids without the box, several prompts)."""
    from e1.serve.gate import admit

    body = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": prompt}
    try:
        admitted = admit(json.dumps({**body, "budget_mode": "nothinking"}).encode(), served)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert admitted is not None and not chat
    sent = admitted[0]["prompt"]
    ids = sent if isinstance(sent, list) else served.tokenizer.encode(sent, add_special_tokens=False)
    assert served.markers.prompt_thinking(ids) == PROMPT_CLOSED
    if isinstance(sent, str):
        assert sent.endswith(f"{AUTHORS}\n</think>")


@settings(max_examples=30, deadline=None)
@given(
    head=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=12),
    boxed=st.booleans(),
    blank=st.sampled_from(["", "\n", "\n\n"]),
    odd=st.lists(st.integers(-(2**64), 2**64), max_size=2),
)
def test_e1_serve_takes_ids_that_end_in_the_box_and_refuses_ids_the_template_closed(served, head, boxed, blank, odd):
    """A prompt of ids must end in nothinking's box: ids closed by the template alone (an empty block, Qwen3's
    thinking off) are refused in one line, as the same prompt given as text is; an id no token has (negative, past
    the vocabulary) is refused in one line or left to the server, never a traceback."""
    from e1.serve.gate import admit

    text = head + (f"<think>\n{AUTHORS}\n</think>" if boxed else f"<think>{blank}</think>")
    odd = [i for i in odd if not 0 <= i < len(served.tokenizer)]
    ids = odd + served.tokenizer.encode(text, add_special_tokens=False)
    body = json.dumps({"prompt": ids, "budget_mode": "nothinking"})
    try:
        admitted = admit(body.encode(), served)
    except ConfigError as refused:
        assert "\n" not in str(refused) and (not boxed or odd)
        return
    assert boxed and admitted is not None  # (an id past the vocabulary is the server's to refuse)


def test_e1_help_modes_and_completion_name_it():
    from typer.testing import CliRunner

    from e1.cli.app import app
    from e1.cli.completion import complete_modes

    shown = CliRunner().invoke(app, ["help", "modes"], env={"COLUMNS": "200"}).output
    assert "nothinking" in shown and AUTHORS in " ".join(shown.split())
    assert "elastic,nothinking" in list(complete_modes("elastic,not"))


@settings(max_examples=60, deadline=None)
@given(
    head=st.text(max_size=12).filter(lambda s: "<think>" not in s and "</think>" not in s),
    blank=st.text(st.sampled_from(" \t\r\n\u00a0\u2003"), max_size=4),
    opened=st.booleans(),
    own=st.none() | WORDS.filter(lambda s: s.strip()),
)
def test_a_prefilled_prompt_prefilled_again_is_returned_as_it_is(head, blank, opened, own):
    """``e1 eval --backend openai --tokenizer`` prefills the prompt and ``e1 serve`` prefills what it receives:
    whatever blank the template left after its start marker, the second pass must change nothing."""
    mode = Mode("nothinking") if own is None else Mode("nothinking", text=own.strip())
    prompt = head + ("<think>" + blank if opened else "")
    once = mode.prefill(prompt, "<think>", "</think>")
    assert mode.prefill(once, "<think>", "</think>") == once
