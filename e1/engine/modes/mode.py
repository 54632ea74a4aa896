"""What a decoding mode is: a small class per mode, registered by name, and its one wire format.

A mode is an immutable value written ``name[:key=value]...``; ``Mode.parse`` reads that text and
``str(mode)`` writes it, and that text is the only form a mode takes outside Python: the CLI's
``--modes``, ``config.json``, the results' ``mode`` column, vLLM's per-request ``extra_args`` and
``e1 serve``'s ``budget_mode``. Each mode's class (one module each in this package) declares its
options (:mod:`e1.engine.modes.options`) and answers every question the engine, the backends, the
server and sweeps ask of it, so no code outside this package compares mode names:

- ``separate``: thinking has its own budget ``t``, then the solution ``s`` (else one budget, or none);
- ``think_limit``: where thinking is cut; ``end_bias``: what is added to the end marker's logit;
- ``output_cap``: a cap on the whole output from the budget (truncate's ``t + s``);
- ``worst_case``: the most tokens a row can write (context checks, the server's ``max_tokens``);
- ``followable_tokens``: how much of an unconstrained sample a sweep's row may share;
- ``trials``: whether it decodes trial answers (its rows then run :class:`~e1.engine.early_exit_state.EarlyExitState`).

    >>> mode = Mode.parse("budget-forcing:wait=2")
    >>> mode, str(mode), mode == Mode("budget-forcing", wait=2)
    (Mode('budget-forcing', wait=2), 'budget-forcing:wait=2', True)

A new mode is one module: a subclass with ``name``, ``summary`` and ``options``, decorated with
:func:`~e1.engine.modes.catalog.register` (put it in this package, or name its file in ``E1_MODES`` to load it from outside).
A new option for existing modes is one module too: an :class:`~e1.engine.modes.options.Option` given
to :func:`~e1.engine.modes.catalog.extend`, which adds it to every mode it fits; its rule is the option's own (``Option.notes``:
texts forced into the thinking, which every executor runs through :class:`~e1.engine.row_state.RowState`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from e1.engine.modes.options import _short
from e1.errors import ConfigError, E1Error
from e1.names import MODES_ENV, Name, Registry, e1_state, mode_plugins, replaced

if TYPE_CHECKING:
    from e1.budget import Budget
    from e1.engine.markers import Markers
    from e1.engine.modes.options import Option

# a mode's name: a lower-case word, dashes allowed; a name is registered once (e1.names.Registry)
MODE_NAME = Name(r"[a-z][a-z0-9-]{0,31}", "a mode's name is a lower-case word (dashes allowed), at most 32 characters")
REGISTRY: Registry = Registry("mode", ConfigError, MODE_NAME)
PLUGINS_ENV = MODES_ENV  # comma-separated .py files or module names that register more modes
MAX_MODE_TEXT = 8192  # characters of one mode string (its texts are bounded again by their options)
_OPTION = re.compile(r"""(?:[^:'"]|'[^']*'|"[^"]*")+""")  # one ``key=value``: colons inside quotes stay


def lookup(name: str) -> type[Mode]:
    if not isinstance(name, str):
        raise ConfigError(f"a mode's name is a text such as 'elastic', not {type(name).__name__}")
    if name not in REGISTRY:
        load_plugins()
    if name not in REGISTRY:
        from e1.errors import did_you_mean

        raise ConfigError(f"unknown mode {_short(name)!r}", hint=did_you_mean(name, REGISTRY, "modes are"))
    return REGISTRY[name]


_loaded: set[str] = set()


def load_plugins() -> None:
    """Import the modes named in ``$E1_MODES`` (files or modules), once each: a mode defined outside
    e1 reaches every process e1 starts (vLLM's engine, ``e1 serve``) through the environment. A file runs
    from its source, never a cached ``.pyc``: config.json fingerprints the bytes run (:func:`e1.data.plugin_source`)."""
    import importlib.util

    from e1.data import import_plugin, plugin_source

    for item in mode_plugins():
        if item in _loaded:
            continue
        _loaded.add(item)
        before = e1_state()
        try:
            if item.endswith(".py"):
                spec = importlib.util.spec_from_file_location(f"e1_mode_{abs(hash(item))}", item)
                if spec is None or spec.loader is None or not Path(item).is_file():  # a pipe is never opened
                    raise ImportError(f"no Python file at {item}")
                module = importlib.util.module_from_spec(spec)
                exec(compile(plugin_source(Path(item)), item, "exec"), module.__dict__)  # noqa: S102  the user's file
            else:
                import_plugin(item)
        except E1Error as err:  # e.g. a mode named like a built-in: its own line, naming the file
            raise type(err)(f"{PLUGINS_ENV}: {item}: {err.message}", hint=err.hint) from None
        except (ImportError, OSError, SyntaxError) as err:
            raise ConfigError(
                f"{PLUGINS_ENV}: cannot load {item!r}: {err}", hint="name a .py file or an importable module"
            ) from None
        if (name := replaced(before, by=("e1_mode_", item))) is not None:  # e1's own code is never patched either
            raise ConfigError(
                f"{PLUGINS_ENV}: {item}: it replaces e1's own {name}",
                hint="leave e1's code as it is: register yours under a name of its own",
            )


class Mode:
    """A decoding mode and its options; ``Mode("soft", strength=4)`` or ``Mode.parse("soft:strength=4")``.

    Options are read as attributes (``mode.grace``); an option the mode does not declare reads as its
    neutral value (no grace window, no exit text, no stop pattern, no waits, no effort level).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line: what the mode does (help, completion)
    options: ClassVar[tuple[Option, ...]] = ()  # in the order str() writes them
    separate: ClassVar[bool] = True  # thinking has its own budget t, then the solution s
    bounded: ClassVar[bool] = True  # a token budget bounds the output (False: only --max-tokens does)
    trials: ClassVar[bool] = False  # decodes trial answers and rolls them back (a backend must support it)
    answer_prompt: ClassVar[bool] = False  # forces s1's "Final Answer:" after a forced end marker (answer_lines: how)
    # the neutral value of options that several modes declare (a mode that declares one overrides it)
    wait: int = 0
    grace: int = 0
    exit: str = ""
    stop: str = ""
    effort: str = ""

    def __new__(cls, name: str | None = None, **values):
        if cls is Mode:
            cls = lookup("elastic" if name is None else name)
        elif name is not None and name != cls.name:
            raise ConfigError(f"{cls.__name__} is mode {cls.name!r}, not {name!r}")
        declared = {option.name: option for option in cls.options}
        for key in values:
            if key not in declared:
                raise _not_an_option(key, cls)
        text = f"{cls.name}:{':'.join(f'{key}={value!r}' for key, value in values.items())}"
        return cls._made({key: declared[key].check(value, text) for key, value in values.items()})

    @classmethod
    def _made(cls, values: dict[str, object]) -> Mode:
        """The mode holding ``values`` (each checked already), defaults for the rest, its rules checked."""
        self = object.__new__(cls)
        for option in cls.options:
            object.__setattr__(self, option.name, values.get(option.name, option.default))
        self.check()
        return self

    def check(self) -> None:
        """Rules between options (raise a ConfigError); each option's own bounds are checked already."""

    @classmethod
    def parse(cls, text: str | Mode) -> Mode:
        """A mode from its text ``name[:key=value]...``: each option once, each value checked.

        >>> Mode.parse("elastic:grace=32:exit=qwen")
        Mode('elastic', exit='qwen', grace=32)
        >>> Mode.parse("elastic:grace=1:grace=2")
        Traceback (most recent call last):
        e1.errors.ConfigError: mode option grace= is given twice in 'elastic:grace=1:grace=2' (give each option once)
        """
        if isinstance(text, Mode):
            return text
        if not isinstance(text, str):
            raise ConfigError(f"a mode is a text such as 'elastic:grace=32', not {type(text).__name__}")
        if len(text) > MAX_MODE_TEXT:
            raise ConfigError(f"a mode of {len(text)} characters, more than {MAX_MODE_TEXT}", hint="a shorter mode")
        name, _, rest = text.strip().partition(":")
        kind = lookup(name)
        declared = {option.name: option for option in kind.options}
        values: dict[str, object] = {}
        items = _OPTION.findall(rest)
        if ":".join(items) != rest:  # a stray quote or an empty option: the items do not spell the text
            raise ConfigError(
                f"malformed mode {_short(text)!r}", hint="write name:key=value:..., a text in paired quotes"
            )
        for item in items:
            key, equals, value = item.partition("=")
            if key not in declared:
                raise _not_an_option(key, kind, text)
            if not equals or not value:
                raise ConfigError(f"mode option {key}= has no value in {_short(text)!r}", hint=declared[key].help)
            if key in values:
                raise ConfigError(
                    f"mode option {key}= is given twice in {_short(text)!r}", hint="give each option once"
                )
            values[key] = declared[key].parse(value, text)
        return kind._made(values)

    @classmethod
    def legacy(cls, text: str) -> str:
        """A mode text that a run recorded before today's format (``config.json`` without
        ``mode_format`` 2), written as it reads now: each mode rewrites its own texts (early-exit
        names ``recipe=e1``, the meaning a bare ``early-exit`` had; budget-forcing ``answer=inline``,
        the text it forced then); other texts, and texts that do
        not parse (the reader's gate refuses them), are returned as they are. Rewriting twice
        changes nothing.

        >>> Mode.legacy("early-exit:tries=2"), Mode.legacy("elastic:grace=4")
        ('early-exit:tries=2:recipe=e1', 'elastic:grace=4')
        """
        if not isinstance(text, str):
            return text
        try:
            return lookup(text.strip().partition(":")[0])._upgraded(text)
        except ConfigError:
            return text

    @classmethod
    def _upgraded(cls, text: str) -> str:
        """:meth:`legacy` for this mode's texts (a mode whose texts kept their meaning: unchanged)."""
        return text

    @staticmethod
    def _naming(text: str, key: str, then: str) -> str:
        """``text`` with option ``key`` written as ``then`` (what it meant before ``key`` existed),
        unless it names ``key`` itself; a text that does not parse is returned as it is."""
        if key in Mode.option_keys(text):
            return text
        try:
            return str(Mode.parse(text).replace(**{key: then}))
        except ConfigError:
            return text

    @staticmethod
    def option_keys(text: str) -> list[str]:
        """The option names a mode text writes, in order (quoted colons kept inside their option)."""
        return [item.partition("=")[0] for item in _OPTION.findall(str(text).strip().partition(":")[2])]

    @staticmethod
    def split_list(text: str) -> list[str]:
        """Comma-separated modes as texts, commas inside quoted texts kept (empty items too).

        >>> Mode.split_list("elastic,elastic:exit='a, b'")
        ['elastic', "elastic:exit='a, b'"]
        """
        items, current, quote = [], [], ""
        for char in str(text):  # one pass: a regex that looks ahead for balanced quotes is quadratic
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == ",":
                items.append("".join(current).strip())
                current = []
                continue
            current.append(char)
        return [*items, "".join(current).strip()]

    @property
    def values(self) -> dict[str, object]:
        """Every declared option's value, defaults included."""
        return {option.name: getattr(self, option.name) for option in self.options}

    def set_options(self) -> dict[str, object]:
        """The options that differ from their defaults (what ``str`` writes)."""
        return {
            option.name: getattr(self, option.name)
            for option in self.options
            if getattr(self, option.name) != option.default
        }

    def takes(self, option: str) -> bool:
        """Whether this mode declares ``option``."""
        return any(declared.name == option for declared in self.options)

    def replace(self, **changes) -> Mode:
        """This mode with some options changed (checked like any other); clearing an option the mode
        does not declare (``effort=""`` on elastic) changes nothing.

        >>> Mode.parse("none:effort=high").replace(effort=""), Mode.parse("elastic").replace(effort="")
        (Mode('none'), Mode('elastic'))
        """
        changes = {
            key: value
            for key, value in changes.items()
            if self.takes(key) or value != getattr(type(self), key, not value)
        }
        return type(self)(**{**self.set_options(), **changes})

    def __str__(self) -> str:
        written = self.set_options()
        return ":".join(
            [
                self.name,
                *(
                    f"{option.name}={option.format(written[option.name])}"
                    for option in self.options
                    if option.name in written
                ),
            ]
        )

    def __repr__(self) -> str:
        return f"Mode({', '.join([repr(self.name), *(f'{k}={v!r}' for k, v in self.set_options().items())])})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Mode) and type(other) is type(self) and other.values == self.values

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.values.items())))

    def __setattr__(self, key, value):
        raise AttributeError(f"a Mode is immutable: use mode.replace({key}=...)")

    def __reduce__(self):
        return Mode.parse, (str(self),)

    # ---- what the engine asks: budgets and forcing ----------------------------------------------

    def think_limit(self, budget: Budget) -> int:
        """Where thinking is cut (the end marker forced): ``t``."""
        return budget.think

    def end_bias(self, think_tokens: int, t: int) -> float:
        """What to add to the end marker's first logit after ``think_tokens`` thinking tokens (0: none)."""
        return 0.0

    def bias_start(self, t: int) -> int | None:
        """The first thinking count at which :meth:`end_bias` may be non-zero (None: never)."""
        return None

    def bias_curve(self, t: int) -> tuple[float, float, float] | None:
        """:meth:`end_bias` as numbers a batched backend evaluates on its own (vLLM's runner V2 processor):
        ``(begin, strength, rate)``, the bias being 0 up to ``begin`` thinking tokens, then
        ``strength * p`` (``rate`` 0) or ``strength * expm1(rate * p) / expm1(rate)``, ``p`` rising
        linearly from 0 at ``begin`` to 1 at ``t`` and staying 1. None: a bias no such triple describes
        (the backend then asks :meth:`end_bias` itself). The base mode adds none: ``(0, 0, 0)``."""
        return None if type(self).end_bias is not Mode.end_bias else (0.0, 0.0, 0.0)

    def bias_steady(self, t: int) -> int | None:
        """A thinking count from which :meth:`end_bias` stays what it is there (None: it may change up to
        the cut): a backend may tabulate the bias up to it (vLLM's logits processor does)."""
        return None

    @property
    def per_token(self) -> bool:
        """Whether the mode acts on the logits during thinking (a bias, a pattern, forced notes): a plain server can't."""
        return bool(self.stop) or self.writes_notes

    @property
    def writes_notes(self) -> bool:
        """Whether an option of this mode forces texts into the thinking (:meth:`notes`)."""
        from e1.engine.modes.options import Option

        return any(type(option).notes is not Option.notes and getattr(self, option.name) for option in self.options)

    def notes(self, budget: Budget) -> tuple[tuple[int, str], ...]:
        """Texts forced into the thinking at ``budget``: ``(thinking count, text)`` pairs, counts rising, from
        the options that bring them (``Option.notes``). A note is forced once thinking reaches its count, counts
        as thinking (it is thinking the model reads, as s1's "Wait"), and ends thinking if it reaches the cut."""
        found = [note for option in self.options for note in option.notes(getattr(self, option.name), budget)]
        return tuple(sorted(found, key=lambda note: note[0]))

    def count_bounds(self, budget: Budget) -> tuple[int | None, int | None]:
        """The most thinking and solution tokens a row of this mode holds at ``budget`` as e1 decodes it
        (:class:`e1.engine.row_state.RowState`: thinking is cut at :meth:`think_limit`, a grace window past it;
        the solution stops at ``s``); None: no bound of its own (a mode without separate budgets bounds the
        whole output, or nothing). The samples gate refuses a row e1 counted over them."""
        if not self.separate:
            return None, None
        return self.think_limit(budget) + self.grace, budget.solve

    def output_cap(self, budget: Budget) -> int | None:
        """A cap on the whole output (thinking + solution) from the budget; None: none of its own."""
        return None

    def worst_case(self, budget: Budget, markers: Markers, exit_ids: tuple[int, ...] = ()) -> int | None:
        """The most tokens a row can write (not counting the EOS a budget forces at the end): ``t + s``,
        thinking beyond ``t`` (a ceiling), every forced token and the grace window. None: no budget of its own."""
        forced = len(markers.start_ids) + len(markers.end_ids) + len(exit_ids)
        forced += (
            len(markers.answer_ids) + 2 * len(markers.newline_ids) * self.answer_lines if self.answer_prompt else 0
        )
        return budget.total + self.think_limit(budget) - budget.think + forced + self.grace

    def trial_solution(self, answer: str) -> str:
        """A trial answer's text as the reward reads a solution (after the end marker)."""
        return f"Final Answer:{answer}"

    def trial_room(self, markers: Markers) -> int:
        """Context one trial answer may occupy past a row's real tokens (0: the mode tries none)."""
        return 0

    def followable_tokens(self, budget: Budget, max_tokens: int) -> int:
        """The most ids of an unconstrained sample a row at ``budget`` takes unchanged (a sweep's sharing):
        thinking up to ``t`` (+ a grace window) and, after a natural end, up to ``s`` solution ids."""
        return 0 if budget.think == 0 else min(budget.think + self.grace + budget.solve, max_tokens)

    # ---- texts and state ------------------------------------------------------------------------------

    @property
    def exit_text(self) -> str:
        """The text forced at ``t`` before the end marker ("" for the bare marker)."""
        from e1.engine.modes.options import EXIT_TEXTS

        return EXIT_TEXTS.get(self.exit, self.exit)

    @property
    def answer_lines(self) -> bool:
        """Whether a forced answer prompt stands on lines of its own (s1's layout: a line break before
        the forced end marker and one after it, then "Final Answer:")."""
        return False

    @property
    def transition_texts(self) -> tuple[str, ...]:
        """Texts after which a trial answer is tried (none outside early-exit)."""
        return ()

    @property
    def text_transitions(self) -> bool:
        """Whether trials are tried where a transition text appears in the thinking's text (early-exit recipe=deer)."""
        return False

    @property
    def trial_prompt_text(self) -> str | None:
        """The text that begins a trial answer, tokenized by the model (None: none, or early-exit recipe=e1's ids)."""
        return None

    @property
    def trial_interval(self) -> int | None:
        """Try a trial answer every this many thinking tokens (dynasor); None: at transitions (early-exit)."""
        return None

    @property
    def vendor_budget(self) -> bool:
        """Whether a hosted vendor's own thinking budget in tokens means this mode."""
        return False

    def served(self) -> Mode:
        """The mode as ``e1 serve`` decodes it (a mode may bound what one request can ask)."""
        return self

    def prefill(self, prompt: str, start: str, end: str) -> str:
        """The prompt text this mode decodes from, given the think markers' texts: most modes take the prompt
        as built; nothinking ends it in a closed thinking box (:func:`e1.engine.prefilled` calls it)."""
        return prompt

    @property
    def prefills(self) -> bool:
        """Whether :meth:`prefill` writes into the prompt (a server that takes chat messages cannot)."""
        return type(self).prefill is not Mode.prefill


def _not_an_option(key: str, kind: type[Mode], text: str | None = None) -> ConfigError:
    from e1.errors import did_you_mean

    where = f" in {_short(text)!r}" if text is not None else ""
    owners = [other.name for other in REGISTRY.values() if any(option.name == key for option in other.options)]
    if owners:
        return ConfigError(
            f"{key}= does not fit mode {kind.name!r}{where}", hint=f"it is an option of {', '.join(owners)}"
        )
    known = [option.name for option in kind.options]
    hint = did_you_mean(key, known, listing="its options are") if known else f"mode {kind.name} takes no options"
    return ConfigError(f"invalid mode option {_short(key)!r}{where}", hint=hint)
