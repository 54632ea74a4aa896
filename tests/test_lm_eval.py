"""lm-evaluation-harness's model ``e1`` (e1/integrations/lm_eval.py): a local YAML task over a local jsonl,
run by lm-eval's ``simple_evaluate`` in this process, gives e1 eval's generations, counts and accuracy."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("lm_eval")

from e1.budget import Budget  # noqa: E402
from e1.engine import Mode, Sampling  # noqa: E402
from e1.errors import E1Error  # noqa: E402
from e1.integrations.lm_eval import MODEL_ARGS, parse_model_args, request_settings  # noqa: E402

TASK_YAML = """task: e1_toy
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{problem}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["<never>"]
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    regexes_to_ignore: ["^\\\\s+", "\\\\s+$"]
"""


def _rows(path, answers):
    rows = [
        {"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": a, "task": "exact"} for i, a in enumerate(answers)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _e1_eval(model_dir, data, out, budget):
    from e1.eval import EvalConfig, evaluate

    config = EvalConfig(
        model=str(model_dir),
        datasets=(str(data),),
        budgets=(budget,),
        modes=(Mode("elastic"),),
        sampling=Sampling(temperature=1.0, top_p=1.0, seed=3),
        out=out,
        batch_size=4,
    )
    samples, summary = evaluate(config)
    return samples.set_index("problem_id"), float(summary.iloc[0].accuracy)


def _lm_eval(model_dir, data, folder, budget):
    import lm_eval
    from lm_eval.tasks import TaskManager

    folder.mkdir()
    (folder / "e1_toy.yaml").write_text(TASK_YAML.format(data=data))
    return lm_eval.simple_evaluate(
        model="e1",
        model_args=f"pretrained={model_dir},think={budget.think},solve={budget.solve},mode=elastic,"
        "temperature=1.0,top_p=1,seed=3",
        tasks=["e1_toy"],
        task_manager=TaskManager(include_path=str(folder)),
        apply_chat_template=True,
        device="cpu",
        batch_size=4,
        log_samples=True,
    )


def test_lm_eval_equals_e1_eval_on_the_same_rows(tmp_path, tiny_model_dir):
    budget = Budget(6, 8)
    # the tiny model's sampled solutions become the answers of rows 0 and 2: an accuracy of 2/4, not 0 = 0.
    # Seeds come from (dataset, id, mode, budget), and the file's stem is the task's name: equal samples
    (tmp_path / "probe").mkdir()
    probe = _rows(tmp_path / "probe" / "e1_toy.jsonl", ["x!"] * 4)
    first, _ = _e1_eval(tiny_model_dir, probe, tmp_path / "probe-run", budget)
    solutions = [first.loc[f"q{i}", "solution_text"].strip() for i in range(4)]
    assert solutions[0] and solutions[2] and solutions[0] != "x!" and solutions[2] != "x!"
    data = _rows(tmp_path / "e1_toy.jsonl", [solutions[0], "x!", solutions[2], "x!"])
    e1_samples, e1_accuracy = _e1_eval(tiny_model_dir, data, tmp_path / "run", budget)
    results = _lm_eval(tiny_model_dir, data, tmp_path / "tasks", budget)

    assert e1_accuracy == pytest.approx(0.5)
    assert results["results"]["e1_toy"]["exact_match,none"] == pytest.approx(e1_accuracy)
    logged = sorted(results["samples"]["e1_toy"], key=lambda s: s["doc_id"])
    assert len(logged) == 4
    for sample in logged:
        row = e1_samples.loc[sample["doc"]["id"]]
        counts = sample["arguments"][0][2]["e1"]  # the request's arguments, as lm-eval logs them
        assert counts["think_tokens"] == [row.think_tokens] and counts["solve_tokens"] == [row.solve_tokens]
        assert counts["forced"] == [bool(row.forced)] and counts["finish_reason"] == [row.finish_reason]
        assert sample["resps"][0][0] == row.solution_text  # the generation itself
        assert row.think_tokens <= budget.think and row.solve_tokens <= budget.solve


def test_loglikelihood_is_refused_in_one_line(tiny_model_dir):
    from lm_eval.api.registry import get_model

    lm = get_model("e1").create_from_arg_string(f"pretrained={tiny_model_dir},think=4,solve=4", {"device": "cpu"})
    for method in (lm.loglikelihood, lm.loglikelihood_rolling):
        with pytest.raises(E1Error, match="does not compute") as err:
            method([])
        assert "\n" not in str(err.value)


GOOD = {"pretrained": "some/model", "think": 1024, "solve": "1k"}
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=60)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from([*MODEL_ARGS, "Think", "trust_remote_code", "api_key", "pretrained "]), VALUES))
def test_model_args_are_checked_values_or_one_line_errors(extra):
    args = GOOD | extra
    try:
        parsed = parse_model_args(args)
    except E1Error as err:
        assert "\n" not in str(err) and len(str(err)) < 600
        return
    assert set(args) - {k for k, v in args.items() if v is None} <= set(MODEL_ARGS)
    assert isinstance(parsed.pretrained, str) and parsed.pretrained.isprintable()
    assert 0 <= parsed.budget.think and 1 <= parsed.budget.solve and parsed.batch_size >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"think": 8, "solve": 8}, "pretrained= is missing"),
        (GOOD | {"thinkk": 3}, "unknown e1 model argument"),
        (GOOD | {"think": True}, "budget"),
        (GOOD | {"think": 1.5}, "budget"),
        (GOOD | {"solve": 0}, "solve budget"),
        (GOOD | {"think": "9" * 400}, "think budget"),
        (GOOD | {"pretrained": "a\nb"}, "printable"),
        (GOOD | {"mode": "elastic:grace=-1"}, "grace"),
        (GOOD | {"backend": "openai"}, "not a local backend"),
        (GOOD | {"batch_size": "auto:x"}, "batch_size"),
        (GOOD | {"temperature": -1}, "^temperature= must be"),
        (GOOD | {"top_p": 0}, "^top_p= must be"),
    ],
)
def test_hostile_model_args_are_refused_in_one_line(args, message):
    with pytest.raises(E1Error, match=message) as err:
        parse_model_args(args)
    assert "\n" not in str(err.value)


def test_model_args_parse_as_lm_eval_types_them():
    from lm_eval.utils import simple_parse_args_string

    parsed = parse_model_args(
        simple_parse_args_string("pretrained=./m,think=1.5k,solve=512,mode=truncate,batch_size=auto,temperature=0.6")
        | {"device": None, "max_batch_size": None}
    )
    assert parsed.budget == Budget(1536, 512) and parsed.mode == Mode.parse("truncate")
    assert parsed.batch_size == 64 and parsed.sampling.temperature == 0.6


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["until", "do_sample", "temperature", "top_k", "repetition_penalty"]), VALUES))
def test_generation_kwargs_are_checked_or_refused_in_one_line(gen_kwargs):
    base = Sampling(temperature=0.0)
    try:
        sampling, stops = request_settings(gen_kwargs, base)
    except E1Error as err:
        assert "\n" not in str(err)
        return
    assert "repetition_penalty" not in gen_kwargs and all(isinstance(s, str) and s for s in stops)
    assert request_settings({"until": ["\n\n", "Question:"]}, base)[1] == ("\n\n", "Question:")  # lm-eval's own
    assert sampling.temperature == (0.0 if gen_kwargs.get("do_sample") is False else gen_kwargs.get("temperature", 0.0))


def _instances(contexts, gen_kwargs, repeats=1):
    from lm_eval.api.instance import Instance

    return [
        Instance("generate_until", {"id": f"d{i}"}, (context, dict(gen_kwargs)), 0, ("toy", i, repeats))
        for i, context in enumerate(contexts)
    ]


def test_repeats_and_batches_give_each_request_its_own_samples(tiny_engine):
    """A request listed k times (lm-eval's repeats) gets k different samples in order, and a request's samples
    do not depend on which requests share its call: its seed is its (task, document id)."""
    from e1.integrations.lm_eval import E1LM, ModelArgs

    lm = E1LM.__new__(E1LM)
    lm.args = ModelArgs("tiny", Budget(4, 6), Mode.parse("elastic"), None, Sampling(temperature=1.0, top_p=1.0), 8)
    lm.engine = tiny_engine
    reqs = _instances(["What is 1?", "What is 2?", "What is 3?"], {"until": ["\n\n"]}, repeats=3)
    texts = lm.generate_until([req for req in reqs for _ in range(3)])
    assert len(texts) == 9 and len(set(texts[:3])) > 1  # three samples of one request differ
    for req in reqs:
        counts = req.args[2]["e1"]
        assert len(counts["think_tokens"]) == 3 and all(t <= 4 for t in counts["think_tokens"])
    alone = _instances(["What is 1?", "What is 2?", "What is 3?"], {"until": ["\n\n"]}, repeats=3)[1]
    assert lm.generate_until([alone] * 3) == texts[3:6]
    greedy = _instances(["What is 1?"], {"until": ["\n\n"], "do_sample": False})
    assert lm.generate_until(greedy) == lm.generate_until(_instances(["What is 1?"], {"temperature": 0}))
