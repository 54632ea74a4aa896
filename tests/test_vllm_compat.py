"""The vLLM range e1 declares is the range it checks: every integration point e1 uses (the server
entry and its flags, the logits-processor interface, the engine calls, sleep/wake and weight
reload) is in the installed vLLM (offline) and in the oldest and newest supported releases' real
wheels, read from PyPI by range requests (about 1 s each; skipped offline). The same ``missing``
check reads all three trees, so the manifest cannot drift from what is tested.
"""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest
import tomllib

import e1.engine.vllm.compat as vllm_compat
from e1.engine.vllm.compat import (
    NEWEST,
    OLDEST,
    SERVER_ENTRIES,
    SUPPORTED,
    check_runner,
    missing,
    processor_class,
    server_entry,
)
from e1.errors import ModelError

ROOT = Path(__file__).resolve().parents[1]


def tree(files: dict[str, str]):
    return files.get


def test_pyproject_declares_the_range_that_is_checked():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [f"vllm{SUPPORTED}"]
    from packaging.specifiers import SpecifierSet

    assert OLDEST in SpecifierSet(SUPPORTED) and NEWEST in SpecifierSet(SUPPORTED)
    assert "0.25.1" not in SpecifierSet(SUPPORTED) and "0.34.0" not in SpecifierSet(SUPPORTED)


def test_installed_vllm_has_every_integration_point():
    pytest.importorskip("vllm")
    import importlib

    assert missing(vllm_compat.installed_source()) == []
    entry = server_entry()
    assert importlib.util.find_spec(entry) is not None
    from vllm import LLM, SamplingParams
    from vllm.v1.sample.logits_processor import LogitsProcessor

    assert all(hasattr(LLM, name) for name in ("generate", "collective_rpc", "reset_prefix_cache", "sleep", "wake_up"))
    assert hasattr(LogitsProcessor, "validate_params") and "extra_args" in SamplingParams.__struct_fields__


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_oldest_and_newest_supported_vllm_have_every_integration_point(version):
    from tests.vllm_wheels import wheel_source

    try:
        source = wheel_source("vllm", version)
    except (urllib.error.URLError, OSError) as err:
        pytest.skip(f"PyPI is unreachable: {err}")
    assert missing(source) == []
    assert server_entry(source) in SERVER_ENTRIES


def test_server_entry_follows_the_layout():
    main = 'if __name__ == "__main__":\n    main()\n'
    new = tree({"vllm/entrypoints/launchers/api_server/entry.py": main, "vllm/entrypoints/openai/api_server.py": main})
    old = tree({"vllm/entrypoints/openai/api_server.py": main})  # 0.26 - 0.31
    assert server_entry(new) == "vllm.entrypoints.launchers.api_server.entry"
    assert server_entry(old) == "vllm.entrypoints.openai.api_server"
    with pytest.raises(ModelError, match="none of the server entries e1 knows"):
        server_entry(tree({}))


def test_missing_names_each_gap():
    gaps = missing(tree({"vllm/sampling_params.py": "class SamplingParams: pass"}))
    assert any("SamplingParams.extra_args: vllm/sampling_params.py lacks extra_args" == gap for gap in gaps)
    assert any("the logits processor interface: no vllm/v1/sample/logits_processor/__init__.py" == g for g in gaps)
    assert any("--middleware" in gap for gap in gaps) and any("server entries" in gap for gap in gaps)


@pytest.mark.parametrize("env", [None, "0", "1", "true"])
def test_the_engine_leaves_the_runner_to_vllm_where_its_runner_v2_loads_processors(monkeypatch, env):
    """vLLM 0.32+: one class serves either runner, so e1 neither refuses nor sets the runner variable;
    0.26 (a runner V2 without processors): only an explicit V2 is refused, and nothing is set either."""
    import os

    if env is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    runner = {vllm_compat.V2_RUNNER: "class GPUModelRunner: ..."}
    check_runner(tree({**runner, vllm_compat.V2_PROCESSORS: "class LogitsProcessor: ..."}))
    check_runner(tree({}))  # no runner V2 at all
    if env in ("1", "true"):
        with pytest.raises(ModelError, match="loads no custom logits processors"):
            check_runner(tree(runner))
    else:
        check_runner(tree(runner))
    assert os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == env


def test_the_engine_gets_the_processor_of_what_the_installed_vllm_offers():
    pytest.importorskip("vllm")
    from e1.engine.vllm.processor import BudgetProcessor

    assert processor_class(tree({})) is BudgetProcessor  # 0.26: the V1 interface only
    with_v2 = tree({vllm_compat.V2_PROCESSORS: "class LogitsProcessor: ..."})
    if not vllm_compat.has_v2_processors():
        pytest.skip("the installed vLLM predates runner V2's processor interface")
    from e1.engine.vllm.v2_processor import AnyRunnerProcessor

    assert processor_class(with_v2) is AnyRunnerProcessor and processor_class() is AnyRunnerProcessor


@pytest.mark.parametrize("env", [None, "0", "1", "true"])
def test_e1_serve_sets_no_runner_variable_and_refuses_only_the_impossible_runner(monkeypatch, tiny_model_dir, env):
    """``e1 serve`` hands vLLM a processor for either runner and leaves the choice to vLLM (or the user):
    the environment the server starts with is the one it was given. Only ``VLLM_USE_V2_MODEL_RUNNER=1``
    on a vLLM whose runner V2 loads no custom processors (0.26-0.31) is refused, in one line."""
    import os

    from e1.serve import server
    from e1.serve.budgets import ServeDefaults

    if env is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    started = []

    def execv(path, argv):
        started.append((argv, dict(os.environ)))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    config = server.ServeConfig(str(tiny_model_dir), ServeDefaults(think=64, solve=32))
    with pytest.raises(SystemExit):
        server.serve(config)
    argv, environment = started[0]
    assert environment.get("VLLM_USE_V2_MODEL_RUNNER") == env
    assert argv[argv.index("--logits-processors") + 1] == server.processor_name()
    old = tree(
        {
            vllm_compat.V2_RUNNER: "class GPUModelRunner: ...",  # 0.26: a runner V2 without processors
            "vllm/entrypoints/openai/api_server.py": 'if __name__ == "__main__":\n    main()\n',
        }
    )
    monkeypatch.setattr(vllm_compat, "installed_source", lambda: old)
    if env in ("1", "true"):
        with pytest.raises(ModelError, match="loads no custom logits processors"):
            server.serve(config)
    else:
        with pytest.raises(SystemExit):
            server.serve(config)
        assert started[-1][0][started[-1][0].index("--logits-processors") + 1] == server.V1_PROCESSOR


def test_e1_serve_names_the_processor_of_what_the_installed_vllm_offers():
    from e1.serve.server import PROCESSOR, V1_PROCESSOR, processor_name

    assert processor_name(tree({})) == V1_PROCESSOR  # 0.26-0.31: the V1 interface only (runner V1 runs it)
    assert processor_name(tree({vllm_compat.V2_PROCESSORS: "class LogitsProcessor: ..."})) == PROCESSOR
    if not vllm_compat.has_v2_processors():
        pytest.skip("the installed vLLM predates runner V2's processor interface")
    import importlib

    module, name = PROCESSOR.split(":")
    served = getattr(importlib.import_module(module), name)
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1Interface
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2Interface

    assert issubclass(served, V1Interface) and issubclass(served, V2Interface)  # both runners' loaders take it
