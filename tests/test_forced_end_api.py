"""The API backend's two-call path on a plain text server forces the very text every other engine forces
(one definition: :func:`e1.engine.rules.forced_end`): the second call's prompt after the thinking, decoded, is
what a row's :class:`~e1.engine.row_state.RowState` (hf, vLLM, ``e1 serve``, the API replay) forces at ``t``,
and the record's ``forced_text`` is the row's forced text. Executors compared, over generated modes and prompts."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.base import Mode, Sampling
from tests.test_api_backend import _engine, stand_in, tokenizer_dir  # noqa: F401 (fixtures)

EXITS = ("", "Stop now.", "\\nTime is up.\\n")
MODES = st.builds(
    lambda name, answer, exit_text: (
        name
        + (f":answer={answer}" if name == "budget-forcing" and answer else "")
        + (f":exit='{exit_text}'" if exit_text else "")
    ),
    st.sampled_from(("elastic", "budget-forcing")),
    st.sampled_from(("", "s1", "inline")),
    st.sampled_from(EXITS),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(modes=st.lists(MODES, min_size=1, max_size=3, unique=True), opened=st.booleans(), t=st.integers(1, 6))
def test_the_two_call_path_forces_what_every_engine_forces(stand_in, tokenizer_dir, modes, opened, t):  # noqa: F811
    engine = _engine(stand_in, tokenizer_dir, modes=modes)
    question = "long question"  # the stand-in thinks " a" until t, never ending thinking itself
    prompt = build_prompt(engine.tokenizer, question) if opened else question  # the template opens thinking
    ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    sampling, budget = Sampling(temperature=0.6, seed=3), Budget(t, 4)
    for mode in map(Mode.parse, modes):
        row = engine.generate([prompt], budget, mode, sampling)[0]
        second = stand_in.requests[-1][1]["prompt"]
        thinking = " a" * t
        assert row.forced and second.startswith(prompt + thinking)
        state = engine.row_state(ids, budget, mode, sampling)  # the row every local engine runs
        state.extend(engine.tokenizer.encode(thinking, add_special_tokens=False))
        forced = []
        while (token := state.forced_token()) is not None:
            forced.append(token)
            state.accept(token)
        decode = engine.tokenizer.decode
        assert second[len(prompt + thinking) :] == decode(forced), mode
        assert row.forced_text == decode(state.forced_text_ids()), mode
