"""e1's budgets inside lm-evaluation-harness: a model named ``e1`` in lm-eval's model registry, so any
generative lm-eval task decodes under a think budget ``t`` and a solve budget ``s`` in one of e1's modes.

    python -m e1.integrations.lm_eval run --model e1 --device cpu \\
        --model_args pretrained=PATH,think=1024,solve=512,mode=elastic --tasks gsm8k --apply_chat_template

    import e1.integrations.lm_eval, lm_eval  # importing this module registers "e1"
    lm_eval.simple_evaluate(model="e1", model_args="pretrained=PATH,think=1024,solve=512", tasks=[...])

Why ``python -m`` and not the bare ``lm_eval`` command: lm-eval 0.4.13 finds a model only in its registry
(``lm_eval/api/registry.py``, ``Registry.get`` l.278 and ``get_model`` l.491), which holds its own
``MODEL_MAPPING`` (``lm_eval/models/__init__.py``) and what imported code registered; it reads no entry-point
group for models, and ``--include_path`` adds tasks only. So the model exists once this module is imported:
``python -m e1.integrations.lm_eval`` is lm-eval's own command line (``lm_eval/__main__.py: cli_evaluate``)
after that import. Registration is lm-eval's lazy form (``Registry.register(alias, target="module:Class")``,
its docstring's "Registering with Lazy Loading"), after importing ``lm_eval.models``: ``get_model`` imports
those only while the registry is empty (registry.py l.504-505), so registering first would hide ``hf``, ``vllm``...

What e1 adds to lm-eval's contract (``lm_eval/api/model.py: LM``):

- ``generate_until`` decodes every request through e1's one engine loader (:func:`e1.engine.load_engine`),
  batched: requests with the same sampling settings and repeat count go to one ``generate`` call. It returns
  the solution (the text after the end of thinking; "" when thinking never ended, which e1 scores wrong too),
  cut at the task's ``until`` strings. ``max_gen_toks`` is not read: the budgets bound the output.
- Each sample's counts stay in lm-eval's logged samples: lm-eval logs ``req.args`` of every request
  (``lm_eval/evaluator.py`` l.648, ``"arguments"``; ``EvaluationTracker.save_results_samples``,
  ``loggers/evaluation_tracker.py`` l.320-363, writes them as ``gen_args_i.arg_j``), so
  the request's arguments gain a third item after (context, gen_kwargs):
  ``{"e1": {"think_tokens": [...], "solve_tokens": [...], "forced": [...], "finish_reason": [...]}}``, one
  entry per repeat, in the order of ``resps``. (lm-eval's response cache, ``CachingLM`` in model.py, stores
  an answer under the hash of the arguments after the call, counts included, and never finds it again:
  with ``--use_cache`` every run decodes anew, never reads an answer without its counts.)
- ``loglikelihood`` and ``loglikelihood_rolling`` refuse in one line: a budget bounds generation.
- Sampling: greedy unless ``model_args`` set ``temperature`` > 0; a task's ``do_sample: false`` (or
  ``temperature: 0``) makes it greedy, its ``temperature``/``top_p``/``top_k`` override the model's.

``model_args`` cross one gate, :func:`parse_model_args`; a task's generation kwargs one more,
:func:`request_settings`. Source read: EleutherAI/lm-evaluation-harness v0.4.13 (the installed package).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lm_eval.api.model import LM

from e1.budget import Budget
from e1.engine import LOCAL_BACKENDS, EngineSpec, Mode, Sampling, load_engine, problem_seed
from e1.errors import ConfigError, E1Error, did_you_mean
from e1.numeric import Number

NAME = "e1"  # the model's name in lm-eval's registry: --model e1
MAX_TEXT = 4096  # the longest path, mode or stop text a model argument or a task may give
_BATCH = Number(int, min=1, max=1_000_000, hint="e.g. batch_size=64, or auto")
_AUTO_BATCH = re.compile(r"auto(:\d{1,6})?")  # lm-eval's --batch_size auto / auto:N
DEFAULT_BATCH = 64


@dataclass(frozen=True)
class ModelArgs:
    """What ``--model_args`` (and lm-eval's --batch_size/--device) ask of e1, checked."""

    pretrained: str
    budget: Budget
    mode: Mode
    engine: EngineSpec
    sampling: Sampling
    batch_size: int


# each key: what it is, for the one-line refusal of an unknown key and for docs/integrations.md
MODEL_ARGS = {
    "pretrained": "the model: a local folder or a hub name",
    "think": "think budget t, in tokens (1024, 1k, 1.5k)",
    "solve": "solve budget s, in tokens",
    "mode": "e1's decoding mode, e.g. elastic, truncate, budget-forcing (default elastic)",
    "backend": "auto | hf | vllm",
    "dtype": "weights dtype (auto, bfloat16, float16, float32)",
    "device": "auto | cpu | cuda | cuda:N (lm-eval's --device)",
    "batch_size": "rows per forward pass, or auto (lm-eval's --batch_size)",
    "max_batch_size": "lm-eval's --max_batch_size: the batch size of auto",
    "temperature": "sampling temperature (default 0: greedy)",
    "top_p": "nucleus threshold",
    "top_k": "top-k (0 = off)",
    "seed": "random seed of every sample",
}
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")
GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p", "top_k")


def parse_model_args(args: Mapping[str, object]) -> ModelArgs:
    """The one gate of ``model_args`` (lm-eval's ``key=value,...`` typed by its ``handle_arg_string``, or
    a dict): an unknown key, a missing model or budget, a value of the wrong type or out of range is one
    :class:`~e1.errors.E1Error` line. ``None`` (lm-eval's default for --device and --max_batch_size) is unset."""
    given = {key: value for key, value in args.items() if value is not None}
    for key in given:
        if key not in MODEL_ARGS:
            raise ConfigError(f"unknown e1 model argument {_show(key)}", hint=did_you_mean(str(key), list(MODEL_ARGS)))
    for key in ("pretrained", "think", "solve"):
        if key not in given:
            raise ConfigError(f"e1 model argument {key}= is missing", hint="e.g. pretrained=PATH,think=1024,solve=512")
    for key in ("pretrained", "mode", "backend", "dtype", "device"):
        if key in given:
            _text(given[key], key)
    backend = given.get("backend", "auto")
    if backend not in LOCAL_BACKENDS:
        raise ConfigError(f"backend={_show(backend)} is not a local backend", hint="auto | hf | vllm")
    try:
        engine = EngineSpec(backend=backend, dtype=given.get("dtype", "auto"), device=given.get("device", "auto"))
        sampling = Sampling(**{"temperature": 0.0, **{k: given[k] for k in _SAMPLING_KEYS if k in given}})
    except E1Error as err:  # e1's specs name their command-line flags: say the model argument instead
        raise ConfigError(_as_model_arg(err.message), hint=err.hint and _as_model_arg(err.hint)) from None
    return ModelArgs(
        pretrained=given["pretrained"],
        budget=Budget.parse(_budget(given["think"]), _budget(given["solve"])),
        mode=Mode.parse(given.get("mode", "elastic")),
        engine=engine,
        sampling=sampling,
        batch_size=_batch_size(given.get("batch_size"), given.get("max_batch_size")),
    )


def request_settings(gen_kwargs: object, base: Sampling) -> tuple[Sampling, tuple[str, ...]]:
    """The one gate of a task's generation kwargs: (the request's sampling, its stop strings). A key e1
    cannot honour (``repetition_penalty``...) is refused in one line rather than ignored."""
    if not isinstance(gen_kwargs, Mapping):
        raise ConfigError(f"generation kwargs must be a mapping, got {type(gen_kwargs).__name__}")
    for key in gen_kwargs:
        if key not in GEN_KWARGS:
            raise ConfigError(
                f"the task's generation kwarg {_show(key)} is not one e1 decodes with",
                hint=f"e1 reads {', '.join(GEN_KWARGS)}; budgets replace max_gen_toks",
            )
    changes = {key: gen_kwargs[key] for key in ("temperature", "top_p", "top_k") if key in gen_kwargs}
    do_sample = gen_kwargs.get("do_sample", True)
    if not isinstance(do_sample, bool):
        raise ConfigError(f"do_sample must be true or false, got {_show(do_sample)}")
    if not do_sample:
        changes["temperature"] = 0.0
    try:
        sampling = replace(base, **changes)
    except E1Error as err:
        raise ConfigError(_as_model_arg(err.message), hint=err.hint and _as_model_arg(err.hint)) from None
    return sampling, _stops(gen_kwargs.get("until", ()))


class E1LM(LM):
    """lm-eval's model ``e1``: generation under e1's budgets (see the module's docstring)."""

    def __init__(self, **model_args):
        super().__init__()
        self.args = parse_model_args(model_args)
        self.engine = load_engine(self.args.pretrained, self.args.engine, batch_size=self.args.batch_size)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise _no_scoring("loglikelihood")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise _no_scoring("loglikelihood_rolling")

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Every request decoded under the budget; the counts go into each request's arguments."""
        repeats: dict[int, list] = {}  # lm-eval lists a request once per repeat (evaluator.py: cloned_reqs)
        for req in requests:
            repeats.setdefault(id(req), [req, 0])[1] += 1
        groups = defaultdict(list)
        stops = {}
        for req, n in repeats.values():
            sampling, stops[id(req)] = request_settings(req.args[1], self.args.sampling)
            groups[sampling, n].append(req)
        samples: dict[int, list] = {}
        for (sampling, n), reqs in groups.items():
            for req, completions in zip(reqs, self._generate(reqs, sampling, n), strict=True):
                samples[id(req)] = completions
                _record(req, completions)
        taken: dict[int, int] = defaultdict(int)  # the k-th time a request is listed it gets its k-th sample
        texts = []
        for req in requests:
            completion = samples[id(req)][taken[id(req)]]
            taken[id(req)] += 1
            texts.append(_cut(completion.solution_text if completion.closed else "", stops[id(req)]))
        return texts

    def _generate(self, reqs: list, sampling: Sampling, n: int) -> list[list]:
        """``n`` completions per request, each request's seed its (task, document id), as ``e1 eval`` seeds
        a (dataset, problem id): the samples do not depend on the batch."""
        budget, mode = self.args.budget, self.args.mode
        seeds = [problem_seed(sampling.seed, str(req.task_name), _problem_id(req), mode, budget) for req in reqs]
        completions = self.engine.generate([req.args[0] for req in reqs], budget, mode, sampling, n=n, seeds=seeds)
        per_request: list[list] = [[] for _ in reqs]
        for completion in completions:
            per_request[completion.prompt_index].append(completion)
        return [sorted(found, key=lambda c: c.sample_index) for found in per_request]

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """lm-eval's --apply_chat_template: the model's own template (e1 builds its prompts the same way)."""
        if not getattr(self.engine.tokenizer, "chat_template", None):
            raise ConfigError(
                f"{self.args.pretrained} has no chat template", hint="leave out --apply_chat_template for this model"
            )
        return self.engine.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    @property
    def tokenizer_name(self) -> str:
        return self.args.pretrained.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.engine.tokenizer, "chat_template", None) or ""


def _record(req, completions: list) -> None:
    """The counts of a request's samples, kept in the arguments lm-eval logs (see the module's docstring)."""
    counts = {
        "think_tokens": [c.think_tokens for c in completions],
        "solve_tokens": [c.solve_tokens for c in completions],
        "forced": [c.forced for c in completions],
        "finish_reason": [c.finish_reason for c in completions],
    }
    req.arguments = (*req.arguments[:2], {NAME: counts})


def _problem_id(req) -> str:
    """A document's id as e1 names a problem's (``e1.data.schema.ID``): its ``id`` field, else
    ``{task}-{index}``; so a task named like its jsonl's stem samples as ``e1 eval`` does on that file."""
    given = req.doc.get("id") if isinstance(req.doc, Mapping) else None
    return (
        str(given) if isinstance(given, str | int) and not isinstance(given, bool) else f"{req.task_name}-{req.doc_id}"
    )


def _cut(text: str, stops: tuple[str, ...]) -> str:
    """``text`` up to its first stop string (lm-eval's ``until``)."""
    ends = [text.find(stop) for stop in stops if stop in text]
    return text[: min(ends)] if ends else text


def _stops(until: object) -> tuple[str, ...]:
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, list | tuple) or len(until) > 64:
        raise ConfigError(f"until must be a text or a list of at most 64 texts, got {_show(until)}")
    for stop in until:  # "\n\n" is lm-eval's default stop: any text, not only a printable one
        if not isinstance(stop, str) or not stop or len(stop) > MAX_TEXT:
            raise ConfigError(f"each until text must have 1 to {MAX_TEXT} characters, got {_show(stop)}")
    return tuple(until)


def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not value.isprintable():
        raise ConfigError(
            f"{key}= must be a printable text of 1 to {MAX_TEXT} characters, got {_show(value)}",
            hint=MODEL_ARGS.get(key),
        )
    return value


def _budget(value: object) -> object:
    """lm-eval types ``think=1024`` as an int and ``think=1k`` as a text; a float or bool is no budget."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"a budget is a whole number of tokens such as 1024 or 1k, got {_show(value)}")
    return value


def _batch_size(value: object, most: object) -> int:
    if value is None:
        return DEFAULT_BATCH
    if isinstance(value, str) and _AUTO_BATCH.fullmatch(value):
        return DEFAULT_BATCH if most is None else _BATCH.check(most, "max_batch_size")
    return _BATCH.check(value, "batch_size")


def _as_model_arg(text: str) -> str:
    """``--top-p must be ...`` as ``top_p= must be ...``."""
    for key in (*_SAMPLING_KEYS, "dtype", "device"):
        text = re.sub(rf"--{key.replace('_', '-')}\b(?: (?!must\b))?", f"{key}=", text)
    return text


def _show(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _no_scoring(method: str) -> E1Error:
    return ConfigError(
        f"the e1 model does not compute {method}: its budgets bound generation",
        hint="run generative tasks (output_type: generate_until) with --model e1",
    )


def register() -> None:
    """Put ``e1`` in lm-eval's model registry (lazily: the class loads when lm-eval asks for it)."""
    import lm_eval.models  # noqa: F401  lm-eval's own names first (registry.py get_model: only when empty)
    from lm_eval.api.registry import model_registry

    model_registry.register(NAME, target="e1.integrations.lm_eval:E1LM")  # this module, also when run as __main__


def main() -> None:
    """lm-eval's command line with ``e1`` registered; an e1 error is one line, not a traceback."""
    import sys

    from lm_eval.__main__ import cli_evaluate

    try:
        cli_evaluate()
    except E1Error as err:
        sys.exit(f"error: {err}")


register()

if __name__ == "__main__":
    main()
