"""The API backend: a model behind an OpenAI-compatible server, through the same ``generate``.

    settings = ApiSettings("http://127.0.0.1:8000/v1", tokenizer="./my-model")
    engine = OpenAIEngine.load("my-model", settings, modes=[Mode()])
    completions = engine.generate(prompts, Budget(1024, 1024), Mode(), Sampling(seed=0), n=4, seeds=[7])

At load e1 asks the server which model it serves (and its context) and sends one probe carrying
e1's budget fields; a reply with a per-choice ``budget`` means the server decodes budgets itself
(``e1 serve``, or vLLM with e1's plug-ins); a plain one is asked whether it takes and returns token
ids (:mod:`e1.engine.api.probe`). How each mode then runs, and how exact it is (``token_exact``):

| server | prompts | mode | method | exact? |
|---|---|---|---|---|
| takes budgets | ``--tokenizer`` | every mode but ``wait=k`` | one request (the prompt as token ids) with ``thinking_budget``/``solution_budget``/``budget_mode``; the reply's token ids replayed through :class:`~e1.engine.row_state.RowState` and checked against its ``budget`` | token for token as the local engines |
| takes budgets | chat messages | the same | the same request on ``/v1/chat/completions``; counts from the reply's ``budget`` | counts and texts as the server decoded them |
| plain | ``--tokenizer`` | ``elastic``, ``budget-forcing`` (no ``wait``/``grace``) | two calls on ``/v1/completions``: thinking with ``max_tokens=t`` stopping at the end marker, then the solution (``max_tokens=s``) from prompt + thinking + (exit text) + marker; a prompt that closed thinking (Qwen3, thinking off) only the solution call | ids in and out (vLLM): token for token as the local engines; else exact in distribution up to the thinking re-tokenised at the seam, counts from ``usage`` (and a text-only server tokenises the prompt itself) |
| plain | ``--tokenizer`` | ``truncate``, ``none`` | one call, ``max_tokens`` = t + s (or ``--max-tokens``) | ids in and out: the reply's ids replayed, token for token; else counts from ``usage``, thinking tokenised with the tokenizer |
| plain | chat messages | ``truncate``, ``none`` | one call; thinking tokens from ``usage.completion_tokens_details.reasoning_tokens`` | refused per reply if the server does not report it |
| plain | chat messages | ``elastic``, ``budget-forcing`` | refused: a forced end marker needs a continuation of the prompt text | |

Every request carries a ``seed`` derived from e1's per-sample seed (as the vLLM backend derives
its own, so the same server gives the same samples on a rerun); ``concurrency`` requests are in
flight at once (:mod:`e1.engine.api.client`: retries, the reply journal that makes a resume send
no finished request twice). The API key is read from an environment variable only.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence

from e1.budget import Budget
from e1.engine.api.client import (
    Caller,
    ChatMessages,
    ReplyJournal,
    RequestError,
    check_report,
    reported_completion,
    row_task,
    run_rows,
)
from e1.engine.api.plain import PlainRows
from e1.engine.api.probe import (
    BUDGET_SERVER,
    PLAIN_SERVER,
    exactness,
    probe_budgets,
    probe_token_ids,
    served_context,
    warn_inexact,
)
from e1.engine.backends import API_BACKENDS, BACKENDS, HOSTED_BACKENDS  # noqa: F401  (HOSTED_BACKENDS: for importers)
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.markers import DEFAULT_END, DEFAULT_START, Markers
from e1.engine.api.replies import MODE_FIELD, SOLVE_FIELD, THINK_FIELD, Choice, Usage, bounded_client
from e1.engine.row_engine import RowEngine
from e1.engine.api.settings import API_BACKEND, API_FLAGS, API_NUMBERS, KEY_ENVS, ApiSettings  # noqa: F401  (importers)
from e1.errors import ConfigError, redact

BUDGET_FIELDS, TWO_CALLS, ONE_CALL = "budget fields (one request)", "two calls", "one call"


def check_api(backend: str, api: ApiSettings | None, modes: Sequence[Mode] = ()) -> None:
    """``--backend openai`` needs ``--api-url``; only an API backend takes API settings; only a
    hosted reasoning API takes an effort level."""
    if backend == API_BACKEND and api is None:
        raise ConfigError("--backend openai needs --api-url", hint="e.g. --api-url http://127.0.0.1:8000/v1")
    if api is not None and backend != api.backend:
        raise ConfigError(
            f"--api-url is for --backend {'|'.join(API_BACKENDS)}, not {backend}",
            hint="pass --backend openai (or gemini, anthropic)",
        )
    effort = next((mode for mode in modes if mode.effort), None)
    if effort is not None and backend not in API_BACKENDS:
        raise ConfigError(
            f"mode {effort} needs a hosted reasoning API: a local model has no effort levels",
            hint="pass --backend openai|gemini|anthropic, or give token budgets (--think)",
        )
    from e1.engine.api.vendors import EFFORTS, VENDORS, check_effort

    for mode in modes if backend in API_BACKENDS else ():  # the vendor's levels and methods, before anything starts
        check_effort(backend, mode.effort, EFFORTS[backend])
        if backend in VENDORS:
            VENDORS[backend].method(mode)


def api_identity(model: str, api: ApiSettings) -> str:
    """What a served model is, to tell runs apart: the URL, the served name and the tokenizer."""
    from e1.store import model_identity

    tokenizer = model_identity(api.tokenizer) if api.tokenizer else "chat messages"
    where = redact(api.url.rstrip("/")) if api.url else "the vendor's endpoint"  # config.json: no key in it
    where = where if api.backend == API_BACKEND else f"{api.backend} at {where}"
    return f"{where} | {model} | {tokenizer}"


class OpenAIEngine(PlainRows, RowEngine):
    """Without ``--tokenizer`` (``tokenizer`` a :class:`ChatMessages`) prompts are chat messages and
    counts come from the replies. A plain server's rows are :class:`~e1.engine.api.plain.PlainRows`."""

    def __init__(
        self,
        caller: Caller,
        settings: ApiSettings,
        model: str,
        tokenizer,
        markers: Markers,
        server: str,
        max_context: int | None,
        modes: Sequence[Mode] = (),
        token_ids: tuple[bool, bool] = (False, False),
    ):
        self.caller, self.settings, self.model = caller, settings, model
        self.tokenizer, self.markers, self.server, self.max_context = tokenizer, markers, server, max_context
        self.chat = isinstance(tokenizer, ChatMessages)  # no --tokenizer: the server applies the template
        # whether the server takes the prompt as token ids, and returns the reply's ids (vLLM: both)
        self.ids_in, self.ids_out = token_ids if not self.chat else (False, False)
        self.methods = {str(mode): self.method(mode) for mode in modes}  # refuses a mode the server cannot do

    @classmethod
    def load(
        cls,
        model: str,
        settings: ApiSettings,
        modes: Sequence[Mode] = (),
        *,
        think_start: str | None = None,
        think_end: str | None = None,
        journal: Path | None = None,
    ) -> OpenAIEngine:
        """Connect, check the model is served, probe for budget support; ``journal``: the reply file."""
        client = openai_client(settings)
        tokenizer, markers = ChatMessages(), _text_markers(think_start, think_end)
        if settings.tokenizer:
            from e1.engine.hf.hf_engine import load_tokenizer
            from e1.engine.markers import generation_eos, resolve_markers

            tokenizer = load_tokenizer(settings.tokenizer)
            markers = resolve_markers(tokenizer, think_start, think_end, generation_eos(settings.tokenizer))
        max_context = served_context(client, model, settings.url)
        replies = ReplyJournal(journal)  # the probes' replies too: a resumed run sends no answered request again
        probe = Caller(client, replies, deadline_s=settings.request_timeout_s)
        server = probe_budgets(probe, model, chat=settings.tokenizer is None)
        token_ids = (True, True)  # a budget server is sent e1's ids and its reply's ids are replayed (or refused)
        if settings.tokenizer and server == PLAIN_SERVER:
            token_ids = probe_token_ids(probe, model, tokenizer.encode("Hi", add_special_tokens=False))
        caller = Caller(client, replies, (markers.start_text, markers.end_text), settings.request_timeout_s)
        warn_inexact(settings.url, settings.tokenizer is None, *token_ids)  # one line, as config.json records
        return cls(
            caller, settings, model, tokenizer, markers, server, max_context, [Mode.parse(m) for m in modes], token_ids
        )

    def method(self, mode: Mode | str) -> str:
        """How ``mode`` runs on this server (see the module's table); refuses what it cannot do."""
        mode = Mode.parse(mode)
        if mode.trials:
            raise ConfigError(
                f"mode {mode} cannot run on {self.settings.url}: its trial answers need the model's "
                "token probabilities and a rollback of the running decode",
                hint="use --backend hf or vllm (a local model)",
            )
        if mode.prefills and self.chat:
            raise ConfigError(
                f"mode {mode} cannot run on {self.settings.url} without --tokenizer: the server applies the chat "
                "template, so e1 cannot end the prompt in a closed thinking box",
                hint="pass --tokenizer (the served model's): prompts then go to /v1/completions as text",
            )
        if mode.effort:  # a hosted reasoning model's effort level: reasoning_effort on a chat request
            from e1.engine.api.vendors import OPENAI_EFFORTS, check_effort

            check_effort(API_BACKEND, mode.effort, OPENAI_EFFORTS)
            if not self.chat:
                raise ConfigError(
                    f"mode {mode} sends reasoning_effort on chat requests",
                    hint="leave out --tokenizer: the server then counts reasoning_tokens",
                )
            return ONE_CALL
        if self.server == BUDGET_SERVER:
            if mode.wait:
                raise ConfigError(
                    f"mode {mode} cannot run on {self.settings.url}: replacing a natural end with "
                    "'Wait' needs the server to stop there, which a budget server does not",
                    hint="use budget-forcing without wait=, or a local backend",
                )
            return BUDGET_FIELDS
        if not mode.separate:  # truncate, none: one budget or none, nothing forced
            return ONE_CALL
        if mode.per_token:
            raise ConfigError(
                f"mode {mode} cannot run on {self.settings.url}: it acts on the logits at every thinking token",
                hint="serve the model with e1 serve, or use a local backend",
            )
        if self.chat:
            raise ConfigError(
                f"mode {mode} cannot run on {self.settings.url}: the server takes no thinking budget, "
                "and forcing the end marker needs the prompt as text",
                hint="pass --tokenizer (the served model's) for the two-call method, or serve with e1 serve",
            )
        if mode.grace or mode.wait:
            raise ConfigError(
                f"mode {mode} cannot run on {self.settings.url}: the server takes no thinking budget",
                hint="grace= and wait= need e1 serve (grace) or a local backend",
            )
        return TWO_CALLS

    def describe(self) -> dict:
        """What config.json records: where, what, and the method each mode used."""
        prompts = (
            "chat messages, /v1/chat/completions"
            if self.chat
            else f"chat template of {self.settings.tokenizer}, /v1/completions"
        )
        exact, why = exactness(self.chat, self.ids_in, self.ids_out)
        return {
            "url": redact(self.settings.url),
            "model": self.model,
            "server": self.server,
            "prompts": prompts,
            "methods": dict(self.methods),
            "token_exact": exact,
            "exactness": why,
            "concurrency": self.settings.concurrency,
            "max_retries": self.settings.max_retries,
            "request_timeout_s": self.settings.request_timeout_s,
        }

    def finish_run(self) -> None:
        """The run's samples are all stored: the journal of replies is no longer needed."""
        self.caller.journal.remove()

    def generate(
        self,
        prompts,
        budget: Budget,
        mode: Mode = Mode(),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress=None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]:
        from e1.engine.seeds import prompt_seeds, sample_seed

        if prefixes is not None:
            raise ConfigError(
                "the openai backend cannot follow another row's tokens",
                hint="e1 sweep draws every cell on its own with this backend",
            )
        mode = Mode.parse(mode)
        method = self.methods.get(str(mode)) or self.method(mode)
        texts, prompt_ids, rows = self._prompts(prompts, budget, mode, n)
        per_prompt = prompt_seeds(sampling, len(texts), seeds)
        run = {BUDGET_FIELDS: self._budget_row, TWO_CALLS: self._two_call_row, ONE_CALL: self._one_call_row}[method]
        tasks = [
            row_task(
                (p, j),
                run,
                texts[p],
                prompt_ids[p] if prompt_ids else None,
                (p, j),
                budget,
                mode,
                sampling,
                sample_seed(per_prompt[p], j),
            )
            for p, j in rows
        ]
        return run_rows(tasks, self.settings.concurrency, progress)

    def _prompts(self, prompts, budget: Budget, mode: Mode, n: int):
        """(prompt texts, their ids or None, the (prompt, sample) rows)."""
        if self.chat:
            if n < 1:
                raise ConfigError(f"n must be >= 1, got {n}")
            if not all(isinstance(p, str) for p in prompts):
                raise ConfigError("token-id prompts need the tokenizer", hint="pass --tokenizer")
            return list(prompts), None, [(p, j) for p in range(len(prompts)) for j in range(n)]
        mode, prompt_ids, rows = self.prepare(prompts, budget, mode, Sampling(), n)
        texts = [
            p if isinstance(p, str) else self.tokenizer.decode(ids, skip_special_tokens=False)
            for p, ids in zip(prompts, prompt_ids)
        ]
        return texts, prompt_ids, rows

    def _body(self, row_seed: int, call: int, sampling: Sampling, **fields) -> dict:
        from e1.engine.seeds import derive_seed

        body = {
            "model": self.model,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": derive_seed(row_seed, call) >> 1,
            **fields,
        }  # >> 1: a signed 64-bit value, as vLLM takes
        return body | ({"top_k": sampling.top_k} if sampling.top_k else {})

    def _call(self, endpoint: str, body: dict, read=None):
        """``read(choice, usage)`` of a reply the gate accepted (:mod:`e1.engine.api.replies`), by default
        the pair itself; ``read`` runs before the reply is journalled, so what it refuses is sent again."""
        return self.caller.call(endpoint, body, lambda reply: (read or _pair)(reply.choice, reply.usage))

    # ---- a server that takes e1's budgets: one request, exact -------------------------------

    def _budget_row(
        self, text: str, ids, row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling, row_seed: int
    ) -> Completion:
        fields = {MODE_FIELD: str(mode)}
        if not mode.bounded:
            fields["max_tokens"] = (
                sampling.max_tokens if ids is None else self.row_state(ids, budget, mode, sampling).max_new_tokens
            )
        else:
            fields.update({THINK_FIELD: budget.think, SOLVE_FIELD: budget.solve})
        if ids is None:
            return self._call(
                "chat/completions",
                self._body(row_seed, 0, sampling, **ChatMessages.request(text), **fields),
                lambda choice, usage: reported_completion(choice, usage, row),
            )
        # the prompt as e1's own ids: the server decodes exactly what a local engine would (no second BOS)
        body = self._body(row_seed, 0, sampling, prompt=list(ids), return_token_ids=True, **fields)
        return self._call(
            "completions", body, lambda choice, _: self._replayed(choice, ids, row, budget, mode, sampling)
        )

    def _replayed(
        self, choice: Choice, ids, row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling
    ) -> Completion:
        """A budget server's token ids replayed through the row's state, its report checked against e1's counts."""
        if choice.token_ids is None:
            raise RequestError(
                "the reply carries no token_ids, so e1 cannot replay it",
                hint="serve with e1 serve (vLLM returns token ids), or leave out --tokenizer",
            )
        state = self.row_state(ids, budget, mode, sampling)
        state.extend(list(choice.token_ids))
        completion = self._record(state, row, ids)
        completion.finish_reason = completion.finish_reason or choice.stopped
        check_report(choice.budget, completion)
        return completion

    def _record(self, state, row: tuple[int, int], ids) -> Completion:
        """The record of one replayed row (prompt ``row[0]``, sample ``row[1]``)."""
        return self.completions([state], [row], {row[0]: ids}, [0])[0]


def openai_client(settings: ApiSettings):
    """The SDK's client of ``settings.url``, on e1's bounded client (a deadline, a size cap); the key from its variable."""
    import openai

    http = bounded_client(settings.request_timeout_s, like=openai.DefaultHttpxClient)  # the deadline, the size cap
    return openai.OpenAI(
        base_url=settings.url,
        api_key=settings.api_key(),
        timeout=settings.request_timeout_s,
        max_retries=settings.max_retries,
        http_client=http,
    )


def _pair(choice: Choice, usage: Usage) -> tuple[Choice, Usage]:
    return choice, usage


def _text_markers(think_start: str | None, think_end: str | None) -> Markers:
    """Markers by text only (no tokenizer: chat messages; the server splits and counts)."""
    return Markers(think_start or DEFAULT_START, think_end or DEFAULT_END, (), (), frozenset(), 0, (), ())
