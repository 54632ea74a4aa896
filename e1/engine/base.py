"""The engine contract: one ``generate`` for every backend and every decoding mode.

    engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling(seed=0), n=4, seeds=[7, 8])
    -> list[Completion], prompt-major: completions[i * n + j] is sample j of prompt i.

Modes (see DESIGN.md):

- ``elastic`` — thinking up to ``t`` tokens, stopping early at a natural end marker; else the
  end marker is forced (its tokens counted apart from ``t`` and ``s``); then up to ``s``
  solution tokens, stopping at EOS.
- ``truncate`` — one budget ``t + s`` over the whole output; nothing is forced.
- ``budget-forcing`` (s1) — at ``t`` force the end marker and "Final Answer:"; with
  ``budget-forcing:wait=k`` the first ``k`` natural ends are replaced by "Wait".
- ``soft`` (budget guidance) — no cut at ``t``: from ``start * t`` thinking tokens on, a bias
  added to the end marker's logit rises to ``strength`` at ``t`` (``shape`` linear or exp); the
  marker is forced only at the backstop ``ceiling * t``. ``soft:start=0.8:strength=8:ceiling=1.5``.
- ``none`` — unconstrained up to ``Sampling.max_tokens`` (and the model's context); behind a
  hosted reasoning API, ``none:effort=high`` asks the vendor for that reasoning effort level.
- ``early-exit`` (DEER) — elastic, plus: at each thinking transition ("Wait", a paragraph break)
  a short greedy trial answer is decoded and rolled back; thinking ends there when its mean
  token probability reaches ``threshold`` (:mod:`e1.engine.early_exit`); ``tries=N`` stops
  trying after N trial answers (thinking then goes on as in elastic).

``stop='regex'`` (elastic, soft, budget-forcing) ends thinking as soon as the regex matches the
thinking text (a bounded tail of it, :mod:`e1.engine.stop`): the end marker is forced then.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from e1.budget import MAX_TOKENS, Budget
from e1.engine.markers import Markers
from e1.errors import ConfigError
from e1.numeric import Number, check_numbers

MODES = ("elastic", "truncate", "budget-forcing", "soft", "none", "early-exit")
BUDGETED = ("elastic", "budget-forcing", "soft", "early-exit")  # modes whose thinking has its own budget t
SOFT_SHAPES = ("linear", "exp")  # how soft's bias rises from start * t to t (e1.engine.row_state.soft_bias)


# What is forced at t before the end marker (``exit=NAME``); any other text is given quoted.
EXIT_TEXTS = {
    "marker": "",  # the paper: the bare end marker
    # Qwen3's recipe for a thinking budget (its model card), then the end marker
    "qwen": "\n\nConsidering the limited time by the user, I have to give the solution based on the thinking directly now.\n",
}
_OPTION = re.compile(r"""(?:[^:'"]|'[^']*'|"[^"]*")+""")  # one ``key=value``: colons inside quotes stay
_EFFORT = re.compile(r"^[a-z]+$")  # effort levels are words (each vendor's are checked by its backend)
_LIST_COMMA = re.compile(r""",(?=(?:[^'"]|'[^']*'|"[^"]*")*$)""")  # a comma outside quotes


# a mode's counts (e1.numeric): wait=K natural ends replaced, grace=G tokens to end a sentence
MODE_NUMBERS = {"wait": Number(int, min=0, max=1000, hint="budget-forcing:wait=2 replaces two natural ends"),
                "grace": Number(int, min=0, max=MAX_TOKENS, hint="elastic:grace=32 lets a sentence end"),
                "threshold": Number(float, min=0, max=1, above=True, optional=True,
                                    hint="early-exit:threshold=0.95 exits when the trial answer is that sure"),
                "trial": Number(int, min=1, max=1024, optional=True, hint="early-exit:trial=16 decodes 16 trial tokens"),
                "tries": Number(int, min=0, max=1 << 20, optional=True,
                                hint="early-exit:tries=32 tries at most 32 trial answers per sample"),
                # soft: where the bias starts (a fraction of t), its value at t, the hard backstop (a multiple of t)
                "start": Number(float, min=0, max=1, hint="soft:start=0.8 starts the bias at 80% of t"),
                "strength": Number(float, min=0, max=100, hint="soft:strength=8 adds 8 to the marker's logit at t"),
                "ceiling": Number(float, min=1, max=64, hint="soft:ceiling=1.5 forces the marker at 1.5 x t")}
# early-exit's transitions (``at=``): where a trial answer is tried; any other text is given quoted
TRANSITION_TEXTS = {"wait": ("Wait", " Wait"), "para": ("\n\n",)}
EARLY_EXIT_DEFAULTS = {"threshold": 0.95, "trial": 16, "at": "para+wait"}
SOFT_DEFAULTS = {"start": 0.8, "strength": 8.0, "shape": "linear", "ceiling": 1.5}
OPTION_KEYS = ("wait", "exit", "grace", "stop", *SOFT_DEFAULTS, "effort", "threshold", "trial", "tries", "at")


@dataclass(frozen=True)
class Mode:
    """A decoding mode and its options, written ``name[:key=value]...``.

    - ``wait=k`` (budget-forcing, s1): the first k natural ends of thinking become "Wait".
    - ``exit=qwen`` or ``exit='any text'`` (elastic, budget-forcing): forced at t before the end
      marker, counted in neither budget like the marker itself (default: the bare marker).
    - ``grace=g`` (elastic, budget-forcing, soft): at t, let thinking finish its sentence for up to g
      more tokens (counted as thinking), then force.
    - ``effort=LEVEL`` (none, hosted backends only): the vendor's reasoning effort level, e.g.
      ``none:effort=high``; each vendor's levels are checked by its backend (:mod:`e1.engine.vendors`).
    - ``stop='regex'`` (elastic, soft, budget-forcing): end thinking when the regex matches the
      thinking text; the bare end marker is forced (``Completion.think_end == "pattern"``).
    - soft's ``start=0.8`` (the bias starts at start x t), ``strength=8`` (the bias at t, in logits),
      ``shape=linear|exp`` and ``ceiling=1.5`` (the marker is forced at ceiling x t).

    >>> Mode.parse("budget-forcing:wait=2")
    Mode(name='budget-forcing', wait=2, exit='', grace=0, effort='')
    >>> str(Mode.parse("none:effort=high"))
    'none:effort=high'
    >>> str(Mode.parse("elastic:grace=32:exit=qwen"))
    'elastic:exit=qwen:grace=32'
    >>> Mode.parse("elastic:exit='Time is up: answer now.'").exit_text
    'Time is up: answer now.'
    >>> str(Mode.parse("soft:strength=4:shape=exp:stop='boxed'"))
    "soft:stop='boxed':strength=4:shape=exp"
    """

    name: str = "elastic"
    wait: int = 0
    exit: str = ""  # a name in EXIT_TEXTS, or the text itself ("" = the bare end marker)
    grace: int = 0
    effort: str = ""  # a hosted vendor's reasoning effort level ("" = the vendor's default)
    # early-exit only (None/"": its defaults, EARLY_EXIT_DEFAULTS); out of repr so other modes read as before
    threshold: float | None = field(default=None, repr=False)
    trial: int | None = field(default=None, repr=False)
    tries: int | None = field(default=None, repr=False)  # the most trial answers per sample (None: no limit)
    at: str = field(default="", repr=False)  # "+"-joined names of TRANSITION_TEXTS, or one quoted text
    # added options stay out of repr (it shows the original four); str() writes every option set
    stop: str = field(default="", repr=False)  # a regex over the thinking text that ends thinking
    start: float = field(default=SOFT_DEFAULTS["start"], repr=False)
    strength: float = field(default=SOFT_DEFAULTS["strength"], repr=False)
    shape: str = field(default=SOFT_DEFAULTS["shape"], repr=False)
    ceiling: float = field(default=SOFT_DEFAULTS["ceiling"], repr=False)

    def __post_init__(self):
        if self.name not in MODES:
            from e1.errors import did_you_mean

            raise ConfigError(f"unknown mode {self.name!r}", hint=did_you_mean(self.name, MODES))
        check_numbers(self, MODE_NUMBERS)  # wait=K and grace=G: whole, >= 0, not 23 digits
        if self.wait < 0 or (self.wait and self.name != "budget-forcing"):
            raise ConfigError(f"invalid wait={self.wait} for mode {self.name!r}", hint="wait=k (k >= 0) only fits budget-forcing")
        budgeted = self.name in BUDGETED
        if self.grace < 0 or (self.grace and not budgeted):
            raise ConfigError(f"invalid grace={self.grace} for mode {self.name!r}",
                              hint="grace=g (g >= 0) fits elastic, soft and budget-forcing")
        if self.exit and not budgeted:
            raise ConfigError(f"exit= does not fit mode {self.name!r}", hint="nothing is forced in truncate or none")
        if self.effort and (self.name != "none" or not _EFFORT.match(self.effort)):
            raise ConfigError(f"invalid effort={self.effort!r} for mode {self.name!r}",
                              hint="an effort level is a word on mode none, e.g. none:effort=high")
        early = {"threshold": self.threshold, "trial": self.trial, "tries": self.tries, "at": self.at or None}
        wrong = [key for key, value in early.items() if value is not None and self.name != "early-exit"]
        if wrong:
            raise ConfigError(f"{wrong[0]}= does not fit mode {self.name!r}", hint="it is an option of early-exit")

        self._check_soft_and_stop(budgeted)

    def _check_soft_and_stop(self, budgeted: bool) -> None:
        """soft's options only in soft; ``stop=`` only where thinking can be ended; a valid regex."""
        changed = [key for key, value in SOFT_DEFAULTS.items() if getattr(self, key) != value]
        if changed and self.name != "soft":
            raise ConfigError(f"{changed[0]}= does not fit mode {self.name!r}", hint="start, strength, shape and ceiling are soft's")
        if self.shape not in SOFT_SHAPES:
            from e1.errors import did_you_mean

            raise ConfigError(f"unknown soft shape {self.shape!r}", hint=did_you_mean(self.shape, SOFT_SHAPES))
        if self.stop and self.name not in ("elastic", "soft", "budget-forcing"):
            raise ConfigError(f"stop= does not fit mode {self.name!r}", hint="stop='regex' fits elastic, soft and budget-forcing")
        if self.stop:
            try:
                re.compile(self.stop)
            except re.error as err:
                raise ConfigError(f"invalid stop pattern {self.stop!r}: {err}", hint=r"e.g. stop='\\boxed\{'") from err
    @property
    def confidence_threshold(self) -> float:
        """early-exit: the mean trial-token probability at which thinking ends."""
        return EARLY_EXIT_DEFAULTS["threshold"] if self.threshold is None else self.threshold

    @property
    def trial_tokens(self) -> int:
        """early-exit: the most tokens of one trial answer (it also ends at EOS)."""
        return EARLY_EXIT_DEFAULTS["trial"] if self.trial is None else self.trial

    @property
    def transition_texts(self) -> tuple[str, ...]:
        """early-exit: the texts that end a thinking step, after which a trial answer is tried."""
        at = self.at or EARLY_EXIT_DEFAULTS["at"]
        if _named(at):
            return tuple(text for name in at.split("+") for text in TRANSITION_TEXTS[name])
        return (at,)

    @property
    def exit_text(self) -> str:
        """The text forced at t before the end marker ("" for the bare marker)."""
        return EXIT_TEXTS.get(self.exit, self.exit)

    @classmethod
    def parse(cls, text: str | Mode) -> Mode:
        if isinstance(text, Mode):
            return text
        name, _, rest = str(text).strip().partition(":")
        options: dict[str, object] = {}
        for option in _OPTION.findall(rest):
            key, _, value = option.partition("=")
            options[key] = _option_value(key, value, text)
        return cls(name, **options)

    @staticmethod
    def split_list(text: str) -> list[str]:
        """Comma-separated modes as texts, commas inside a quoted exit text kept (empty items too).

        >>> Mode.split_list("elastic,elastic:exit='a, b'")
        ['elastic', "elastic:exit='a, b'"]
        """
        return [item.strip() for item in _LIST_COMMA.split(str(text))]

    def __str__(self) -> str:
        options = [f"wait={self.wait}"] if self.wait else []
        if self.exit:
            options.append(f"exit={self.exit}" if self.exit in EXIT_TEXTS else f"exit={self.exit!r}")
        options += [f"grace={self.grace}"] if self.grace else []
        options += [f"effort={self.effort}"] if self.effort else []
        options += [f"threshold={self.threshold:g}"] if self.threshold is not None else []
        options += [f"trial={self.trial}"] if self.trial is not None else []
        options += [f"tries={self.tries}"] if self.tries is not None else []
        if self.at:
            options.append(f"at={self.at}" if _named(self.at) else f"at={self.at!r}")
        options += [f"stop={_quoted(self.stop)}"] if self.stop else []
        options += [f"{key}={getattr(self, key):g}" if key != "shape" else f"shape={self.shape}"
                    for key, value in SOFT_DEFAULTS.items() if getattr(self, key) != value]
        return ":".join([self.name, *options])


def _named(at: str) -> bool:
    """Whether ``at`` is preset transition names joined by ``+`` (else it is a text of its own)."""
    return all(name in TRANSITION_TEXTS for name in at.split("+"))


def _option_value(key: str, value: str, text) -> object:
    """One mode option's value: ``wait``, ``grace`` and ``trial`` are counts; ``threshold`` a fraction;
    ``exit`` a preset name or quoted text; ``at`` preset names joined by ``+`` or one quoted text;
    ``stop`` a regex (quoted like exit); soft's ``start``/``strength``/``ceiling`` numbers, ``shape`` a name."""
    if key == "threshold":
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"invalid mode option threshold={value!r} in {text!r}", hint="write threshold=0.95") from None
    if key == "at":
        return _transitions(value, text)
    if key in ("wait", "grace", "trial", "tries"):
        if not value.isdigit():
            raise ConfigError(f"invalid mode option {key}={value!r} in {text!r}", hint=f"write {key}=2")
        return int(value)
    if key in ("start", "strength", "ceiling"):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"invalid mode option {key}={value!r} in {text!r}", hint=f"write {key}=0.8") from None
    if key == "shape":
        return value
    if key == "stop":
        return _unquoted(value)
    if key == "exit":
        if _unquoted(value) != value:
            return _unquoted(value)
        if value not in EXIT_TEXTS:
            raise ConfigError(f"unknown exit text {value!r} in {text!r}",
                              hint=f"use {' or '.join(EXIT_TEXTS)}, or quote your own: exit='Time is up.'")
        return "" if value == "marker" else value
    if key == "effort":
        return value.strip().lower()
    from e1.errors import did_you_mean

    raise ConfigError(f"invalid mode option {key!r} in {text!r}", hint=did_you_mean(key, OPTION_KEYS, listing="options are"))


def _quoted(text: str) -> str:
    """``text`` in quotes that :meth:`Mode.parse` reads back as it is (no escapes: a regex keeps its backslashes)."""
    return f'"{text}"' if "'" in text else f"'{text}'"


def _unquoted(value: str) -> str:
    """``'text'`` or ``"text"`` without its quotes; anything else as it is."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _transitions(value: str, text) -> str:
    """``at=``: names of TRANSITION_TEXTS joined by ``+`` (kept as written), or one quoted text."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        if len(value) == 2:
            raise ConfigError(f"empty transition text in {text!r}", hint="write at='Hmm' or at=para+wait")
        inner = value[1:-1]  # a backslash escape (\\n) is read as Python reads it
        return codecs.decode(inner, "unicode_escape") if "\\" in inner and inner.isascii() else inner
    unknown = [name for name in value.split("+") if name not in TRANSITION_TEXTS]
    if unknown:
        from e1.errors import did_you_mean

        raise ConfigError(f"unknown transition {unknown[0]!r} in {text!r}",
                          hint=f"{did_you_mean(unknown[0], TRANSITION_TEXTS, 'use')} (names join with +), or quote a text: at='Hmm'")
    return value


MIN_TEMPERATURE = 1e-3
# what each sampling setting may hold (e1.numeric); errors name them as the CLI's flags
SAMPLING_NUMBERS = {
    "temperature": Number(float, min=0, max=100, hint="use 0 for greedy decoding"),
    "top_p": Number(float, min=0, max=1, above=True, hint="use 1 to switch it off"),
    "top_k": Number(int, min=0, hint="use 0 to switch it off"),
    "seed": Number(int, min=0),
    "max_tokens": Number(int, min=1, max=2**31 - 1),
}


@dataclass(frozen=True)
class Sampling:
    """Sampling settings; ``temperature=0`` is greedy, ``top_k=0`` and ``top_p=1`` are off."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0
    seed: int = 0
    max_tokens: int = 32768  # only bounds mode ``none``

    def __post_init__(self):
        check_numbers(self, SAMPLING_NUMBERS, {name: "--" + name.replace("_", "-") for name in SAMPLING_NUMBERS})
        if 0 < self.temperature < MIN_TEMPERATURE:  # logits / 1e-30 overflow float32: NaN probabilities
            raise ConfigError(f"--temperature must be 0 or >= {MIN_TEMPERATURE}, got {self.temperature}",
                              hint="use 0 for greedy decoding")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Completion:
    """One generated sample. ``token_ids`` are exactly what the model saw after the prompt
    (forced tokens included, marked in ``forced_mask``), so training needs no re-encoding."""

    prompt_index: int
    sample_index: int
    think_text: str
    solution_text: str
    prompt_tokens: int
    think_tokens: int
    solve_tokens: int
    forced: bool  # the budget cut thinking (t, or soft's ceiling): the end marker was forced there
    finish_reason: str  # "stop" (EOS) | "length" (a budget or the context ran out)
    token_ids: list[int] = field(repr=False)
    forced_mask: list[bool] = field(repr=False)
    closed: bool = False  # thinking ended (naturally or forced): the solution follows a marker
    prefix_tokens: int = 0  # ids taken from a given prefix, not decoded (s1 may have replaced the last)
    # early-exit: trial tokens (prompts + answers) decoded and rolled back, never output; and one
    # record per trial: {"position", "think_tokens", "confidence", "exited", "text"}
    trial_tokens: int = 0
    trials: list[dict] = field(default_factory=list, repr=False)
    think_end: str = ""  # why thinking ended: natural | budget | pattern | trial | open (never); "" unknown (an API)

    @property
    def total_tokens(self) -> int:
        return self.think_tokens + self.solve_tokens

    @property
    def decoded_tokens(self) -> int:
        """Every token the model decoded for this sample: the output plus rolled-back trial tokens."""
        return len(self.token_ids) + self.trial_tokens

    def text(self, end_marker: str) -> str:
        """The output as a reward sees it: thinking, the end marker if thinking ended, solution."""
        return self.think_text + (end_marker if self.closed else "") + self.solution_text


class Engine(Protocol):
    """What every backend provides, and everything its callers (eval, sweep, the trainer) use.

    ``seeds`` gives each prompt its own seed; sample ``j`` of prompt ``p`` draws its randomness
    from (``seeds[p]``, ``j``) alone (:mod:`e1.engine.sampling`), so the same seeds give the same
    samples whatever the batch size. Without ``seeds`` they derive from ``sampling.seed`` and
    each prompt's position in the call.

    ``prefixes`` (one per row, prompt-major: ``prefixes[i * n + j]`` for sample j of prompt i)
    gives each row another row's output for the same prompt, model and sampling settings: the
    row takes those ids as its own samples for as long as its mode would append them unchanged
    (:meth:`~e1.engine.row_state.RowState.follow`), then decodes on from there with its own seed
    (``Completion.prefix_tokens`` says how many it took). One unconstrained trajectory thus
    serves every budget of a sweep, each row still an exact sample of its own mode and budget.

    Training hands new weights over with :meth:`sync_weights`; an engine that holds the
    accelerator's memory (vLLM in sleep mode) frees it with :meth:`sleep` while the policy
    trains and takes it back with :meth:`wake_up`. Where there is nothing to free
    (``can_sleep`` False) both are no-ops.
    """

    tokenizer: Any  # encodes prompts; its chat template builds them (e1.data.prompts)
    markers: Markers  # think markers, EOS and pad ids resolved from the tokenizer
    max_context: int | None  # prompt + output tokens the model can hold (None: unknown)

    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        budget: Budget,
        mode: Mode = Mode(),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress=None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]: ...

    def sync_weights(self, module) -> None:
        """Decode with ``module``'s current weights from now on (a module holding all of them)."""

    @property
    def can_sleep(self) -> bool:
        """Whether :meth:`sleep` frees accelerator memory (vLLM built with sleep mode on a GPU)."""

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory until :meth:`wake_up`: level 1 keeps the weights in CPU memory,
        level 2 drops them (the next :meth:`sync_weights` brings new ones)."""

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Take the memory back: ``["weights"]``, ``["kv_cache"]``, or both (None)."""
