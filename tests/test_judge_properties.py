"""The code judge's invariants, on generated and adversarial inputs (hypothesis) and on each case
that once went wrong (e1/rewards/code_tests.py states the threat model):

1. verdicts: integers compare exactly at any size, a tolerance only for expected decimals and
   floats, non-finite never equals finite, a verdict for anything in bounded time, never an error;
2. replies: every byte the solution sends back is read by one bounded decoder (size, depth,
   digits, no hashing of keys it chose), which answers a value or BadReply, nothing else;
3. the proxy: no exception raised by the solution changes a check's control flow;
4. batches: a hostile sample is its own 0 with a printable reason, next to honest ones that pass.
"""

from __future__ import annotations

import json
import math
import sys
import time
import tracemalloc
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from e1.rewards.code import compare_output, run_code_tests, same_value
from e1.rewards.harness import BadReply, SetItems, encode, read_reply
from e1.rewards.scoring import Scorer
from e1.sandbox import Limits, Sandbox

PURE = settings(max_examples=150, deadline=2000, database=None, suppress_health_check=[HealthCheck.too_slow])
SANDBOXED = settings(
    max_examples=8,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SQUARE_CALL = [{"kind": "call", "fn": "square", "args": [3], "expected": 9}]
SQUARE_CODE = [
    {"kind": "code", "code": "def check(candidate):\n    assert candidate(3) == 9\n", "entry_point": "square"}
]
ADD_STDIO = [{"kind": "stdio", "input": "2 3\n", "output": "5\n"}]
SQUARE = "def square(x):\n    return x * x\n"
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
HONEST_S = 10  # each test's limit: room for a loaded machine to start an honest program (no hostile one waits)
REPLY_FD = "import os\nfd = int(os.environ['E1_FDS'].split()[1])\n"  # the solution server's reply pipe

any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)  # surrogates included
huge_ints = st.integers(min_value=-(10**400), max_value=10**400) | st.integers(0, 2000).map(lambda n: 10**n + 7)
numbers = st.integers() | huge_ints | st.floats() | st.sampled_from([math.inf, -math.inf, math.nan, 1e18, 10**18 + 7])
json_like = st.recursive(
    st.none() | st.booleans() | numbers | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=25,
)


def completion(code: str) -> str:
    return f"<think>x</think>\n```python\n{code}\n```\n"


def judge(code: str, tests: list[dict], box: Sandbox):
    return run_code_tests(code, tests, time_limit_s=HONEST_S, sandbox=box)


def valid_reason(reason: str | None) -> bool:
    """A first_failure a results table can store: a short, valid UTF-8 string."""
    return reason is None or (isinstance(reason, str) and len(reason) <= 300 and bool(reason.encode("utf-8")))


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, limits=Limits(wall_s=HONEST_S), site_packages=True) as sandbox:
        yield sandbox


# --- 1. verdicts ---------------------------------------------------------------------------------


def test_integers_in_output_compare_exactly():
    assert compare_output("999999937\n", "999999000\n") == "expected '999999937', got '999999000'"
    assert compare_output("3\n", "3.0\n") is None and compare_output("3\n", "30e-1\n") is None  # exactly 3
    assert compare_output("3\n", "3.0000001\n") is not None  # no tolerance for an integer
    huge = "1" * 7000  # an exponent past Decimal's range: a verdict, not InvalidOperation
    assert compare_output("5\n", f"1e{huge}\n") is not None and compare_output("5\n", f"5e-{huge}\n") is not None
    assert compare_output("0\n", f"0.00e{huge}\n") is None and compare_output("-0\n", f"-0e-{huge}\n") is None
    assert compare_output("1" + "0" * 338 + "\n", "1e999\n") is not None  # both overflow float64
    assert compare_output("1" + "0" * 338 + ".5\n", "2e999\n") is not None
    assert compare_output("7\n", "007\n") is None and compare_output("0\n", "-0\n") is None  # same value
    assert compare_output("3.0\n", "3\n") is None and compare_output("1e5\n", "100000\n") is None  # decimals


def test_integers_in_values_compare_exactly():
    assert not same_value(1e18, 10**18 + 7)  # float(10**18 + 7) == 1e18: a tolerance would pass it
    assert not same_value(999999000, 999999937)
    assert not same_value(math.inf, 10**338) and not same_value(10**400, 1.5)  # no OverflowError either
    assert not same_value(math.nan, math.nan) and not same_value(math.inf, 1.0)
    assert same_value(3.0, 3) and same_value(3, 3.0) and same_value(math.inf, math.inf)


digits = st.text("0123456789", min_size=1, max_size=6000)  # past int()'s 4300-digit limit


@PURE
@given(st.sampled_from(["", "+", "-"]), digits, st.sampled_from(["", "+", "-"]), digits)
def test_integer_tokens_match_exactly_when_their_values_are_equal(sign_a, a, sign_b, b):
    equal = Decimal(sign_a + a) == Decimal(sign_b + b)  # exact at any size, no digit limit
    assert (compare_output(sign_a + a, sign_b + b) is None) == equal
    assert compare_output(a, a + ".0") is None and compare_output(a, a + ".01") is not None  # exact, as a decimal


@PURE
@given(st.floats(-1e300, 1e300), st.floats(-1e-7, 1e-7))
def test_decimals_match_within_the_tolerance_integers_only_exactly(x, noise):
    assert compare_output(repr(x), repr(x * (1 + noise))) is None
    off = x + max(abs(x), 1.0) * 1e-5
    assert compare_output(repr(x), repr(off)) is not None
    assert compare_output(repr(x), "1e999") is not None and compare_output(repr(x), "nan") is not None
    decimal = repr(int(x) * (1 + noise))  # a decimal for an integer: exactly equal, or wrong
    assert (compare_output(str(int(x)), decimal) is None) == (Decimal(decimal) == int(x))


@PURE
@given(st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=-(10**30), max_value=10**30))
def test_values_equal_integers_only_when_exactly_equal(a, b):
    assert same_value(a, b) == (a == b)
    assert same_value(float(a), b) == (float(a) == b)  # exact, as Python compares int and float


def holds_nan(value) -> bool:
    if isinstance(value, list):
        return any(map(holds_nan, value))
    if isinstance(value, dict):
        return any(map(holds_nan, value.values()))
    return isinstance(value, float) and math.isnan(value)


def beyond_float64(number) -> bool:
    return not math.isfinite(number) if isinstance(number, float) else abs(number) > sys.float_info.max


@PURE
@given(json_like, json_like, numbers, numbers)
def test_value_comparison_answers_for_anything(got, expected, number, other):
    start = time.monotonic()
    assert isinstance(same_value(got, expected), bool)
    assert same_value(got, got) == (not holds_nan(got))  # NaN equals nothing, not even itself
    assert isinstance(same_value(number, other), bool)  # an int too large for a float, inf, NaN
    if beyond_float64(number) and isinstance(other, float) and math.isfinite(other):
        assert not same_value(number, other)
    if isinstance(other, float) and math.isnan(other):
        assert not same_value(number, other)
    assert time.monotonic() - start < 1


pieces = st.sampled_from(["1" * 7000, "0" * 7000, ".", "e", "+", "-", "x", " ", "\n", "7", "\ud800"])


@PURE
@given(any_text | st.lists(pieces, max_size=12).map("".join), any_text)
def test_output_comparison_answers_for_any_text_in_linear_time(got, expected):
    start = time.monotonic()
    for want in (expected, "5", "0.5", got[:-1]):
        verdict = compare_output(want, got)
        assert verdict is None or isinstance(verdict, str)
    assert compare_output(got, got) is None
    assert time.monotonic() - start < 0.5


LONG_LINES = [
    "1" * 30_000 + "x",
    "1" * 15_000 + "." + "1" * 15_000 + "x",
    "1e" + "1" * 30_000 + "x",
    "-" * 30_000,
    "." * 30_000,
    "1" * 30_000 + "." + "e" * 30_000,
    "0" * 30_000 + "x",
]


def test_a_long_output_line_is_compared_in_linear_time():
    for line in LONG_LINES:  # a 30,000-digit line once took 79 s and starved a neighbour of its time
        start = time.monotonic()
        for expected in ("5", "0.5", line[:-1]):
            assert compare_output(expected, line) is not None
        assert time.monotonic() - start < 0.5, line[:10]


def test_deep_values_compare_without_recursion():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    assert same_value(deep, deep) and not same_value(deep, [])


# returned values compare by type: the rule of e1/rewards/verdicts.py, written out plainly
typed_scalars = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | any_text
typed_keys = st.booleans() | st.integers(-5, 5) | st.floats(-5, 5) | st.text(max_size=3)
typed_values = st.recursive(
    typed_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.sets(typed_keys, max_size=4)
        | st.frozensets(typed_keys, max_size=4)
        | st.dictionaries(typed_keys, inner, max_size=4)
    ),
    max_leaves=20,
)
RETYPES = {  # how a wrong answer could differ only in its types
    list: [tuple, set, lambda v: {str(i): x for i, x in enumerate(v)}],
    tuple: [list, set],
    set: [lambda v: sorted(v, key=repr), frozenset, lambda v: {x: None for x in v}],
    frozenset: [lambda v: sorted(v, key=repr), set],
    dict: [lambda v: {str(k): x for k, x in v.items()}, lambda v: sorted(v, key=repr), lambda v: list(v.values())],
    bool: [int, str],
    int: [float, str, bool],
    float: [int, str],
    str: [lambda v: [v]],
    type(None): [lambda v: 0],
}


def key_of(value):
    """The documented identity of a dict key or set item: type and value, all the way down."""
    if type(value) in (tuple, frozenset):
        return type(value), type(value)(map(key_of, value))
    return type(value), value


def typed_equal(got, expected) -> bool:
    """The rule of e1.rewards.verdicts' docstring, read literally (small values: recursion and
    hashing are fine here)."""
    if type(expected) is bool or type(got) is bool:
        return type(got) is type(expected) and got == expected
    if type(expected) is int:
        return type(got) in (int, float) and got == expected
    if type(expected) is float:
        if type(got) not in (int, float):
            return False
        if math.isfinite(expected) and math.isfinite(float(got)):
            return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6)
        return got == expected
    if type(expected) in (list, tuple):
        return (
            type(got) in ((list, tuple) if type(expected) is list else (tuple,))
            and len(got) == len(expected)
            and all(map(typed_equal, got, expected))
        )
    if type(expected) is dict:
        if type(got) is not dict or {key_of(k) for k in got} != {key_of(k) for k in expected}:
            return False
        wanted = {key_of(k): v for k, v in expected.items()}
        return all(typed_equal(v, wanted[key_of(k)]) for k, v in got.items())
    if type(expected) in (set, frozenset):
        return type(got) in (set, frozenset) and {key_of(x) for x in got} == {key_of(x) for x in expected}
    return type(got) is type(expected) and got == expected


@st.composite
def retyped(draw, value):
    """``value`` with some of its parts changed in type only."""
    change = RETYPES.get(type(value), [])
    if change and draw(st.booleans()):
        try:
            return draw(st.sampled_from(change))(value)
        except (
            TypeError,
            ValueError,
            OverflowError,
        ):  # items that cannot be a set's, text that is no number, inf as an int
            return value
    if type(value) in (list, tuple):
        return type(value)([draw(retyped(item)) for item in value])
    if type(value) is dict:
        return {key: draw(retyped(item)) for key, item in value.items()}
    return value


def over_the_wire(value):
    """``value`` returned by a solution, as the parent reads it."""
    return read_reply(json.dumps({"ok": encode(value)}), 1 << 20, hashless=True)[1]


@PURE
@given(typed_values, st.data())
def test_returned_values_compare_by_type(expected, data):
    got = data.draw(retyped(expected))
    assert same_value(over_the_wire(expected), expected)  # equal values of the same types always match
    assert same_value(expected, expected)
    assert same_value(over_the_wire(got), expected) == typed_equal(got, expected)  # else only as the rule says
    assert same_value(got, expected) == typed_equal(got, expected)


def test_sets_and_retyped_keys_never_stand_for_what_json_writes():
    assert not same_value(over_the_wire({2, 1}), [1, 2])  # once sorted into a list and passed
    assert not same_value(over_the_wire({1: "a"}), {"1": "a"})  # once keys were made strings and passed
    assert not same_value(over_the_wire({1: "a", "1": "b"}), {"1": "b"})
    assert not same_value(over_the_wire({True: 1}), {1: 1}) and not same_value(over_the_wire({1.0: 1}), {1: 1})
    assert same_value(over_the_wire((1, [2, (3,)])), [1, [2, [3]]])  # JSON has no tuples: a tuple is a list
    assert same_value(over_the_wire({"a": (1,)}), {"a": [1]}) and same_value(over_the_wire({3, 1}), {1, 3})
    assert not same_value(over_the_wire([1, 2]), (1, 2))  # but a list is no tuple


# --- 2. replies ----------------------------------------------------------------------------------


def read(line: bytes | str, hashless: bool = True):
    return read_reply(line, 1 << 20, hashless=hashless)


long_replies = st.integers(0, 2 << 20).map(lambda n: b'{"ok": "' + b"a" * n + b'"}')  # around the cap
deep_replies = st.integers(0, 5000).map(lambda depth: b'{"ok": ' + b"[" * depth + b"]" * depth + b"}")


@PURE
@given(st.binary(max_size=2000) | json_like.map(lambda v: json.dumps({"ok": v}).encode()) | long_replies | deep_replies)
def test_any_reply_is_a_value_or_bad_reply(line):
    for hashless in (True, False):
        try:
            returned, value = read(line, hashless)
        except BadReply as err:
            assert str(err)
        else:
            assert isinstance(returned, bool)


tags = st.sampled_from(["t", "s", "d", "l", "i", "ok", "error"])
raw_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tags | any_text, inner, max_size=2),
    max_leaves=30,
)


@PURE
@given(raw_json)
def test_hostile_reply_structures_are_a_value_or_bad_reply(body):
    for reply in ({"ok": body}, {"error": body}, body):
        for hashless in (True, False):
            try:
                read(json.dumps(reply), hashless)
            except BadReply:
                pass


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**50), 10**50) | st.floats(allow_nan=False) | any_text,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.frozensets(st.integers() | any_text, max_size=4)
        | st.dictionaries(st.integers() | any_text, inner, max_size=4)
    ),
    max_leaves=25,
)


@PURE
@given(plain)
def test_plain_data_crosses_unchanged(value):
    assert read(json.dumps({"ok": encode(value)}), hashless=False) == (True, value)


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"[" * 100_000 + b"\n", "nested too deeply"),
        (b'{"ok": ' + b"[" * 150 + b"]" * 150 + b"}\n", "nested more than 100 deep"),
        (b"5\n", "not a reply"),
        (b'{"error": 5}\n', "neither a value nor an error"),
        (b'{"error": [1, 2]}\n', "neither a value nor an error"),
        (b'{"ok": ' + b"9" * 5000 + b"}\n", "more than 4300 digits"),
        (b'{"ok": {"q": 1}}\n', "not plain data"),
        (b"\xff\xfe\n", "unreadable reply"),
        (b"1" * ((1 << 20) + 1), "reply longer than 1048576 bytes"),
    ],
    ids=[
        "deep json",
        "deep value",
        "not an object",
        "error not a list",
        "error of numbers",
        "long integer",
        "unknown tag",
        "not utf-8",
        "endless line",
    ],
)
def test_malformed_replies_are_bad_replies_with_a_reason(line, reason):
    with pytest.raises(BadReply, match=reason):
        read(line)


def test_integers_are_read_with_a_bound_whatever_the_interpreter_allows():
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # no limit: int() of a long numeral would take quadratic time
    try:
        start = time.monotonic()
        with pytest.raises(BadReply, match="digits"):
            read(b'{"ok": ' + b"9" * 500_000 + b"}\n")
        assert time.monotonic() - start < 0.5
    finally:
        sys.set_int_max_str_digits(limit)


def test_a_set_of_colliding_integers_is_read_in_linear_time():
    colliding = [k * (2**61 - 1) for k in range(40_000)]  # hash(k * (2**61 - 1)) == 0 for all k
    start = time.monotonic()
    returned, value = read(json.dumps({"ok": {"s": colliding}}).encode())
    assert returned and value == SetItems(colliding) and time.monotonic() - start < 1
    assert not same_value(value, colliding)  # a set is not a list


# --- 3. through the sandbox: each case that once scored a wrong answer 1.0 ------------------------


def test_call_tests_compare_integers_exactly(box):
    ten_to_18 = [{"kind": "call", "fn": "f", "args": [], "expected": 10**18 + 7}]
    assert not judge("def f():\n    return 1e18\n", ten_to_18, box).all_passed
    huge = [{"kind": "call", "fn": "f", "args": [], "expected": 10**338}]
    assert judge("def f():\n    return 1e999\n", huge, box).first_failure.startswith("test 1: wrong answer")
    half = [{"kind": "call", "fn": "f", "args": [], "expected": 1.5}]
    assert judge("def f():\n    return 10**400\n", half, box).first_failure.startswith("test 1: wrong answer")
    stdio = [{"kind": "stdio", "input": "", "output": "999999937\n"}]
    assert judge("print(999999000)", stdio, box).first_failure == (
        "test 1: wrong answer: expected '999999937', got '999999000'"
    )


EVALPLUS_TEST = """import numpy as np

def is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    return False

def assertion(out, exp, atol):
    exact_match = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        np.testing.assert_allclose(out, exp, atol=atol)
    else:
        assert exact_match

def check(candidate):
    inputs = [[[1.0, 2.0, 3.0]], [[2.5]]]
    results = [2.0, 2.5]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)

check(mean)
"""


def test_humanevalplus_checks_keep_evalplus_type_rule(box):
    tests = [{"kind": "code", "code": EVALPLUS_TEST, "entry_point": "mean"}]
    bodies = {
        "return sum(xs) / len(xs)": True,
        "return sum(xs) / len(xs) + 1e-9": True,  # within the tolerance
        "return []": False,  # numpy would broadcast it to any float
        "return [sum(xs) / len(xs)]": False,
        "return (sum(xs) / len(xs),)": False,
    }
    verdicts = {body: judge(f"def mean(xs):\n    {body}\n", tests, box).all_passed for body in bodies}
    assert verdicts == bodies


MAP_CHECK = (
    "def check(candidate):\n    assert all(map(lambda x: candidate(x) == x * x, [1, 2, 3]))\n"
    "    assert candidate(4) == 16\n"
)
CATCHING_CHECK = (
    "def check(candidate):\n    try:\n        assert candidate(4) == 17\n    except Exception:\n        pass\n"
)


@pytest.mark.parametrize(
    "error",
    ["StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit(0)", "ValueError"],
)
def test_an_exception_raised_by_the_solution_always_fails_a_code_test(box, error):
    raising = f"def square(x):\n    raise {error}\n"
    for check in (MAP_CHECK, CATCHING_CHECK):
        result = judge(raising, [{"kind": "code", "code": check, "entry_point": "square"}], box)
        assert not result.all_passed, (error, check)
    honest = judge(SQUARE, [{"kind": "code", "code": MAP_CHECK, "entry_point": "square"}], box)
    assert honest.all_passed


def test_unreadable_replies_fail_a_code_test_even_inside_an_except(box):
    garbage = REPLY_FD + "def square(x):\n    os.write(fd, b'not json\\n')\n    return 0\n"
    result = judge(garbage, [{"kind": "code", "code": CATCHING_CHECK, "entry_point": "square"}], box)
    assert result.first_failure.startswith("test 1: unreadable reply")


# --- 4. batches: a hostile sample never crashes, stalls or changes a neighbour --------------------

HOSTILE_CALLS = {
    "deeply nested reply": REPLY_FD + "os.write(fd, b'[' * 100000 + b'\\n')\nos._exit(0)",
    "reply not an object": REPLY_FD + "os.write(fd, b'5\\n')\nos._exit(0)",
    "error not a string": REPLY_FD + "os.write(fd, b'{\"error\": 5}\\n')\nos._exit(0)",
    "error of numbers": REPLY_FD + "os.write(fd, b'{\"error\": [1, 2]}\\n')\nos._exit(0)",
    "int too large for float": "def square(x):\n    return 10**400\n",
    "lone surrogate in the error": REPLY_FD + 'os.write(fd, b\'{"error": ["E", "\\\\ud800"]}\\n\')\nos._exit(0)',
    "lone surrogate in the value": "def square(x):\n    return '\\ud800'\n",
    "integer past the digit limit": REPLY_FD + "os.write(fd, b'{\"ok\": ' + b'9' * 100000 + b'}\\n')\nos._exit(0)",
}


def test_hostile_replies_score_zero_with_a_reason_beside_honest_samples():
    programs = [
        (SQUARE, SQUARE_CALL),
        *((code, SQUARE_CALL) for code in HOSTILE_CALLS.values()),
        ("print(5)  # \ud800", ADD_STDIO),
        ("def square(x):\n    return 9  # \ud800", SQUARE_CODE),
        (ADD, ADD_STDIO),
    ]
    with Scorer(workers=2, time_limit_s=HONEST_S) as scorer:
        scored = scorer.score(
            ["code"] * len(programs),
            [completion(code) for code, _ in programs],
            [json.dumps(tests) for _, tests in programs],
        )
    assert [s.reward for s in scored] == [1.0] + [0.0] * (len(programs) - 2) + [1.0]
    reasons = [s.first_failure for s in scored[1:-1]]
    assert all(valid_reason(reason) and not reason.startswith("test 1: judge error") for reason in reasons), reasons
    assert all(
        reason.startswith("test 1: runtime error: SyntaxError: the code is not UTF-8 text (a lone surrogate")
        for reason in reasons[-2:]
    )


def test_a_reply_line_that_never_ends_is_cut_at_the_reply_limit(box):
    endless = REPLY_FD + "while True:\n    os.write(fd, b'1' * 65536)\n"
    tracemalloc.start()
    start = time.monotonic()
    try:
        result = judge(endless, SQUARE_CALL, box)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.first_failure == "test 1: reply longer than 4194304 bytes"
    assert peak < 16 << 20 and time.monotonic() - start < HONEST_S / 2  # not the deadline


COLLIDING_SET = (
    REPLY_FD + "import json, sys\nencode = sys._getframe(1).f_globals['encode']  # the harness's\n"
    "items = encode([k * (2**61 - 1) for k in range(30000)])\n"
    "items = items['l'] if isinstance(items, dict) else items\n"  # the codec before 2026-11
    "os.write(fd, json.dumps({'ok': {'s': items}}).encode() + b'\\n')\nos._exit(0)\n"
)


def test_hostile_samples_do_not_stall_an_honest_neighbour():
    programs = [
        (ADD, ADD_STDIO),
        ("print('1' * 30000 + 'x')", ADD_STDIO),
        (ADD, ADD_STDIO),
        (COLLIDING_SET, SQUARE_CALL),
        (SQUARE, SQUARE_CALL),
    ]
    start = time.monotonic()
    with Scorer(workers=2, time_limit_s=HONEST_S) as scorer:
        scored = scorer.score(
            ["code"] * len(programs),
            [completion(code) for code, _ in programs],
            [json.dumps(tests) for _, tests in programs],
        )
    assert [s.reward for s in scored] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert time.monotonic() - start < HONEST_S * 0.8  # each hostile one costs the judge milliseconds


# --- fuzzing: random programs and random bytes next to honest programs ---------------------------

EXCEPTIONS = [
    "StopIteration",
    "StopAsyncIteration",
    "GeneratorExit",
    "KeyboardInterrupt",
    "SystemExit(0)",
    "RecursionError",
    "MemoryError",
    "ValueError('\\ud800')",
]
replies = st.one_of(
    st.binary(max_size=300),
    raw_json.map(lambda body: json.dumps({"error": body}).encode()),
    raw_json.map(lambda body: json.dumps({"ok": body}).encode()),
    raw_json.map(lambda body: json.dumps(body).encode()),
    st.integers(0, 5000).map(lambda depth: b"[" * depth),
)
hostile_programs = st.one_of(
    any_text.map(lambda text: (text, "call")),  # random source, surrogates included
    replies.map(lambda raw: (REPLY_FD + f"os.write(fd, {raw!r} + b'\\n')\nos._exit(0)", "call")),
    replies.map(lambda raw: (REPLY_FD + f"def square(x):\n    os.write(fd, {raw!r} + b'\\n')\n    return 9", "code")),
    any_text.map(lambda text: (f"print({text!r})", "stdio")),
    json_like.map(
        lambda value: (
            f"def square(x):\n    return {value!r}\n".replace("nan", "float('nan')").replace("inf", "float('inf')"),
            "call",
        )
    ),
    st.sampled_from(EXCEPTIONS).map(lambda error: (f"def square(x):\n    raise {error}\n", "code")),
)
TESTS = {"call": SQUARE_CALL, "code": SQUARE_CODE, "stdio": ADD_STDIO}


@pytest.fixture(scope="module")
def scorer():
    with Scorer(workers=2, time_limit_s=HONEST_S) as shared:
        yield shared


@SANDBOXED
@given(st.lists(hostile_programs, min_size=1, max_size=5))
@example([(code, "call") for code in HOSTILE_CALLS.values()] + [(COLLIDING_SET, "call")])  # the known cases, always
def test_fuzzed_programs_never_break_a_batch(scorer, hostile):
    honest = [(SQUARE, "call"), (SQUARE, "code"), (ADD, "stdio")]
    programs = honest[:2] + hostile + honest[2:]
    scored = scorer.score(
        ["code"] * len(programs),
        [completion(code) for code, _ in programs],
        [json.dumps(TESTS[kind]) for _, kind in programs],
    )
    assert [s.reward for s in scored[:2] + scored[-1:]] == [1.0, 1.0, 1.0]
    assert all(valid_reason(s.first_failure) for s in scored)
    assert not any((s.first_failure or "").startswith("test 1: judge error") for s in scored)
