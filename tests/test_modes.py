"""Decoding modes are objects: one module each, one registry, one wire format (``str`` / ``Mode.parse``).

The wire format is checked on generated modes (parse ∘ str is the identity on every accepted mode) and
generated texts (anything else is a ConfigError naming the problem, never another exception); a run
written before modes were objects still parses, resumes without decoding a token, and decodes the same.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import e1
from e1.budget import Budget
from e1.engine.modes import REGISTRY, Mode, names
from e1.engine.modes.catalog import EXTENSIONS
from e1.engine.modes.options import Count, Pattern, Real, Text, Word
from e1.errors import ConfigError

PACKAGE = Path(e1.__file__).parent
OLD_RUN = Path(__file__).parent / "fixtures" / "old_run"  # written by e1 at 0d4ee68, before modes were objects
BUILT_IN = ("elastic", "truncate", "budget-forcing", "soft", "early-exit", "none", "dynasor", "nothinking")


def test_each_built_in_mode_is_one_module_of_the_modes_package():
    assert names()[: len(BUILT_IN)] == BUILT_IN
    modules = {REGISTRY[name].__module__ for name in BUILT_IN}
    options = {type(option).__module__ for option, _ in EXTENSIONS} - {"e1.engine.modes.options"}  # option modules
    files = {p.stem for p in (PACKAGE / "engine" / "modes").glob("*.py")} - {"__init__", "mode", "catalog", "options"}
    assert modules | options == {f"e1.engine.modes.{stem}" for stem in files} and len(modules) == len(BUILT_IN)


def _comparisons_of_mode_names(path: Path) -> list[str]:
    """``x.name == "soft"``, ``args["mode"] in ("elastic", ...)``: a mode's name compared outside its class."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        constants = {c.value for side in sides for c in ast.walk(side) if isinstance(c, ast.Constant)}
        text = ast.unparse(node)
        column = any(isinstance(side, ast.Subscript) and isinstance(side.slice, ast.Constant) for side in sides)
        if constants & set(BUILT_IN) and ("mode" in text or ".name" in text) and not column:  # a results column
            # holds the wire text: selecting rows by it (frame["mode"] == "elastic") is no mode logic
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {text}")
    return found


def test_no_code_outside_the_modes_package_compares_mode_names():
    sources = [p for p in PACKAGE.rglob("*.py") if "modes" not in p.relative_to(PACKAGE).parts[:2]]
    found = [hit for path in sources for hit in _comparisons_of_mode_names(path)]
    grep = [
        f"{p}: {line.strip()}"
        for p in sources
        for line in p.read_text().splitlines()
        if re.search(r"mode\.name ==|\.name in \(", line)
    ]
    assert not found and not grep, "ask the mode object instead:\n" + "\n".join(found + grep)


def _value(option):
    """A strategy of values ``option`` accepts (its bounds) or leaves unset."""
    if isinstance(option, Count):
        values = st.integers(option.min, min(option.max, 10**6))
    elif isinstance(option, Real):
        values = st.floats(option.min, option.max, allow_nan=False, exclude_min=option.above)
    elif isinstance(option, Word):
        values = st.sampled_from(option.choices) if option.choices else st.from_regex(r"[a-z]{1,12}", fullmatch=True)
    elif isinstance(option, Pattern):
        values = st.text(st.sampled_from("ab{}\\.*+? '\"éλ"), min_size=1, max_size=20)
    elif isinstance(option, Text):
        presets = [p for p in option.presets if p != option.blank]
        values = st.one_of(
            st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30),
            *([st.sampled_from(presets)] if presets else []),
        )
    else:
        raise AssertionError(f"no strategy for {option!r}")
    return st.one_of(st.none(), values)


@st.composite
def modes(draw):
    kind = REGISTRY[draw(st.sampled_from(BUILT_IN))]
    values = {option.name: draw(_value(option)) for option in kind.options}
    try:
        return Mode(kind.name, **{key: value for key, value in values.items() if value is not None})
    except ConfigError:
        assume(False)


@settings(max_examples=400, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow], deadline=None)
@given(mode=modes())
def test_parse_of_str_is_the_identity_on_every_accepted_mode(mode):
    text = str(mode)
    again = Mode.parse(text)
    assert again == mode and str(again) == text and hash(again) == hash(mode)
    assert Mode.split_list(f"{text},elastic") == [text, "elastic"]  # a comma inside a quoted text stays


FRAGMENTS = st.sampled_from(
    [
        *BUILT_IN,
        ":",
        "=",
        "'",
        '"',
        ",",
        "grace",
        "wait",
        "exit",
        "stop",
        "at",
        "tries",
        "effort",
        "threshold",
        "start",
        "shape",
        "ceiling",
        "qwen",
        "marker",
        "para",
        "+",
        "0",
        "1",
        "2.5",
        "-1",
        "nan",
        "inf",
        "1e400",
        "\\",
        "\\x",
        "\\n",
        "(",
        "a+",
        ")*",
        "\ud800",
        "²",
        " ",
        "exp",
        "high",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(text=st.one_of(st.lists(FRAGMENTS, max_size=12).map("".join), st.text(max_size=40)))
def test_every_text_is_a_mode_that_round_trips_or_one_config_error(text):
    try:
        mode = Mode.parse(text)
    except ConfigError as err:
        assert str(err) and "\n" not in str(err).strip()
        return
    assert Mode.parse(str(mode)) == mode


@pytest.mark.parametrize(
    "text, says",
    [
        ("elastic:grace=1:grace=2", "given twice"),
        ("elastic:stop=''", "empty pattern"),
        ("elastic:exit=''", "empty text"),
        ("early-exit:at='\\x'", "bad escape"),
        ("elastic:grace", "has no value"),
        ("elastic:grace=²", "write grace=2"),
        ("soft:strength=nan", "finite"),
        ("elastic:wait=1", "option of budget-forcing"),
        ("elastik", "did you mean 'elastic'"),
        ("elastic:stop='" + "a" * 600 + "'", "more than 512"),
        ("elastic:exit='\ud800'", "lone surrogate"),
        ("elastic:stop='('", "stop= pattern '(' is not a regex"),
        ("soft:shape=cubic", "unknown shape"),
        # the red team's: int() refuses 4,301 digits itself; a stray quote was dropped; a DFA-busting repeat
        ("elastic:grace=" + "9" * 5000, "a number of 5000 digits"),
        ("elastic:stop=a'", "malformed mode"),
        ("elastic:grace=1:'", "malformed mode"),
        ("elastic::grace=1", "malformed mode"),
        ("elastic:stop='(?:[ -~]?){900}Q'", "more than 500"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(text, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        Mode.parse(text)


def test_modes_answer_for_their_budgets_by_hand():
    from e1.engine.markers import Markers

    markers = Markers(
        "<think>", "</think>", (1,), (2, 3), frozenset({0}), 0, (4,), (5, 6)
    )  # 1 + 2 marker ids, 2 answer ids
    budget = Budget(10, 5)
    # t + s, then: start and end markers (3), s1's answer prompt (2), soft's ceiling (1.5 t: 5 more), a grace window
    assert Mode.parse("elastic").worst_case(budget, markers) == 15 + 3
    assert Mode.parse("budget-forcing").worst_case(budget, markers) == 15 + 3 + 2
    assert Mode.parse("soft").worst_case(budget, markers) == 15 + 5 + 3
    assert Mode.parse("elastic:grace=4").worst_case(budget, markers, exit_ids=(9, 9)) == 15 + 3 + 2 + 4
    assert (
        Mode.parse("truncate").worst_case(budget, markers) == 15
        and Mode.parse("none").worst_case(budget, markers) is None
    )
    assert (
        Mode.parse("early-exit:trial=8:recipe=e1").trial_room(markers) == 2 + 2 + 8 + 1
        and Mode.parse("elastic").trial_room(markers) == 0
    )
    assert [Mode.parse(m).followable_tokens(budget, 12) for m in ("elastic", "truncate", "none", "soft")] == [
        12,
        12,
        12,
        9 + 5 - 2,
    ]


def test_a_preset_s_name_in_quotes_is_the_preset_and_odd_python_values_read_as_parsed_ones():
    import numpy as np

    assert Mode.parse("elastic:exit='marker'") == Mode("elastic", exit="marker") == Mode.parse("elastic")
    assert Mode.parse("elastic:exit='qwen'") == Mode.parse("elastic:exit=qwen")
    assert repr(Mode("elastic", grace=np.int64(3))) == "Mode('elastic', grace=3)"
    assert str(Mode.parse("soft:strength=-0")) == "soft:strength=0"
    separated = Mode("elastic", exit=f"a{chr(0x2028)}b")
    assert chr(0x2028) not in str(separated) and Mode.parse(str(separated)) == separated  # one line, round trip
    with pytest.raises(ConfigError, match="a text such as 'elastic'"):
        Mode([1])
    many = ",".join(["elastic:exit='a, b'"] * 2000)
    assert Mode.split_list(many) == ["elastic:exit='a, b'"] * 2000


def test_pickling_a_mode_goes_through_its_text():
    import pickle

    mode = Mode.parse("early-exit:threshold=0.9:at='Hmm'")
    assert pickle.loads(pickle.dumps(mode)) == mode


# -- runs written before modes were objects ---------------------------------------------------------


def test_mode_strings_of_an_old_run_read_back_as_written():
    """Each text parses and writes back; read as an old run's (Mode.legacy), early-exit's name e1's recipe and
    budget-forcing's e1's earlier forced text (answer=inline)."""
    written = json.loads((OLD_RUN / "config.json").read_text())["modes"]
    stored = set(pd.read_parquet(OLD_RUN / "samples.parquet")["mode"])
    assert stored <= set(written) | {"soft"} and len(written) == 11
    for text in [*written, *stored]:
        assert str(Mode.parse(text)) == text
        mode, legacy = Mode.parse(text), Mode.parse(Mode.legacy(text))
        then = (
            mode.replace(recipe="e1")
            if mode.trials
            else mode.replace(answer="inline")
            if mode.takes("answer")
            else mode
        )
        assert legacy == then


def test_an_old_run_resumes_without_decoding_and_decodes_the_same(tmp_path, tiny_model_dir, tiny_engine):
    """The fixture's run: the tiny model (built the same from its config), two problems, eleven modes."""
    from e1.engine.base import Sampling
    from e1.eval.run import EvalConfig, evaluate

    old = json.loads((OLD_RUN / "config.json").read_text())
    data = tmp_path / "toy.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(2)
        )
    )
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)

    def settings_for(out):
        return EvalConfig(
            model=str(tiny_model_dir),
            datasets=(str(data),),
            budgets=(Budget(4, 4),),
            modes=tuple(Mode.parse(Mode.legacy(m)) for m in old["modes"]),
            n=1,
            sampling=Sampling(temperature=0.0, max_tokens=12),
            out=out,
            batch_size=8,
        )

    class NoDecoding:
        def __getattr__(self, name):
            return getattr(tiny_engine, name)

        def generate(self, *args, **kwargs):
            raise AssertionError("a finished old run decoded again")

    resumed, _ = evaluate(settings_for(run), engine=NoDecoding())
    # the run was made before s1's layout (answer=s1) and DEER's recipe: its texts read as answer=inline, recipe=e1
    assert any("answer=inline" in Mode.legacy(m) for m in old["modes"])
    fresh, _ = evaluate(settings_for(tmp_path / "fresh"), engine=tiny_engine)
    columns = [
        "mode",
        "problem_id",
        "think_tokens",
        "solve_tokens",
        "forced",
        "think_text",
        "solution_text",
        "think_end",
    ]
    old_rows = pd.read_parquet(OLD_RUN / "samples.parquet")[columns]
    old_rows = old_rows.assign(
        mode=old_rows["mode"].map(Mode.legacy).astype(old_rows["mode"].dtype)
    )  # as the run reads now
    old_rows = old_rows.sort_values(["mode", "problem_id"]).reset_index(drop=True)
    assert resumed[columns].sort_values(["mode", "problem_id"]).reset_index(drop=True).equals(old_rows)
    # the same tokens decoded again; only s1's forced "Final Answer:", which older files kept at the start
    # of solution_text, is now recorded apart (forced_text) and is no part of what the model wrote
    answered = old_rows["forced"] & old_rows["mode"].map(lambda m: Mode.parse(m).answer_prompt).astype(bool)
    assert answered.any() and old_rows["solution_text"][answered].str.startswith("Final Answer:").all()
    old_rows.loc[answered, "solution_text"] = old_rows["solution_text"][answered].str.removeprefix("Final Answer:")
    fresh = fresh.sort_values(["mode", "problem_id"]).reset_index(drop=True)
    assert fresh[columns].equals(old_rows)
    assert (fresh["forced_text"][answered] == "Final Answer:").all()


def test_an_option_module_extends_the_modes_it_fits_and_its_notes_reach_the_row(monkeypatch):
    """``extend`` adds an option (with its rule, ``Option.notes``) to every registered mode it fits and to
    modes registered later; the one builder tokenizes its notes into the row's state."""
    import e1.engine.modes.catalog as base
    from e1.engine.markers import PROMPT_OPEN, Markers
    from e1.engine.modes import REGISTRY, extend, register
    from e1.engine.modes.options import Count
    from e1.engine.row_engine import ModeIds, build_state

    class Every(Count):
        def notes(self, value, budget):
            return tuple((at, f"<{budget.think - at}>") for at in range(value, budget.think, value)) if value else ()

    monkeypatch.setattr(base, "EXTENSIONS", [])
    for cls in REGISTRY.values():
        monkeypatch.setattr(cls, "options", cls.options)  # restored after the test
    option = extend(
        Every("every", "every=K: a note every K tokens", default=0), lambda cls: cls.name in ("elastic", "later-mode")
    )
    assert option in Mode.parse("elastic").options and not Mode.parse("truncate").takes("every")
    mode = Mode.parse("elastic:every=2")
    assert str(mode) == "elastic:every=2" and mode.notes(Budget(5, 1)) == ((2, "<3>"), (4, "<1>")) and mode.per_token
    assert not Mode.parse("elastic").per_token

    class Tokenizer:  # one id per character
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    markers = Markers("<t>", "</t>", (1,), (2,), frozenset({3}), 0, (4,), (5,))
    state = build_state(mode, Budget(5, 1), markers, PROMPT_OPEN, 20, ModeIds.of(Tokenizer(), mode, Budget(5, 1)))
    assert state.notes == ((2, (60, 51, 62)), (4, (60, 49, 62)))

    try:

        @register
        class Later(Mode):
            name = "later-mode"

        assert Mode.parse("later-mode:every=3").notes(Budget(4, 1)) == ((3, "<1>"),)  # registered after: fits too
    finally:
        REGISTRY.pop("later-mode", None)


@given(st.sampled_from(["elastic", "budget-forcing", "soft", "early-exit"]), st.data())
@settings(max_examples=20, deadline=None)
def test_an_extension_never_replaces_nor_silently_drops_an_option_a_mode_declares(name, data):
    """An option added by ``extend`` under a name the mode already declares (a built-in option, or one an
    earlier extension added) is refused in one line; the mode keeps its own option."""
    import e1.engine.modes.catalog as base
    from e1.engine.modes import REGISTRY, extend
    from e1.engine.modes.options import Count

    cls = REGISTRY[name]
    held = data.draw(st.sampled_from([option.name for option in cls.options]))
    before, extensions = cls.options, list(base.EXTENSIONS)
    try:
        with pytest.raises(ConfigError, match=f"already has an option '{held}'"):
            extend(Count(held, "a user's option", default=0), lambda c: c is cls)
        assert cls.options == before
    finally:
        cls.options, base.EXTENSIONS[:] = before, extensions
