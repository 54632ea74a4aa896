"""Codeforces rating and percentile from per-problem results, offline (the CodeElo method).

A model "takes part" in each past contest: its score comes from the first passing attempt
among its first ``pass_n`` samples per problem, its rank from the contest's official
standings, and its rating is the one whose expected seed among the rated participants
matches that rank. The final rating is the mean over contests, with a 95% bootstrap interval
over them. Ranks and the seed search follow QwenLM/CodeElo's ``calc_rating.py`` step by step
(including its 0-based rank), so numbers stay comparable with published CodeElo/DeepCoder/E1
ratings.

    >>> expected_seed(1500, [1500, 1500])
    2.0
    >>> rating_for_rank(2, [1500, 1500])  # beaten by both 1500s (0-based rank 2)
    1500
    >>> model_score([Problem("A", 500.0), Problem("B", None)], {"A": [False, True], "B": [True]}, pass_n=8)
    (451.0, 0, 2)

Contest data is fetched once with :func:`fetch_contests` (``e1 elo fetch``) into a folder
holding ``<id>.standings.json``, ``<id>.ratingChanges.json`` and optionally ``population.json``.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e1.errors import DataError, server_url
from e1.numeric import Number, check_numbers
from e1.report.elo_results import load_results
from e1.report.elo_results import read_json as _read_json
from e1.report.within import within

__all__ = ["load_results"]  # the results loader lives in e1.report.elo_results; this module rates

API_URL = "https://codeforces.com/api/"
POPULATION_FILE = "population.json"
_PROBLEM_ID = re.compile(r"(\d+)([A-Za-z][A-Za-z0-9]*)")

# --- scoring: pure functions --------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """A contest problem: its index (``A``, ``B1``) and points (None in ICPC-style scoring)."""

    index: str
    points: float | None


@dataclass(frozen=True)
class Participant:
    handle: str
    points: float
    penalty: int
    old_rating: int


def model_score(
    problems: Sequence[Problem], attempts: Mapping[str, Sequence[bool]], pass_n: int
) -> tuple[float, int, int]:
    """(points, penalty, solved) from the first passing attempt ``i`` among the first ``pass_n``.

    A points problem adds ``max(0, points - 50 i)``; an ICPC-style one adds 1 and ``10 i`` penalty.
    """
    points, penalty, solved = 0.0, 0, 0
    for problem in problems:
        first_pass = next((i for i, ok in enumerate(attempts.get(problem.index, ())[:pass_n]) if ok), None)
        if first_pass is None:
            continue
        solved += 1
        if problem.points is not None:
            points += max(0.0, problem.points - 50 * first_pass)
        else:
            points += 1
            penalty += 10 * first_pass
    return points, penalty, solved


def contest_rank(participants: Sequence[Participant], points: float, penalty: int) -> int:
    """0-based position of the first participant the model beats (``len`` if it beats none)."""
    for position, other in enumerate(participants):
        if other.points < points or (other.points == points and other.penalty > penalty):
            return position
    return len(participants)


def expected_seed(rating: float, old_ratings: Sequence[int]) -> float:
    """Codeforces' expected place of a ``rating`` among participants with ``old_ratings``."""
    return 1 + sum(1 / (1 + 10 ** ((rating - old) / 400)) for old in old_ratings)


def rating_for_rank(rank: int, old_ratings: Sequence[int]) -> int:
    """Largest integer r in [0, max old + 100] with ``expected_seed(r) >= rank`` (0 if none).

    The expected seed falls as r rises, so a binary search finds the boundary.
    """
    low, high = 0, max(old_ratings) + 100
    while low < high:
        middle = (low + high + 1) // 2
        if expected_seed(middle, old_ratings) >= rank:
            low = middle
        else:
            high = middle - 1
    return low


def percentile(rating: float, histogram: Mapping[int, int]) -> float:
    """Percent of the population rated strictly below ``rating``, rounded to 0.1."""
    total = sum(histogram.values())
    below = sum(count for value, count in histogram.items() if value < rating)
    return round(100 * below / total, 1)


# --- contest files ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contest:
    """What rating needs from one contest: its problems and its rated official participants."""

    contest_id: int
    kind: str  # the API's contest type: CF, ICPC or IOI
    problems: tuple[Problem, ...]
    participants: tuple[Participant, ...]  # in standings order


def load_contest(contests_dir: Path, contest_id: int) -> Contest:
    """Join ``<id>.standings.json`` and ``<id>.ratingChanges.json``: official rows with an old rating."""
    standings_path = contests_dir / f"{contest_id}.standings.json"
    changes_path = contests_dir / f"{contest_id}.ratingChanges.json"
    standings, changes = _read_json(standings_path), _read_json(changes_path)
    try:
        old_ratings = {change["handle"]: int(change["oldRating"]) for change in changes}
    except (TypeError, KeyError, ValueError) as err:
        raise DataError(f"{changes_path}: not a contest.ratingChanges result ({err!r})") from None
    try:
        problems = tuple(
            Problem(str(p["index"]), float(p["points"]) if "points" in p else None) for p in standings["problems"]
        )
        participants = tuple(
            Participant(handle, float(row["points"]), int(row.get("penalty", 0)), old_ratings[handle])
            for row in standings["rows"]
            if row["party"].get("participantType", "CONTESTANT") == "CONTESTANT"
            and (handle := row["party"]["members"][0]["handle"]) in old_ratings
        )
        kind = str(standings.get("contest", {}).get("type", "?"))
    except (TypeError, KeyError, ValueError, IndexError, AttributeError) as err:
        raise DataError(f"{standings_path}: not a contest.standings result ({err!r})") from None
    return Contest(contest_id, kind, problems, participants)


def load_population(contests_dir: Path) -> dict[int, int] | None:
    """The ``{"rating": count}`` histogram in ``population.json``, or None when there is none."""
    path = contests_dir / POPULATION_FILE
    if not path.exists():
        return None
    histogram = _read_json(path)
    try:
        parsed = {int(rating): int(count) for rating, count in histogram.items()}
    except (AttributeError, TypeError, ValueError) as err:
        raise DataError(f'{path}: expected {{"rating": count, ...}} ({err})') from None
    if not sum(parsed.values()):
        raise DataError(f"{path}: the population is empty")
    return parsed


# --- the estimate -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContestRating:
    contest_id: int
    kind: str
    participants: int
    problems: int
    solved: int
    points: float
    penalty: int
    rank: int
    rating: int | None  # None: skipped for having too few participants


@dataclass(frozen=True)
class EloEstimate:
    """The mean rating over the rated contests, its 95% bootstrap interval over those contests
    (:func:`e1.report.metrics.bootstrap_interval`: which contests a model met moves its mean most),
    and the percentile of the mean."""

    rating: float
    rating_ci: tuple[float, float]
    percentile: float | None
    contests: tuple[ContestRating, ...]

    def to_json(self) -> dict:
        rated = {str(c.contest_id): c.rating for c in self.contests if c.rating is not None}
        low, high = self.rating_ci
        return {
            "rating": self.rating,
            "rating_ci_low": low,
            "rating_ci_high": high,
            "percentile": self.percentile,
            "contests": rated,
        }


def split_problem_id(problem_id: str) -> tuple[int, str]:
    """``"1971A"`` -> ``(1971, "A")``."""
    match = _PROBLEM_ID.fullmatch(problem_id.strip())
    if not match:
        raise DataError(f"problem id {problem_id!r} is not a Codeforces id like 1971A")
    return int(match.group(1)), match.group(2)


# what each numeric setting may hold (e1.numeric); errors name the CLI's flags
ELO_NUMBERS = {
    "pass_n": Number(int, min=1, max=1_000_000, hint="attempts per problem, e.g. 8"),
    "min_participants": Number(int, min=0, hint="0 keeps every contest"),
}
FETCH_NUMBERS = {
    "retries": Number(int, min=0, max=100),
    "backoff_s": Number(float, min=0, max=3600),
    "timeout_s": Number(float, min=0, above=True, max=3600),
    "min_interval_s": Number(float, min=0, max=3600),
}


def check_elo_options(pass_n: int, min_participants: int) -> None:
    """``--pass-n`` and ``--min-participants``, refused before any file is read."""
    ELO_NUMBERS["pass_n"].check(pass_n, "--pass-n")
    ELO_NUMBERS["min_participants"].check(min_participants, "--min-participants")


def estimate_rating(
    results: Mapping[str, Sequence[bool]], contests_dir: Path, pass_n: int = 8, min_participants: int = 200
) -> EloEstimate:
    """Rate ``results`` on every contest they touch; mean rating, its interval and percentile over the rated ones."""
    check_elo_options(pass_n, min_participants)
    contests_dir = Path(contests_dir)
    by_contest: dict[int, dict[str, Sequence[bool]]] = {}
    for problem_id, attempts in results.items():
        contest_id, index = split_problem_id(problem_id)
        by_contest.setdefault(contest_id, {})[index] = attempts
    if not by_contest:
        raise DataError("the results hold no problems")
    ratings = tuple(
        _rate_contest(load_contest(contests_dir, contest_id), attempts, pass_n, min_participants)
        for contest_id, attempts in sorted(by_contest.items())
    )
    rated = [c.rating for c in ratings if c.rating is not None]
    if not rated:
        raise DataError(f"every contest has <= {min_participants} rated participants", hint="lower --min-participants")
    from e1.report.metrics import bootstrap_interval

    mean = sum(rated) / len(rated)
    population = load_population(contests_dir)
    return EloEstimate(mean, bootstrap_interval(rated), percentile(mean, population) if population else None, ratings)


def _rate_contest(
    contest: Contest, attempts: Mapping[str, Sequence[bool]], pass_n: int, min_participants: int
) -> ContestRating:
    known = {problem.index for problem in contest.problems}
    unknown = sorted(set(attempts) - known)
    if unknown:
        raise DataError(
            f"problem(s) {', '.join(f'{contest.contest_id}{i}' for i in unknown)} are not in contest "
            f"{contest.contest_id}",
            hint=f"its problems are {', '.join(sorted(known))}",
        )
    points, penalty, solved = model_score(contest.problems, attempts, pass_n)
    rank = contest_rank(contest.participants, points, penalty)
    too_few = len(contest.participants) <= min_participants
    rating = None if too_few else rating_for_rank(rank, [p.old_rating for p in contest.participants])
    return ContestRating(
        contest.contest_id, contest.kind, len(contest.participants), len(contest.problems),
        solved, points, penalty, rank, rating,
    )  # fmt: skip


# --- fetching from the Codeforces API -----------------------------------------------------------


Opener = Callable[..., object]  # urllib.request.urlopen's signature: (request, timeout=...) -> response


@dataclass(frozen=True)
class FetchConfig:
    """How to talk to the API. The API allows about one call every two seconds."""

    base_url: str = API_URL
    retries: int = 5
    backoff_s: float = 2.0  # the wait doubles after each failed try
    timeout_s: float = 60.0
    min_interval_s: float = 2.0

    def __post_init__(self):
        check_numbers(self, FETCH_NUMBERS, {"retries": "--retries"})
        server_url(self.base_url, "--api-url", API_URL, "the Codeforces API is read without credentials")


class _Client:
    def __init__(self, config: FetchConfig, opener: Opener, sleep: Callable[[float], None]):
        self.config, self.opener, self.sleep = config, opener, sleep
        self._last_call = -float("inf")

    def call(self, method: str, **params) -> object:
        """The ``result`` of one API call, retrying transient failures with exponential backoff."""
        url = self.config.base_url.rstrip("/") + "/" + method + "?" + urllib.parse.urlencode(params)
        for attempt in range(self.config.retries + 1):
            wait = self._last_call + self.config.min_interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            self._last_call = time.monotonic()
            try:
                return self._result(url)
            except _Transient as err:
                if attempt == self.config.retries:
                    raise DataError(f"{url}: {err} (gave up after {attempt + 1} tries)") from None
                self.sleep(self.config.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _result(self, url: str) -> object:
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip", "User-Agent": "e1-elo"})
        try:
            deadline = time.monotonic() + self.config.timeout_s  # the whole answer: status line, headers, body
            timeout_s = self.config.timeout_s  # the whole answer's: the library bounds each socket wait only
            late = lambda: _Transient("no answer within the timeout")  # noqa: E731
            with within(lambda: self.opener(request, timeout=timeout_s), timeout_s, late) as response:
                body = _bounded_body(response, deadline)
                if response.headers.get("Content-Encoding") == "gzip":
                    body = _gunzip(body)
        except urllib.error.HTTPError as err:
            if err.code == 429 or err.code >= 500:
                raise _Transient(f"HTTP {err.code}") from None
            body = err.read()  # the API answers a FAILED call with 400 and a JSON comment
            if not body.lstrip().startswith(b"{"):
                raise DataError(f"{url}: HTTP {err.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as err:
            raise _Transient(str(getattr(err, "reason", err)) or type(err).__name__) from None
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, an integer past the digit limit
            raise _Transient("the answer is not JSON e1 reads") from None
        if not isinstance(answer, dict) or answer.get("status") != "OK":
            comment = str(answer.get("comment", "no comment")) if isinstance(answer, dict) else "no status"
            if "limit exceeded" in comment.lower():
                raise _Transient(comment)
            raise DataError(f"{url}: Codeforces says {comment!r}")
        return answer["result"]


MAX_ANSWER_BYTES = 256 << 20  # the largest standings (and the rated list) are tens of MiB, unpacked


def _bounded_body(response, deadline: float) -> bytes:
    """The answer's bytes, read as they arrive: at most :data:`MAX_ANSWER_BYTES`, whole by ``deadline``
    (``--timeout`` bounds each wait, so a server dripping a byte at a time ends there too)."""
    read = getattr(response, "read1", response.read)
    chunks, size = [], 0
    while chunk := read(1 << 16):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise DataError(f"the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB")
        if time.monotonic() > deadline:
            raise _Transient("no complete answer within the timeout")
        chunks.append(chunk)
    return b"".join(chunks)


def _gunzip(body: bytes) -> bytes:
    """A gzip answer unpacked to at most :data:`MAX_ANSWER_BYTES` (a small bomb unpacks to no more)."""
    import zlib

    try:
        unpacking = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = unpacking.decompress(body, MAX_ANSWER_BYTES + 1)
    except zlib.error:
        raise _Transient("the answer is not gzip") from None
    if len(data) > MAX_ANSWER_BYTES:
        raise DataError(f"the answer unpacks to more than {MAX_ANSWER_BYTES >> 20} MiB")
    return data


class _Transient(Exception):
    """A failure worth retrying: a timeout, 429/5xx, or the API's call limit."""


def fetch_contests(
    contest_ids: Iterable[int],
    out_dir: Path,
    population: bool = False,
    config: FetchConfig = FetchConfig(),
    opener: Opener = urllib.request.urlopen,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = lambda message: None,
) -> list[Path]:
    """Store each contest's standings (official rows) and rating changes; files already there are kept."""
    from e1.store import write_text

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    client = _Client(config, opener, sleep)
    written = []
    for contest_id in contest_ids:
        for method, suffix, params in (
            ("contest.standings", "standings", {"contestId": contest_id, "showUnofficial": "false"}),
            ("contest.ratingChanges", "ratingChanges", {"contestId": contest_id}),
        ):
            path = out_dir / f"{contest_id}.{suffix}.json"
            if path.exists():
                log(f"{path} (cached)")
                continue
            write_text(json.dumps(client.call(method, **params)), path)
            written.append(path)
            log(f"{path}")
    if population:
        path = out_dir / POPULATION_FILE
        if path.exists():
            log(f"{path} (cached)")
        else:
            users = client.call("user.ratedList", activeOnly="false", includeRetired="false")
            counts = Counter(int(user["rating"]) for user in users if "rating" in user)
            write_text(json.dumps({str(rating): counts[rating] for rating in sorted(counts)}), path)
            written.append(path)
            log(f"{path}")
    return written
