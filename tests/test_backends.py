"""The backend registry (e1/engine/backends.py): the five backends, ``load_engine`` as their one
dispatcher (reaching the engine behind an API, not transformers), did-you-mean on a typo, and
training refusing a backend that has no weights here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from e1.engine import BACKEND_NAMES, BACKENDS, LOADERS, LOCAL_BACKENDS, check_backend, load_engine, resolve_backend
from e1.engine.api.openai_engine import ApiSettings, OpenAIEngine
from e1.engine.spec import EngineSpec
from e1.errors import ConfigError
from tests.test_api_backend import MODEL, StandIn


def test_the_registry_lists_exactly_the_five_backends():
    assert list(BACKENDS) == ["hf", "vllm", "openai", "gemini", "anthropic"]
    assert list(LOADERS) == list(BACKENDS)  # one loader each, beside load_engine
    assert BACKEND_NAMES == ("auto", "hf", "vllm", "openai", "gemini", "anthropic")  # what --backend takes
    assert LOCAL_BACKENDS == ("auto", "hf", "vllm")  # what training takes
    assert {name: backend.kind for name, backend in BACKENDS.items()} == {
        "hf": "local",
        "vllm": "local",
        "openai": "server",
        "gemini": "hosted",
        "anthropic": "hosted",
    }
    assert all(backend.served == (backend.key_env is not None) for backend in BACKENDS.values())


def test_auto_resolves_to_a_local_backend(monkeypatch):
    import e1.engine.backends as backends

    monkeypatch.setattr(backends, "vllm_available", lambda: False)
    assert resolve_backend("auto") == "hf"
    assert [resolve_backend(name) for name in BACKENDS] == list(BACKENDS)  # every other name is itself


@pytest.fixture
def stand_in():
    server = StandIn().start()
    yield server
    server.stop()


def test_load_engine_reaches_the_openai_engine(stand_in):
    engine = load_engine(MODEL, EngineSpec(backend="openai"), api=ApiSettings(stand_in.url), modes=["truncate"])
    assert isinstance(engine, OpenAIEngine)  # not transformers' engine on a model called "stand-in"
    assert [path for path, _ in stand_in.requests] == ["/v1/chat/completions"]  # its budget probe
    assert engine.describe()["url"] == stand_in.url


def test_load_engine_reaches_a_hosted_vendor(monkeypatch):
    pytest.importorskip("google.genai")
    from e1.engine.api.hosted import HostedEngine
    from tests.hosted_standins import StandIn as Hosted

    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    gemini = Hosted("gemini").start()
    try:
        engine = load_engine(
            MODEL, EngineSpec(backend="gemini"), api=ApiSettings(gemini.url, backend="gemini"), modes=["elastic"]
        )
    finally:
        gemini.stop()
    assert isinstance(engine, HostedEngine) and engine.describe()["backend"] == "gemini"


def test_an_api_backend_without_its_settings_is_one_clear_error():
    with pytest.raises(ConfigError, match="--backend openai needs --api-url"):
        load_engine(MODEL, EngineSpec(backend="openai"))


@pytest.mark.parametrize(
    "load",
    [
        lambda name: load_engine("./nowhere", EngineSpec(backend=name)),
        resolve_backend,
        check_backend,
        lambda name: check_backend(name, local=True),
    ],
)
def test_an_unknown_backend_gets_did_you_mean(load):
    with pytest.raises(ConfigError, match=r"unknown backend 'vlm'") as caught:
        load("vlm")
    assert caught.value.hint == "did you mean 'vllm'?"
    with pytest.raises(ConfigError) as caught:
        load("tpu")
    assert caught.value.hint == "choose one of auto, hf, vllm, openai, gemini, anthropic"


@pytest.mark.parametrize("backend", ["openai", "gemini", "anthropic"])
def test_training_refuses_a_backend_behind_an_api(backend):
    from e1.grpo.config import TrainConfig

    with pytest.raises(ConfigError, match=f"--backend {backend} cannot train") as caught:
        TrainConfig(model="m", data="d", engine=EngineSpec(backend=backend))
    assert caught.value.hint == "use --backend hf, vllm or auto"
    assert "\n" not in str(caught.value)  # one line in the CLI


def test_training_refuses_it_on_the_command_line(tmp_path):
    from tests.test_cli import e1

    result = e1("train", "--model", "m", "--data", "d", "--backend", "openai", "--out", str(tmp_path / "run"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: --backend openai cannot train: the model runs behind an API, and training updates its weights here "
        "(use --backend hf, vllm or auto)"
    ]


def test_an_eval_under_torchrun_refuses_a_backend_behind_an_api(tmp_path):
    from e1.eval.run import EvalConfig, load_engine_for

    config = EvalConfig(
        model=MODEL,
        datasets=("x.jsonl",),
        engine=EngineSpec(backend="openai"),
        api=ApiSettings("http://127.0.0.1:9/v1"),
        out=tmp_path / "run",
    )
    with pytest.raises(ConfigError, match="--backend openai runs in one process"):
        load_engine_for(config, ranks=SimpleNamespace(world=2))
