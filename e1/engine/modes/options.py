"""A decoding mode's options: each declares its kind, bounds, default and help once, here.

An option turns the text after ``key=`` in a mode string into a checked value (:meth:`Option.parse`),
checks a value given from Python (:meth:`Option.check`), and writes it back so that ``parse``
reads the same value (:meth:`Option.format`). Every surface (the CLI, config files, ``e1 serve``
requests, the API backends) reaches a mode through :meth:`e1.engine.modes.Mode.parse` or its
constructor, so these checks are the only ones.

    >>> GRACE.parse("32", "elastic:grace=32")
    32
    >>> GRACE.parse("x", "elastic:grace=x")
    Traceback (most recent call last):
    e1.errors.ConfigError: invalid mode option grace='x' in 'elastic:grace=x' (write grace=2)
    >>> EXIT.format(EXIT.parse("'Time is up.'", "elastic"))
    "'Time is up.'"
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from e1.budget import MAX_TOKENS
from e1.errors import ConfigError
from e1.numeric import Number

MAX_TEXT = 2048  # characters of an exit or transition text (Qwen3's exit text is 129)
MAX_PATTERN = 512  # characters of a stop= regex
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")  # characters a quoted text writes as escapes


@dataclass(frozen=True)
class Option:
    """One ``key=value`` of a mode: ``default`` is what an unset option holds (``str`` leaves it out)."""

    name: str
    help: str
    default: object = None

    def parse(self, text: str, mode_text: str) -> object:
        """The value written ``text`` (after ``key=``), checked."""
        return self.check(text, mode_text)

    def check(self, value, mode_text: str) -> object:
        return value

    def format(self, value) -> str:
        return str(value)

    def notes(self, value, budget) -> tuple[tuple[int, str], ...]:
        """The texts this option's ``value`` forces into the thinking, as ``(thinking count, text)`` pairs,
        counts rising: a rule an option brings (:meth:`e1.engine.modes.Mode.notes`; most bring none)."""
        return ()

    def invalid(self, value, mode_text: str, hint: str | None = None) -> ConfigError:
        shown = value if len(str(value)) <= 60 else str(value)[:57] + "..."
        return ConfigError(
            f"invalid mode option {self.name}={shown!r} in {_short(mode_text)!r}", hint=hint or self.help
        )


@dataclass(frozen=True)
class Count(Option):
    """A whole number in ``min..max`` (``default`` None: unset, the mode's own default applies)."""

    min: int = 0
    max: int = MAX_TOKENS

    def parse(self, text: str, mode_text: str) -> object:
        if not (text.isascii() and text.isdigit()):
            raise self.invalid(text, mode_text, hint=f"write {self.name}=2")
        if len(text.lstrip("0")) > len(str(self.max)):  # int() of 4,301 digits is itself an error
            raise ConfigError(
                f"mode option {self.name} must be <= {self.max}, got a number of {len(text)} digits", hint=self.help
            )
        return self.check(int(text), mode_text)

    def check(self, value, mode_text: str) -> object:
        spec = Number(int, min=self.min, max=self.max, optional=self.default is None, hint=self.help)
        value = spec.check(value, f"mode option {self.name}")
        return None if value is None else int(value)  # numpy's ints too: one type, one repr


@dataclass(frozen=True)
class Real(Option):
    """A finite number in ``[min, max]`` (``(min, max]`` when ``above``)."""

    min: float = 0.0
    max: float = 1.0
    above: bool = False

    def parse(self, text: str, mode_text: str) -> object:
        try:
            value = float(text)
        except ValueError:
            raise self.invalid(text, mode_text, hint=f"write {self.name}=0.8") from None
        return self.check(value, mode_text)

    def check(self, value, mode_text: str) -> object:
        spec = Number(
            float, min=self.min, max=self.max, above=self.above, optional=self.default is None, hint=self.help
        )
        value = spec.check(value, f"mode option {self.name}")
        return None if value is None else float(value) + 0.0  # -0 is 0

    def format(self, value) -> str:
        short = f"{value:g}"
        return short if float(short) == value else repr(value)


@dataclass(frozen=True)
class Word(Option):
    """One of ``choices`` (lower case), or with no ``choices`` any lower-case word (a vendor checks it)."""

    choices: tuple[str, ...] = ()

    def parse(self, text: str, mode_text: str) -> object:
        return self.check(text.strip().lower() if not self.choices else text, mode_text)

    def check(self, value, mode_text: str) -> object:
        if not isinstance(value, str):
            raise self.invalid(value, mode_text)
        if self.choices and value not in self.choices:
            from e1.errors import did_you_mean

            raise ConfigError(
                f"unknown {self.name} {value!r} in {_short(mode_text)!r}", hint=did_you_mean(value, self.choices)
            )
        if not self.choices and value != self.default and not re.fullmatch(r"[a-z]{1,32}", value):
            raise self.invalid(value, mode_text, hint=f"a {self.name} is a word, e.g. {self.name}=high")
        return value


@dataclass(frozen=True)
class Text(Option):
    """A text in quotes (``'...'`` or ``"..."``; backslash escapes such as ``\\n`` are read as Python
    reads them), or one of ``presets`` by name. Never empty: leave the option out instead."""

    presets: tuple[str, ...] = ()
    blank: str = ""  # the preset that means the default (exit=marker: the bare marker)
    joined: bool = False  # presets may be joined with "+" (early-exit's at=para+wait)
    most: int = MAX_TEXT

    def parse(self, text: str, mode_text: str) -> object:
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            inner = text[1:-1]
            if "\\" in inner and inner.isascii():
                try:
                    inner = codecs.decode(inner, "unicode_escape")
                except UnicodeDecodeError as err:
                    raise self.invalid(
                        text, mode_text, hint=f"a bad escape ({err.reason}); write \\\\ for a backslash"
                    ) from None
            if not inner:
                raise self.invalid(text, mode_text, hint=f"an empty text; leave {self.name}= out instead")
            return self.check(inner, mode_text)
        names = text.split("+") if self.joined else [text]
        unknown = [name for name in names if name not in self.presets]
        if unknown:
            from e1.errors import did_you_mean

            raise ConfigError(
                f"unknown {self.name} text {unknown[0]!r} in {_short(mode_text)!r}",
                hint=f"{did_you_mean(unknown[0], self.presets, 'use')}, or quote your own: {self.name}='...'",
            )
        return self.default if text == self.blank else text

    def check(self, value, mode_text: str) -> object:
        if not isinstance(value, str):
            raise self.invalid(value, mode_text)
        if value == self.default or value == self.blank:
            return self.default  # exit='marker' is the bare marker, as exit=marker is
        if len(value) > self.most:
            raise ConfigError(
                f"mode option {self.name}= holds {len(value)} characters, more than {self.most}", hint="a shorter text"
            )
        _encodable(value, self.name)
        return value

    def is_preset(self, value: str) -> bool:
        return all(name in self.presets for name in (value.split("+") if self.joined else [value]))

    def format(self, value) -> str:
        return value if self.is_preset(value) else quote(value)


@dataclass(frozen=True)
class Pattern(Option):
    """A regex over the thinking text, in quotes (kept as written: its backslashes are the regex's), in RE2's
    syntax: it runs in time linear in the text (:func:`e1.engine.stop.compile_stop`, its one gate)."""

    def parse(self, text: str, mode_text: str) -> object:
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]
        if not text:
            raise self.invalid(text, mode_text, hint="an empty pattern matches at once; leave stop= out instead")
        return self.check(text, mode_text)

    def check(self, value, mode_text: str) -> object:
        if not isinstance(value, str):
            raise self.invalid(value, mode_text)
        if value == self.default:
            return value
        if len(value) > MAX_PATTERN:
            raise ConfigError(
                f"stop pattern of {len(value)} characters, more than {MAX_PATTERN}", hint="a shorter pattern"
            )
        if "'" in value and '"' in value:
            raise ConfigError(
                f"stop pattern {value!r} holds both kinds of quote", hint=r"write one of them as \x27 or \x22"
            )
        _encodable(value, self.name)
        from e1.engine.stop import compile_stop

        compile_stop(value)  # RE2 (linear time): what it refuses is a ConfigError naming stop= and the construct
        return value

    def format(self, value) -> str:
        return f'"{value}"' if "'" in value else f"'{value}'"


def quote(text: str) -> str:
    r"""``text`` in quotes that :meth:`Text.parse` reads back as it is: plain where it can be, else escaped.

    >>> print(quote("Time is up."), quote("it's"), quote("a\\b"), quote("Wait\n"))
    'Time is up.' "it's" 'a\\b' 'Wait\n'
    """
    escape = ("\\" in text and text.isascii()) or ("'" in text and '"' in text) or bool(_CONTROL.search(text))
    if not escape:
        return f'"{text}"' if "'" in text else f"'{text}'"
    return "'" + text.encode("unicode_escape").decode("ascii").replace("'", "\\x27") + "'"


def _encodable(value: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            f"mode option {name}= holds a character that is not text (a lone surrogate)", hint="send valid UTF-8"
        ) from None


def _short(text) -> str:
    text = str(text)
    return text if len(text) <= 80 else text[:77] + "..."


# What is forced at t before the end marker (``exit=NAME``); any other text is given quoted.
EXIT_TEXTS = {
    "marker": "",  # the paper: the bare end marker
    # Qwen3's recipe for a thinking budget (its model card), then the end marker
    "qwen": "\n\nConsidering the limited time by the user, I have to give the solution based on the thinking directly now.\n",
}

# options several modes share
EXIT = Text(
    "exit",
    "exit=qwen or exit='Time is up.': forced at t before the end marker (default: the bare marker)",
    default="",
    presets=tuple(EXIT_TEXTS),
    blank="marker",
)
GRACE = Count("grace", "grace=32: at t, let thinking end its sentence for up to 32 more tokens", default=0)
STOP = Pattern("stop", r"stop='\\boxed\{': end thinking when the regex matches the thinking text", default="")
