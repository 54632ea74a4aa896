"""Prompt options: a system prompt, chat template arguments and a budget stated in the prompt
(TALE, L1), through the model's real chat template, in eval, sweep and training."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from e1.budget import Budget
from e1.data.prompts import PromptOptions, build_prompt
from e1.engine.base import Mode, Sampling
from e1.errors import ConfigError
from e1.eval.run import EvalConfig, evaluate

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}"
)


class Templated:
    """A tokenizer stand-in with a real jinja chat template (rendered by transformers' own renderer)."""

    def __init__(self):
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        self.tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, "[UNK]"))
        )
        self.tokenizer.chat_template = TEMPLATE


def test_a_system_prompt_and_template_arguments_reach_the_chat_template():
    tokenizer = Templated().tokenizer
    plain = build_prompt(tokenizer, "What is 2+2?")
    assert plain.startswith("<|user|>What is 2+2?") and plain.endswith("<|assistant|><think>\n")
    options = PromptOptions(system="Be brief.", template_kwargs='{"enable_thinking": false}')
    prompt = build_prompt(tokenizer, "What is 2+2?", options=options)
    assert prompt.startswith("<|system|>Be brief.\n<|user|>What is 2+2?")
    assert prompt.endswith("<|assistant|><think>\n\n</think>\n\n")  # the hybrid model's thinking switched off


@pytest.mark.parametrize(
    ("budget", "sentence"),
    [("tale", "Let's think step by step and use less than 1536 tokens."), ("l1", "Think for 1536 tokens.")],
)
def test_a_stated_budget_ends_the_user_message(budget, sentence):
    prompt = build_prompt(Templated().tokenizer, "Q?", options=PromptOptions(budget=budget), budget_tokens=1536)
    assert f"Q? Let's think step by step and output the final answer within \\boxed{{}}. {sentence}\n" in prompt
    assert sentence not in build_prompt(Templated().tokenizer, "Q?", options=PromptOptions(budget=budget))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(budget="tail"), "unknown prompt budget 'tail'"),
        (dict(template_kwargs="{enable"), "is not JSON"),
        (dict(template_kwargs="[1]"), "must be a JSON object"),
        (dict(system="  "), "--system-prompt is empty"),
    ],
)
def test_bad_prompt_options_are_refused_in_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PromptOptions(**kwargs)


class Recording:
    """Records the prompts an engine is asked for, then lets the real engine answer."""

    def __init__(self, engine):
        self.engine, self.prompts = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, budget, mode, *args, **kw):
        self.prompts += [(str(mode), budget.total, p) for p in prompts]
        return self.engine.generate(prompts, budget, mode, *args, **kw)


def test_eval_states_each_cells_own_budget_and_records_the_options(tmp_path, problems_file, tiny_engine):
    engine = Recording(tiny_engine)
    config = EvalConfig(
        model="m",
        datasets=(str(problems_file),),
        budgets=(Budget(4, 2), Budget(8, 2)),
        modes=(Mode("elastic"), Mode("none")),
        sampling=Sampling(temperature=0.0, max_tokens=12),
        out=tmp_path / "run",
        prompt=PromptOptions(budget="tale", system="Be brief."),
    )
    evaluate(config, engine=engine)
    for mode, total, prompt in engine.prompts:
        assert "Be brief." in prompt
        stated = f"use less than {total} tokens." in prompt
        assert stated == (mode != "none"), (mode, total, prompt)  # none has no budget to state
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["prompt"]
    assert recorded == {"system": "Be brief.", "template_kwargs": "", "budget": "tale"}
    changed = EvalConfig(**{**config.__dict__, "prompt": PromptOptions(budget="l1")})
    with pytest.raises(Exception, match="different prompt"):
        evaluate(changed, engine=engine)  # samples drawn under another prompt are never mixed


def test_a_sweep_with_a_stated_budget_draws_cells_independently(tmp_path, problems_file, tiny_engine):
    from e1.eval.sweep import SweepConfig, sweep

    settings = EvalConfig(
        model="",
        datasets=(str(problems_file),),
        budgets=(Budget(4, 2), Budget(8, 2)),
        sampling=Sampling(temperature=0.0),
        prompt=PromptOptions(budget="l1"),
    )
    config = SweepConfig(models=("m",), settings=settings, out=tmp_path / "sweep")
    assert config.shares is False and config.eval_config("m").share_prefixes is False
    engine = Recording(tiny_engine)
    samples, _, _ = sweep(config, load_engine=lambda model: engine)
    assert {total for _, total, _ in engine.prompts} == {6, 10}
    assert all(f"Think for {total} tokens." in p for _, total, p in engine.prompts)
    assert len(samples) == 2 * 5
    with pytest.raises(ConfigError, match="prefixes cannot be shared"):
        EvalConfig(model="m", datasets=("d",), share_prefixes=True, prompt=PromptOptions(budget="tale"))


def test_the_commands_take_the_prompt_options(tmp_path, problems_file, tiny_model_dir, capsys):
    from e1.cli.app import app

    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--datasets",
            str(problems_file),
            "--think",
            "4",
            "--solve",
            "2",
            "--temperature",
            "0",
            "--backend",
            "hf",
            "--prompt-budget",
            "l1",
            "--system-prompt",
            "Short.",
            "--chat-template-kwargs",
            '{"enable_thinking": false}',
            "--out",
            str(tmp_path / "run"),
        ],
        prog_name="e1",
    )
    assert result.exit_code == 0, result.output
    prompt = json.loads((tmp_path / "run" / "config.json").read_text())["prompt"]
    assert prompt == {"system": "Short.", "template_kwargs": '{"enable_thinking": false}', "budget": "l1"}
    from tests.test_bad_inputs import run_main

    code, err = run_main(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--datasets",
            str(problems_file),
            "--prompt-budget",
            "tal",
            "--out",
            str(tmp_path / "bad"),
        ],
        capsys,
    )
    assert code != 0 and "unknown prompt budget 'tal'" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()  # refused before anything ran


def test_training_prompts_carry_the_system_prompt(tiny_model_dir, tmp_path):
    from e1.grpo.problems import prepare_inputs
    from tests.test_train import small, write_problems

    data = write_problems(tmp_path / "problems.jsonl")
    inputs = prepare_inputs(small(tiny_model_dir, data, tmp_path / "run", system_prompt="Answer fast."))
    assert all("Answer fast." in inputs.tokenizer.decode(ids) for ids in inputs.prompt_ids)
