"""Budget reminders (``remind=K``, e1/engine/modes/reminders.py), an option added in one module: its schedule
and gate, RowState forcing it, runner V2's processor against RowState over generated batches, and the same
records token for token on the transformers backend, vLLM (V1), and --backend openai against e1 serve."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.base import Sampling
from e1.engine.markers import PROMPT_OPEN, Markers
from e1.engine.modes import Mode
from e1.engine.modes.reminders import MOST, TEMPLATE
from e1.errors import ConfigError

GREEDY = Sampling(temperature=0.0, max_tokens=40)
PROBLEMS = ["What is 2 + 3?", "The sum of the digits is 12.", "Let x = 7. Then 2x + 1 = 15."]


@given(every=st.integers(1, 300), think=st.integers(0, 2000))
def test_a_reminder_every_k_tokens_says_the_budget_left(every, think):
    notes = Mode.parse(f"elastic:remind={every}").notes(Budget(think, 8))
    # hand-derived: at K, 2K, ... below t (at most MOST of them), each saying t minus where it starts
    expected = [(k * every, TEMPLATE.format(left=think - k * every)) for k in range(1, MOST + 1) if k * every < think]
    assert list(notes) == expected


def test_the_option_fits_the_modes_with_a_thinking_budget():
    for text in ("elastic:remind=8", "budget-forcing:wait=1:remind=8", "soft:remind=8"):
        assert str(Mode.parse(text)) == text and Mode.parse(text).per_token  # a plain server cannot write them
    for text in ("truncate:remind=8", "none:remind=8", "early-exit:remind=8"):
        with pytest.raises(ConfigError, match="remind"):
            Mode.parse(text)
    with pytest.raises(ConfigError, match="remind"):
        Mode.parse("elastic:remind=x")


def test_row_state_forces_the_reminders_as_thinking():
    class Digits:  # one id per character, 100 + its code
        def encode(self, text, add_special_tokens=False):
            return [100 + ord(c) for c in text]

    from e1.engine.row_engine import ModeIds, build_state

    markers = Markers("<t>", "</t>", (1,), (2,), frozenset({3}), 0, (4,), (5,))
    mode, budget = Mode.parse("elastic:remind=4"), Budget(40, 2)
    state = build_state(mode, budget, markers, PROMPT_OPEN, 100, ModeIds.of(Digits(), mode, budget))
    first = tuple(100 + ord(c) for c in TEMPLATE.format(left=36))
    for _ in range(4 + len(first)):
        state.accept(9)
    assert tuple(state.tokens[4:]) == first and state.forced == [False] * 4 + [True] * len(first)
    assert state.think_tokens == 4 + len(first)  # counted as thinking: t bounds it


try:
    import tests.test_vllm_v2_processor as v2  # the harness's requests and runner (needs vLLM's runner V2 classes)
except ImportError:
    v2 = None

V2_MODES = [
    "elastic:remind=2",
    "budget-forcing:wait=1:remind=3",
    "soft:start=0.5:remind=2",
    "elastic:stop='0[0-3]':remind=3",
    "elastic",
    "truncate",
]


def v2_run(seed: int) -> list:
    """One generated run of the V2 harness (every row checked against its RowState each step), reminder modes
    among others, a template short enough for its budgets and vocabulary; returns the rows that wrote a reminder."""
    import e1.engine.modes.reminders as reminders
    from e1.engine.row_state import T_THINK

    if v2 is None:
        pytest.skip("vLLM's runner V2 classes are not installed")
    reminded = []
    take = v2.Request.take

    def noted(request, token):
        take(request, token)
        state = request.state
        if (
            state is not None
            and state.notes
            and not state.mode.wait
            and state.tokens
            and state.forced[-1]
            and state.kinds[-1] == T_THINK
        ):
            reminded.append(request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(v2, "MODES", V2_MODES)
        patch.setattr(reminders, "TEMPLATE", "21")  # ids within the harness's vocabulary ("2", "1")
        patch.setattr(v2.Request, "take", noted)
        v2.run(seed)
    return reminded


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_runner_v2_forces_each_reminder_row_as_its_row_state(seed):
    """The V2 processor harness (tests/v2_runner.py): every row, reminder rows among the others, is forced what
    its RowState forces at every step (reminder rows run the one definition on the host)."""
    v2_run(seed)


def test_the_v2_runs_write_reminders():
    """The generated runs do reach a forced reminder (else the property above would hold vacuously)."""
    assert any(v2_run(seed) for seed in range(10))


@pytest.fixture(scope="module")
def server(e1_serve):
    return e1_serve  # conftest's: shared by the modules that serve with no options


def test_every_backend_writes_the_reminders_alike(server):
    """transformers, vLLM (its V1 processor rebuilds the row from the request's settings) and --backend openai
    against e1 serve (the mode travels as budget_mode; the server's processor and the client's replay each
    build the row with the one builder): the same ids, the reminders forced where thinking reached K."""
    from e1.data.prompts import build_prompt
    from e1.engine.api.openai_engine import BUDGET_FIELDS, ApiSettings, OpenAIEngine
    from e1.engine.markers import exit_ids
    from tests.fakes import engine_pair

    url, path = server
    mode, budget = Mode.parse("elastic:remind=6"), Budget(30, 5)
    vllm_engine, hf = engine_pair(path)
    prompts = [build_prompt(hf.tokenizer, p) for p in PROBLEMS]
    theirs = hf.generate(prompts, budget, mode, GREEDY, n=2)
    ours = vllm_engine.generate(prompts, budget, mode, GREEDY, n=2)
    assert [(c.token_ids, c.forced_mask, c.think_tokens) for c in ours] == [
        (c.token_ids, c.forced_mask, c.think_tokens) for c in theirs
    ]
    first = list(exit_ids(hf.tokenizer, TEMPLATE.format(left=24)))
    reminded = [c for c in theirs if c.token_ids[6 : 6 + len(first)] == first]
    assert reminded and all(c.forced_mask[6 : 6 + len(first)] == [True] * len(first) for c in reminded)
    api = OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), [mode])
    assert api.describe()["methods"][str(mode)] == BUDGET_FIELDS
    hf.max_context = api.max_context
    expected = hf.generate(prompts, budget, mode, GREEDY, seeds=[1, 2, 3])
    served = api.generate(prompts, budget, mode, GREEDY, seeds=[1, 2, 3])
    assert [(c.token_ids, c.think_tokens, c.solve_tokens, c.forced) for c in served] == [
        (c.token_ids, c.think_tokens, c.solve_tokens, c.forced) for c in expected
    ]
