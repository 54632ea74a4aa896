"""Codeforces Elo on synthetic contests in the API's format; expected values derived independently."""

from __future__ import annotations

import functools
import gzip
import json
import math
import random
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import e1.commands.elo as elo_cmd
import e1.report.elo
from e1.errors import ConfigError, DataError
from e1.report.elo import FetchConfig, estimate_rating, fetch_contests, load_results
from e1.store.results import SAMPLE_DTYPES, samples_frame

# --- synthetic contests in the API's format ---------------------------------------------------


def standings(contest_id, kind, problems, rows):
    """A contest.standings ``result``: problems [(index, points|None)], rows [(handle, points, penalty, type)]."""
    return {
        "contest": {"id": contest_id, "name": f"Round {contest_id}", "type": kind, "phase": "FINISHED"},
        "problems": [
            {"contestId": contest_id, "index": index, "name": index, "type": "PROGRAMMING"}
            | ({"points": points} if points is not None else {})
            for index, points in problems
        ],
        "rows": [
            {
                "party": {
                    "contestId": contest_id,
                    "members": [{"handle": handle}],
                    "participantType": participant_type,
                    "ghost": False,
                },
                "rank": place + 1,
                "points": points,
                "penalty": penalty,
                "successfulHackCount": 0,
                "unsuccessfulHackCount": 0,
                "problemResults": [],
            }
            for place, (handle, points, penalty, participant_type) in enumerate(rows)
        ],
    }


def rating_changes(contest_id, old_ratings):
    return [
        {"contestId": contest_id, "contestName": f"Round {contest_id}", "handle": handle, "rank": place + 1,
         "ratingUpdateTimeSeconds": 1700000000, "oldRating": old, "newRating": old + 10}
        for place, (handle, old) in enumerate(old_ratings.items())
    ]  # fmt: skip


def write_contest(folder, contest_id, kind, problems, rows, old_ratings):
    (folder / f"{contest_id}.standings.json").write_text(json.dumps(standings(contest_id, kind, problems, rows)))
    (folder / f"{contest_id}.ratingChanges.json").write_text(json.dumps(rating_changes(contest_id, old_ratings)))


def old_ratings_for(handles, seed):
    rng = random.Random(seed)
    return {handle: rng.randint(800, 2800) for handle in handles}


@pytest.fixture
def contests(tmp_path):
    """Three contests whose model ranks are known by construction (see each block)."""
    folder = tmp_path / "cf"
    folder.mkdir()

    # 1971, points scoring. The model scores A: 500 - 50*1 = 450, B: 1000, C: 0 (its only pass
    # is attempt 8, outside pass@8) -> 1450. Above it: 57 with more points and 3 tied at 1450
    # with penalty 0 (ties go ahead: only *more* penalty ranks below) -> 0-based rank 60.
    # A practice row and an unrated handle at the top must not count.
    rows = [("practice-pro", 3000, 0, "PRACTICE"), ("unrated-star", 2900, 0, "CONTESTANT")]
    rows += [(f"p{k}", 2800 - 10 * k, 0, "CONTESTANT") for k in range(57)]
    rows += [(f"t{k}", 1450, 0, "CONTESTANT") for k in range(3)]
    rows += [(f"q{k}", 1400 - 3 * k, 0, "CONTESTANT") for k in range(240)]
    rated = old_ratings_for([h for h, *_ in rows[2:]] + ["absent-from-standings"], seed=1)
    write_contest(folder, 1971, "CF", [("A", 500), ("B", 1000), ("C", 1500)], rows, rated)

    # 1972, ICPC style. The model solves A at attempt 0 and B at attempt 2 -> 2 points,
    # penalty 20 (C never passes, D has no results). Above it: 40 with 3 solved, 30 with
    # 2 solved and penalty <= 20 -> rank 70. 250 rated participants in all.
    rows = [(f"a{k}", 3, 50 + k, "CONTESTANT") for k in range(40)]
    rows += [(f"b{k}", 2, 5 + k % 16, "CONTESTANT") for k in range(30)]
    rows += [(f"c{k}", 2, 21 + k, "CONTESTANT") for k in range(60)]
    rows += [(f"d{k}", 1, k, "CONTESTANT") for k in range(120)]
    write_contest(folder, 1972, "ICPC", [(i, None) for i in "ABCD"], rows, old_ratings_for([r[0] for r in rows], 2))

    # 1973: exactly 200 rated participants (plus a virtual row): skipped at the default
    # --min-participants 200. The model solves nothing -> rank 200 (it beats nobody).
    rows = [(f"s{k}", 3000 - k, 0, "CONTESTANT") for k in range(200)] + [("ghost", 5000, 0, "VIRTUAL")]
    write_contest(folder, 1973, "CF", [("A", 1000)], rows, old_ratings_for([f"s{k}" for k in range(200)], 3))
    return folder


RESULTS = {
    "1971A": [False, True, True, False, False, False, False, False],
    "1971B": [True] * 8,
    "1971C": [False] * 8 + [True],
    "1972A": [True, False],
    "1972B": [False, False, True, True],
    "1972C": [False, False],
    "1973A": [False] * 8,
}


def brute_force_rating(rank, old_ratings):
    """Scan every integer from the top down: the first whose expected seed reaches ``rank``."""
    for r in range(max(old_ratings) + 100, -1, -1):
        seed = 1.0
        for old in old_ratings:
            seed += 1.0 / (1.0 + 10.0 ** ((r - old) / 400.0))
        if seed >= rank:
            return r
    return 0


def rated_olds(folder, contest_id):
    """Old ratings of official standings rows that also have a rating change, in standings order."""
    rows = json.loads((folder / f"{contest_id}.standings.json").read_text())["rows"]
    changes_file = folder / f"{contest_id}.ratingChanges.json"
    changes = {change["handle"]: change["oldRating"] for change in json.loads(changes_file.read_text())}
    handles = [row["party"]["members"][0]["handle"] for row in rows if row["party"]["participantType"] == "CONTESTANT"]
    return [changes[h] for h in handles if h in changes]


# --- the estimate -----------------------------------------------------------------------------


def test_ratings_match_a_brute_force_derivation(contests):
    estimate = estimate_rating(RESULTS, contests)
    by_id = {c.contest_id: c for c in estimate.contests}

    assert (by_id[1971].points, by_id[1971].penalty, by_id[1971].solved) == (1450, 0, 2)
    assert by_id[1971].participants == 300 and by_id[1971].rank == 60
    assert (by_id[1972].points, by_id[1972].penalty, by_id[1972].solved) == (2, 20, 2)
    assert by_id[1972].participants == 250 and by_id[1972].rank == 70
    assert by_id[1973].participants == 200 and by_id[1973].rating is None  # <= 200: skipped

    expected_1971 = brute_force_rating(60, rated_olds(contests, 1971))
    expected_1972 = brute_force_rating(70, rated_olds(contests, 1972))
    assert by_id[1971].rating == expected_1971
    assert by_id[1972].rating == expected_1972
    assert estimate.rating == pytest.approx((expected_1971 + expected_1972) / 2)
    assert estimate.percentile is None  # no population.json
    assert estimate.to_json()["contests"] == {"1971": expected_1971, "1972": expected_1972}


def test_threshold_and_pass_n(contests):
    estimate = estimate_rating(RESULTS, contests, min_participants=199)
    by_id = {c.contest_id: c for c in estimate.contests}
    assert by_id[1973].rank == 200
    assert by_id[1973].rating == brute_force_rating(200, rated_olds(contests, 1973))

    # pass@9 reaches 1971C's pass at attempt 8: + max(0, 1500 - 400) = 1100 -> 2550 points;
    # the participants above it are p0..p25 (2800 .. 2550, ties ahead) -> rank 26
    by_id = {c.contest_id: c for c in estimate_rating(RESULTS, contests, pass_n=9).contests}
    assert (by_id[1971].points, by_id[1971].rank) == (2550, 26)
    # pass@1: 1971 keeps only B (1000): every rated participant above 1000 ranks ahead
    by_id = {c.contest_id: c for c in estimate_rating(RESULTS, contests, pass_n=1).contests}
    assert by_id[1971].points == 1000
    assert by_id[1971].rank == 57 + 3 + sum(1400 - 3 * k >= 1000 for k in range(240))


def test_rating_interval_resamples_contests(contests):
    # two rated contests r1, r2: resampled means are r1, (r1 + r2) / 2, r2 with chances 1/4, 1/2,
    # 1/4; each end holds more than 2.5 %, so the 95% interval runs from the lower to the higher
    estimate = estimate_rating(RESULTS, contests)
    ratings = sorted(c.rating for c in estimate.contests if c.rating is not None)
    assert len(ratings) == 2 and ratings[0] < ratings[1]
    assert estimate.rating_ci == (ratings[0], ratings[1])
    assert estimate.to_json()["rating_ci_low"] == ratings[0] and estimate.to_json()["rating_ci_high"] == ratings[1]
    # three: all-the-same resamples each have chance 1/27 (3.7 % > 2.5 %): again the extremes
    three = estimate_rating(RESULTS, contests, min_participants=199)
    rated = [c.rating for c in three.contests]
    assert three.rating_ci == (min(rated), max(rated)) and three.rating_ci[0] < three.rating < three.rating_ci[1]
    # one contest: nothing to resample
    only = estimate_rating({k: v for k, v in RESULTS.items() if k.startswith("1971")}, contests)
    assert only.rating_ci == (only.rating, only.rating)


def test_percentile_counts_the_population_strictly_below(contests):
    estimate = estimate_rating(RESULTS, contests)
    mean = estimate.rating
    population = {str(int(mean) - 300): 10, str(int(mean)): 25, str(int(mean) + 1): 40, "3500": 1}
    (contests / "population.json").write_text(json.dumps(population))
    # int(mean) <= mean: 10 + 25 of 76 rated strictly below, unless the mean is a whole number
    below = 10 + (25 if int(mean) < mean else 0)
    assert estimate_rating(RESULTS, contests).percentile == round(100 * below / 76, 1)


def test_results_from_json_and_parquet_agree(tmp_path, contests):
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    rows = []
    for budget in (1024, 2048):
        for problem_id, attempts in RESULTS.items():
            for index, correct in enumerate(attempts):
                # the 2k run solves everything: a different answer if groups were mixed
                rows.append(("codeforces", problem_id, index, correct or budget == 2048, "elastic", budget, 1024))
    rows.append(("aime", "aime-1", 0, True, "elastic", 1024, 1024))  # another dataset in the same run
    columns = ["dataset", "problem_id", "sample_index", "correct", "mode", "think_budget", "solve_budget"]
    samples = pd.DataFrame(rows, columns=columns).sample(frac=1, random_state=0)  # shuffled rows
    run = tmp_path / "run"
    run.mkdir()
    blank = {"int64": 0, "bool": False, "float64": math.nan, "string": ""}  # the columns elo does not read
    samples_frame(
        frame=samples.assign(
            **{column: blank[dtype] for column, dtype in SAMPLE_DTYPES.items() if column not in columns}
        )
    ).to_parquet(run / "samples.parquet")
    samples.to_parquet(tmp_path / "results.parquet")  # a parquet of results that is not a run's: its columns only

    assert load_results(tmp_path / "results.json") == RESULTS
    with pytest.raises(ConfigError, match="several runs"):
        load_results(run)
    with pytest.raises(ConfigError, match="several runs"):
        load_results(run, think=1024)  # aime and codeforces are both at 1k
    assert load_results(run, dataset="codeforces", think=1024) == RESULTS
    parquet = run / "samples.parquet"
    assert load_results(parquet, dataset="codeforces", mode="elastic", think=1024, solve=1024) == RESULTS
    all_solved = {problem_id: [True] * len(attempts) for problem_id, attempts in RESULTS.items()}
    assert load_results(parquet, dataset="codeforces", think=2048) == all_solved
    assert load_results(tmp_path / "results.parquet", dataset="codeforces", think=1024) == RESULTS

    args = ["elo", "-r", str(run), "-c", str(contests), "--dataset", "codeforces", "--think", "1k", "--json"]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == estimate_rating(RESULTS, contests).to_json()


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ({"1971Z": [True]}, "1971Z"),
        ({"abc": [True]}, "abc"),
        ({"1975A": [True]}, "1975.standings.json"),
    ],
)
def test_unknown_problems_and_contests(contests, results, message):
    with pytest.raises(DataError, match=message):
        estimate_rating(results, contests)


def test_malformed_files_are_named(contests):
    (contests / "1972.ratingChanges.json").write_text("{not json")
    with pytest.raises(DataError, match="1972.ratingChanges.json: malformed JSON"):
        estimate_rating(RESULTS, contests)
    (contests / "1971.standings.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(DataError, match="1971.standings.json"):
        estimate_rating(RESULTS, contests)


def test_malformed_results_are_named(tmp_path, contests):
    (tmp_path / "bad.json").write_text(json.dumps({"1971A": "yes"}))
    with pytest.raises(DataError, match="bad.json"):
        load_results(tmp_path / "bad.json")
    with pytest.raises(DataError, match="no results"):
        load_results(tmp_path / "missing-run")


# --- the CLI ----------------------------------------------------------------------------------


def cli():
    root = typer.Typer()
    root.add_typer(elo_cmd.app, name="elo")
    return root


def test_cli_json_and_table(tmp_path, contests):
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    runner = CliRunner()
    args = ["elo", "--results", str(tmp_path / "results.json"), "--contests", str(contests)]
    result = runner.invoke(cli(), [*args, "--json"])
    assert result.exit_code == 0, result.output
    expected = estimate_rating(RESULTS, contests).to_json()
    assert json.loads(result.output) == expected

    result = runner.invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert "1971" in result.output and "skipped" in result.output
    assert f"{expected['rating']:.1f}" in result.output
    assert f"95% CI {expected['rating_ci_low']:.1f}–{expected['rating_ci_high']:.1f}" in result.output


def test_cli_help_and_missing_options():
    runner = CliRunner()
    assert "Example" in runner.invoke(cli(), ["elo", "--help"]).output
    assert "--population" in runner.invoke(cli(), ["elo", "fetch", "--help"]).output
    result = runner.invoke(cli(), ["elo", "--contests", "somewhere"])
    assert isinstance(result.exception, ConfigError)


def test_command_module_imports_no_pandas():
    import subprocess
    import sys

    code = "import sys, e1.commands.elo; print('pandas' in sys.modules, 'urllib.request' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# --- fetching from a local fake of the API ----------------------------------------------------


class FakeCodeforces(BaseHTTPRequestHandler):
    """Serves synthetic results; contest 1971's standings fail once with 503."""

    requests: list[str] = []
    failures_left = {"contest.standings/1971": 1}

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlparse(self.path)
        method = url.path.rsplit("/", 1)[-1]
        query = dict(urllib.parse.parse_qsl(url.query))
        FakeCodeforces.requests.append(f"{method}/{query.get('contestId', '')}")
        key = f"{method}/{query.get('contestId', '')}"
        if FakeCodeforces.failures_left.get(key, 0) > 0:
            FakeCodeforces.failures_left[key] -= 1
            return self._send(503, b"busy")
        contest_id = int(query.get("contestId", 0))
        if contest_id == 9999:
            failed = {"status": "FAILED", "comment": "contestId: Contest with id 9999 not found"}
            return self._send(400, json.dumps(failed).encode())
        if method == "contest.standings":
            assert query["showUnofficial"] == "false"
            result = standings(contest_id, "CF", [("A", 500)], [("alice", 500, 0, "CONTESTANT")])
        elif method == "contest.ratingChanges":
            result = rating_changes(contest_id, {"alice": 1500})
        elif method == "user.ratedList":
            result = [{"handle": f"u{k}", "rating": rating} for k, rating in enumerate((1500, 1500, 2100))]
        else:
            return self._send(404, b"not found")
        body = json.dumps({"status": "OK", "result": result}).encode()
        if "gzip" in self.headers.get("Accept-Encoding", "") and method == "user.ratedList":
            return self._send(200, gzip.compress(body), gzipped=True)
        self._send(200, body)

    def _send(self, code, body, gzipped=False):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    FakeCodeforces.requests = []
    FakeCodeforces.failures_left = {"contest.standings/1971": 1}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeCodeforces)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/"
    server.shutdown()
    server.server_close()


DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # never a proxy for 127.0.0.1


def test_fetch_retries_and_caches(tmp_path, api):
    config = FetchConfig(base_url=api, backoff_s=0.01, min_interval_s=0)
    written = fetch_contests([1971, 1972], tmp_path / "cf", population=True, config=config, opener=DIRECT)
    assert len(written) == 5
    assert FakeCodeforces.requests.count("contest.standings/1971") == 2  # the 503, then the retry
    stored = json.loads((tmp_path / "cf" / "1971.standings.json").read_text())
    assert stored == standings(1971, "CF", [("A", 500)], [("alice", 500, 0, "CONTESTANT")])
    assert json.loads((tmp_path / "cf" / "1972.ratingChanges.json").read_text())[0]["oldRating"] == 1500
    assert json.loads((tmp_path / "cf" / "population.json").read_text()) == {"1500": 2, "2100": 1}

    before = len(FakeCodeforces.requests)
    assert fetch_contests([1971, 1972], tmp_path / "cf", population=True, config=config, opener=DIRECT) == []
    assert len(FakeCodeforces.requests) == before  # everything was cached


def test_fetch_reports_api_failures(tmp_path, api):
    config = FetchConfig(base_url=api, backoff_s=0.01, min_interval_s=0)
    with pytest.raises(DataError, match="Contest with id 9999 not found"):
        fetch_contests([9999], tmp_path / "cf", config=config, opener=DIRECT)
    FakeCodeforces.failures_left = {"contest.standings/1971": 10}
    with pytest.raises(DataError, match="gave up after 3 tries"):
        config = FetchConfig(base_url=api, retries=2, backoff_s=0.01, min_interval_s=0)
        fetch_contests([1971], tmp_path / "cf", config=config, opener=DIRECT)
    assert not (tmp_path / "cf" / "1971.standings.json").exists()


def test_cli_fetch(tmp_path, api, monkeypatch):
    monkeypatch.setattr(e1.report.elo, "FetchConfig", functools.partial(FetchConfig, backoff_s=0.01, min_interval_s=0))
    monkeypatch.setenv("no_proxy", "*")  # the command uses urllib's default opener
    monkeypatch.setenv("NO_PROXY", "*")
    args = ["elo", "fetch", "--contests", "1971,1972", "--out", str(tmp_path / "cf"), "--api-url", api]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "cf").iterdir()) == [
        "1971.ratingChanges.json", "1971.standings.json", "1972.ratingChanges.json", "1972.standings.json",
    ]  # fmt: skip
    result = CliRunner().invoke(cli(), ["elo", "fetch", "--contests", "19x1", "--out", str(tmp_path / "cf")])
    assert isinstance(result.exception, ConfigError)
