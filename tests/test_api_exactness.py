"""Exactness is checked on every reply that shows ids, not claimed from the probe alone.

The invariant: a reply that shows the prompt as the server took it (vLLM's ``prompt_token_ids``)
shows exactly the ids e1 sent, or it is refused at the reply gate (:func:`e1.engine.api.replies.accept`)
in one line, and no row is stored, nothing journalled. The stand-in answers e1's probe honestly, then
perturbs every later prompt's ids (a BOS in front, one id dropped, changed or added, as hypothesis
draws them).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import E1Error
from tests.test_api_backend import END, StandIn, _eval, tokenizer_dir  # noqa: F401  (tokenizer_dir: a fixture)


def _perturbations():
    """A function changing a non-empty id list (so that it differs), as hypothesis draws it."""
    bos = st.integers(0, 50).map(lambda token: lambda ids: [token] + ids)
    drop = st.integers(0, 10**6).map(lambda at: lambda ids: ids[: at % len(ids)] + ids[at % len(ids) + 1 :])
    change = st.tuples(st.integers(0, 10**6), st.integers(1, 50)).map(
        lambda p: lambda ids: [t + p[1] if i == p[0] % len(ids) else t for i, t in enumerate(ids)]
    )
    add = st.integers(0, 50).map(lambda token: lambda ids: ids + [token])
    return st.one_of(bos, drop, change, add)


def _vllm_like(stand_in: StandIn, tokenizer_dir: str, perturb) -> None:
    """A server that takes and returns ids and shows the prompt's ids: honest to the probe, then ``perturb``ed."""
    from e1.engine.hf.hf_engine import load_tokenizer
    from e1.engine.markers import resolve_markers

    tokenizer = load_tokenizer(tokenizer_dir)
    markers, sent = resolve_markers(tokenizer), {}

    def decode(ids):
        text = tokenizer.decode(ids, skip_special_tokens=False)
        sent[text] = list(ids)
        return text

    def token_ids(choice, body):
        shown = sent[body["prompt"]]
        choice["prompt_token_ids"] = shown if body["max_tokens"] == 1 else perturb(shown)  # the probe: max_tokens 1
        ids = tokenizer.encode(choice["text"], add_special_tokens=False)
        return ids + (
            list(markers.end_ids)
            if choice.get("stop_reason") == END
            else [min(markers.eos_ids)]
            if choice["finish_reason"] == "stop"
            else []
        )

    stand_in.decode, stand_in.token_ids = decode, token_ids


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(perturb=_perturbations())
def test_a_server_that_changes_later_prompts_gets_no_row_stored(tokenizer_dir, perturb):
    stand_in = StandIn().start()
    try:
        _vllm_like(stand_in, tokenizer_dir, perturb)
        with tempfile.TemporaryDirectory() as tmp:
            with pytest.raises(E1Error) as refused:
                _eval(stand_in.url, tokenizer_dir, Path(tmp))
            run = Path(tmp) / "run"
            assert "the server took other prompt ids than e1 sent" in str(refused.value)
            assert "\n" not in str(refused.value)
            journal = run / "api-replies.jsonl"
            journalled = journal.read_text().splitlines() if journal.exists() else []
            assert not list(run.glob("samples*")) and len(journalled) <= 2  # the two probes' replies, no row's
    finally:
        stand_in.stop()


def test_an_honest_server_is_run_token_for_token(tokenizer_dir):
    from e1.budget import Budget
    from e1.data.prompts import build_prompt
    from e1.engine.base import Sampling
    from tests.test_api_backend import _engine

    stand_in = StandIn().start()
    try:
        _vllm_like(stand_in, tokenizer_dir, lambda ids: ids)
        engine = _engine(stand_in, tokenizer_dir, modes=("budget-forcing",))
        row = engine.generate(
            [build_prompt(engine.tokenizer, "long question")], Budget(3, 20), "budget-forcing", Sampling(temperature=0)
        )[0]
    finally:
        stand_in.stop()
    assert engine.describe()["token_exact"] and row.forced and row.solution_text == " \\boxed{5}"
