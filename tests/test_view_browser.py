"""e1 view in a real browser: Debian's Chromium, driven by Playwright, against the `e1 view`
command on a loopback port, over runs made here with e1's own code (a sweep of two scripted
models, one of its eval runs, two GRPO steps of a tiny model).

Skips, saying why, where Playwright, Chromium or the view extra is missing; with
E1_REQUIRE_BROWSER=1 (as .ci/run sets) a missing piece fails instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys

import pandas as pd
import pytest

CHROMIUM = os.environ.get("E1_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
THINK_BUDGETS, SOLVE = (0, 4, 8), 40  # the sweep of tests/test_sweep.py


def _require_browser() -> None:
    missing = [
        f"the {name} package (pip install -e '.[test]')"
        for name in ("playwright", "starlette", "uvicorn", "plotly")
        if importlib.util.find_spec(name) is None
    ]
    if not os.path.exists(CHROMIUM):
        missing.append("Chromium (apt-get install chromium)")
    if missing:
        reason = "the browser tests need " + ", ".join(missing)
        if os.environ.get("E1_REQUIRE_BROWSER", "") not in ("", "0"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs/sweep (models m/A and m/B: A boxes 2, B boxes 3; golds q0..q2 = 2, 3, 2), its eval run
    sweep/models/m--A, and runs/train (2 GRPO steps)."""
    _require_browser()
    from e1.engine.hf.hf_engine import HFEngine
    from e1.eval.sweep import sweep
    from e1.grpo.trainer import train
    from e1.models.tiny import build_tiny_model
    from tests.test_sweep import Loader, sweep_config
    from tests.test_train import contains_char, small, write_problems

    root = tmp_path_factory.mktemp("view") / "runs"
    root.mkdir()
    model = build_tiny_model(root.parent / "tiny")
    problems = root / "toy.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": answer}) + "\n"
            for i, answer in enumerate("232")
        )
    )
    sweep(sweep_config(root / "sweep", problems), load_engine=Loader(HFEngine.load(str(model), batch_size=64)))
    train(
        small(model, write_problems(root / "train.jsonl"), root / "train", steps=2, save_every=100),
        reward=contains_char,
    )
    code_run(root / "code")
    return root


def code_run(path):
    """A code eval run of one sample, written by hand: half its tests passed, the first failure named."""
    from e1.store.results import samples_frame, write_json, write_parquet

    write_json({"model": "coder", "datasets": ["humaneval"], "data_dir": str(path / "no-data")}, path / "config.json")
    write_parquet(
        samples_frame(
            [
                {
                    "dataset": "humaneval",
                    "problem_id": "HumanEval/0",
                    "sample_index": 0,
                    "mode": "elastic",
                    "think_budget": 16,
                    "solve_budget": 64,
                    "prompt_tokens": 30,
                    "think_tokens": 12,
                    "solve_tokens": 40,
                    "forced": False,
                    "finish_reason": "stop",
                    "think_text": "loop over pairs",
                    "solution_text": "```python\ndef f(x):\n    return x\n```",
                    "extracted_answer": "def f(x):\n    return x",
                    "gold": "6 tests",
                    "reward": 0.0,
                    "correct": False,
                    "tests_passed": 0.5,
                    "first_failure": "test 4: wrong answer",
                }
            ]
        ),
        path / "samples.parquet",
    )


@pytest.fixture(scope="module")
def url(runs):
    """`e1 view` on a free loopback port (it prints the URL it listens on)."""
    yield from serving(runs, "sweep", "sweep/models/m--A", "train", "code")


def serving(cwd, *folders):
    """Run `e1 view FOLDERS` from ``cwd``; yields its URL, then stops it with Ctrl-C."""
    command = [sys.executable, "-m", "e1", "view", *map(str, folders), "--port", "0"]
    server = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([server.stdout], [], [], 60)
        line = server.stdout.readline() if ready else ""
        assert "http://127.0.0.1:" in line, (
            f"e1 view did not start: {line!r} {server.stderr.read() if server.poll() is not None else ''}"
        )
        yield line.split(" at ")[1].split()[0]
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C
        stopped, _ = server.communicate(timeout=30)
    assert server.returncode == 0 and "e1 view stopped" in stopped


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1300, "height": 900},
        )
        yield context
        context.close()


@pytest.fixture
def page(browser, url):
    """A fresh page on the app, loaded; the test fails on any script error in it."""
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    yield page
    page.close()
    assert errors == []


def traces(page, plot: str) -> list[dict]:
    return page.evaluate(f"""() => document.getElementById({plot!r}).data.map(
        t => ({{name: t.name, x: Array.from(t.x), y: Array.from(t.y)}}))""")


def test_curves_plot_the_sweeps_points_and_hover_names_the_cell(page, runs):
    from playwright.sync_api import expect

    curves = pd.read_parquet(runs / "sweep" / "curves.parquet")
    shown = {t["name"]: t for t in traces(page, "curves")}
    for model, mode in (("m/A", "elastic"), ("m/B", "elastic"), ("m/A", "truncate")):
        cells = curves[(curves["model"] == model) & (curves["mode"] == mode)].sort_values("mean_total_tokens")
        trace = shown[f"sweep · {model} · toy · {mode}"]
        assert trace["x"] == pytest.approx(cells["mean_total_tokens"].tolist())
        assert trace["y"] == pytest.approx((100 * cells["accuracy"]).tolist())
    # by hand: A boxes 2, right on q0 and q2 of 3 at every budget; truncate never closes thinking, so never answers
    assert shown["sweep · m/A · toy · elastic"]["y"] == pytest.approx([200 / 3] * 3)
    assert shown["sweep · m/A · toy · truncate"]["x"] == [t + SOLVE for t in THINK_BUDGETS]  # all of t + s used
    assert shown["sweep · m/A · toy · truncate"]["y"] == [0, 0, 0]
    assert "sweep/models/m--A · m/A · toy · elastic" in shown  # a second run on the same plot

    index = list(shown).index("sweep · m/B · toy · elastic")
    page.evaluate(f"() => Plotly.Fx.hover('curves', [{{curveNumber: {index}, pointNumber: 1}}])")
    hover = page.locator("#curves .hoverlayer")
    for text in ("toy", "elastic", "t=4 s=40", "n = 2 samples × 3 problems", "accuracy 33.3%", "95% CI"):
        expect(hover).to_contain_text(text)


def choose(page, select: str, value: str) -> None:
    """Pick an option and wait for the table the choice reloads."""
    before = page.get_attribute("#sample-table", "data-loaded")
    page.select_option(select, value)
    page.wait_for_function("b => document.getElementById('sample-table').dataset.loaded !== b", arg=before)


def open_samples_of_the_eval_run(page):
    page.click("button[data-tab=samples]")
    page.wait_for_selector("#sample-table[data-loaded]")
    choose(page, "#f-run", page.locator("#f-run option", has_text="m--A").get_attribute("value"))


def test_filters_change_the_counts(page, runs):
    from playwright.sync_api import expect

    open_samples_of_the_eval_run(page)
    rows = pd.read_parquet(runs / "sweep" / "models" / "m--A" / "samples.parquet")
    count = page.locator("#sample-count")
    # 2 modes × 3 budgets × 3 problems × 2 samples; elastic is forced at every t (t = 0: at once) and right on q0, q2
    assert len(rows) == 36 and rows["forced"].sum() == 18 and rows["correct"].sum() == 12
    expect(count).to_have_text("36 samples · 12 correct · 18 forced")
    expect(page.locator("#sample-table tbody tr")).to_have_count(36)
    choose(page, "#f-forced", "true")
    expect(count).to_have_text("18 samples · 12 correct · 18 forced")
    choose(page, "#f-forced", "")
    choose(page, "#f-mode", "truncate")
    expect(count).to_have_text("18 samples · 0 correct · 0 forced")
    choose(page, "#f-mode", "elastic")
    choose(page, "#f-budget", "4+40")
    choose(page, "#f-correct", "false")
    expect(count).to_have_text("2 samples · 0 correct · 2 forced")  # q1's two samples at t = 4
    expect(page.locator("#sample-table tbody tr td:nth-child(2)")).to_have_text(["q1", "q1"])


def test_a_forced_sample_shows_where_e1_cut_thinking(page, runs):
    from playwright.sync_api import expect

    open_samples_of_the_eval_run(page)
    choose(page, "#f-mode", "elastic")
    choose(page, "#f-budget", "8+40")
    page.click("#sample-table tbody tr >> nth=0")  # q0, sample 0
    card = page.locator("#sample-detail .sample")
    expect(card).to_have_count(1)
    rows = pd.read_parquet(runs / "sweep" / "models" / "m--A" / "samples.parquet").set_index(
        ["problem_id", "sample_index", "mode", "think_budget"]
    )
    known = rows.loc[("q0", 0, "elastic", 8)]
    assert known["forced"] and known["think_tokens"] == 8
    expect(card.locator("pre.think-text")).to_have_text(known["think_text"])
    cut = card.locator("pre.think-text + .cut")  # the marker comes right where thinking stopped
    expect(cut).to_have_class("cut forced")
    expect(cut).to_contain_text("forced by e1 here: thinking reached t = 8")
    expect(card.locator("pre.solution-text")).to_have_text(known["solution_text"])
    expect(card.locator(".extracted")).to_have_text("2")
    expect(card.locator(".gold")).to_have_text("2")
    # the prompt the model saw (stored on sample 0 of the cell), not only the dataset's problem statement
    expect(page.locator("#sample-detail .problem-text")).to_have_text(rows.loc[("q0", 0, "elastic", 8)]["prompt"])
    expect(page.locator("#sample-detail .problem .source")).to_have_text("prompt")
    assert "What is 0 + 0?" in rows.loc[("q0", 0, "elastic", 8)]["prompt"]

    choose(page, "#f-mode", "truncate")
    page.click("#sample-table tbody tr >> nth=0")
    expect(page.locator("#sample-detail .sample")).to_contain_text("truncate")
    expect(page.locator("#sample-detail .cut.forced")).to_have_count(0)  # nothing is forced in truncate mode
    expect(page.locator("#sample-detail .cut.open")).to_have_count(1)


def test_a_code_sample_shows_its_tests(page):
    from playwright.sync_api import expect

    page.click("button[data-tab=samples]")
    page.wait_for_selector("#sample-table[data-loaded]")
    choose(page, "#f-run", page.locator("#f-run option", has_text="code").get_attribute("value"))
    page.click("#sample-table tbody tr >> nth=0")
    card = page.locator("#sample-detail .sample")
    expect(card.locator(".tests")).to_have_text("50.0%")
    expect(card.locator(".failure")).to_have_text("test 4: wrong answer")
    expect(card.locator(".gold")).to_have_text("6 tests")
    expect(card.locator(".cut.natural")).to_have_count(1)  # thinking ended by itself: nothing forced
    expect(page.locator("#sample-detail .problem .source")).to_contain_text(
        "not stored"
    )  # no humaneval in its data_dir


def test_a_damaged_run_is_shown_as_bad_and_the_others_still_load(browser, runs, tmp_path):
    from playwright.sync_api import expect

    from e1.store.results import write_json

    bad = tmp_path / "bad"
    write_json({"model": "broken"}, bad / "config.json")
    (bad / "samples.parquet").write_bytes(b"PAR1 not a parquet file")  # a disk that lost its blocks, say
    served = serving(runs, "code", bad)
    page = browser.new_page()
    try:
        page.goto(next(served))
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        expect(page.locator("#bad-runs")).to_contain_text(f"cannot read {bad}")
        expect(page.locator("#runs-line")).to_contain_text("2 runs")
        page.click("button[data-tab=samples]")
        page.wait_for_selector("#sample-table[data-loaded]")
        expect(page.locator("#sample-count")).to_contain_text("1 samples")  # the good run loads as usual
    finally:
        page.close()
        next(served, None)


def test_side_by_side_shows_both_runs_on_one_problem(page, runs):
    from playwright.sync_api import expect

    page.click("button[data-tab=compare]")
    page.wait_for_selector("#tab-compare[data-loaded]")

    def run_of(side, text):
        return page.locator(f"#{side}-run option", has_text=text).get_attribute("value")

    page.select_option("#left-run", run_of("left", "sweep (sweep)"))
    page.select_option("#left-model", "m/B")
    page.select_option("#right-run", run_of("right", "m--A"))
    for side in ("left", "right"):
        page.select_option(f"#{side}-mode", "elastic")
        page.select_option(f"#{side}-budget", "4+40")
    page.select_option("#c-problem", "q1")
    expect(page.locator("#tab-compare")).to_have_attribute("data-loaded", "toy/q1")
    left, right = page.locator("#left-samples .sample"), page.locator("#right-samples .sample")
    expect(left).to_have_count(2)
    expect(right).to_have_count(2)
    expect(left.locator(".extracted")).to_have_text(["3", "3"])  # B boxes 3: right on q1
    expect(right.locator(".extracted")).to_have_text(["2", "2"])  # A boxes 2: wrong on q1
    expect(left.locator("strong")).to_contain_text(["toy q1 · sample 0 · m/B", "toy q1 · sample 1 · m/B"])
    expect(right.locator("strong")).to_contain_text(["toy q1 · sample 0 · m/A", "toy q1 · sample 1 · m/A"])
    samples = pd.read_parquet(runs / "sweep" / "samples.parquet")
    (prompt,) = samples[
        (samples["model"] == "m/B")
        & (samples["problem_id"] == "q1")
        & (samples["mode"] == "elastic")
        & (samples["think_budget"] == 4)
    ]["prompt"].dropna()
    expect(page.locator("#c-problem-text .problem-text")).to_have_text(prompt)  # the left cell's prompt
    assert "What is 1 + 1?" in prompt


def test_training_metrics_are_plotted_by_step(page, runs):
    page.click("button[data-tab=training]")
    page.wait_for_selector("#metric-seconds-per-phase .main-svg")
    metrics = pd.read_parquet(runs / "train" / "metrics.parquet")
    flat_note = page.locator("#flat-metrics").inner_text()
    for column in ("reward_mean", "mean_think_tokens", "forced_rate", "kl"):
        if metrics[column].nunique() == 1:  # a flat line is named under the charts, with its value, not drawn
            assert page.locator(f"#metric-{column}").count() == 0 and f"{column} " in flat_note, column
            continue
        (trace,) = traces(page, f"metric-{column}")
        assert trace["x"] == [1, 2] and trace["y"] == pytest.approx(metrics[column].tolist()), column
    flat = [c for c in metrics.columns if c != "step" and metrics[c].notna().all() and metrics[c].nunique() == 1]
    assert all(page.locator(f"#metric-{c}").count() == 0 and c in flat_note for c in flat)
    phases = {t["name"]: t["y"] for t in traces(page, "metric-seconds-per-phase")}
    assert {"rollout_s", "update_s", "step_s"} <= set(phases)
    assert phases["update_s"] == pytest.approx(metrics["update_s"].tolist())


# ---- triage: the list's columns, search, sort, the detail beside it, links, diffs, curves, training, bundles ----


def pixels(png: bytes):
    """A screenshot's pixels as (r, g, b) tuples, with how often each occurs."""
    import io
    from collections import Counter

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return Counter(image.get_flattened_data()), image.size


def share(counts, size, color, tolerance=6) -> float:
    """The fraction of a screenshot's pixels within ``tolerance`` of ``color`` on every channel."""
    near = sum(n for rgb, n in counts.items() if all(abs(a - b) <= tolerance for a, b in zip(rgb, color)))
    return near / (size[0] * size[1])


def painted_rows(png: bytes, color, tolerance=6) -> list[int]:
    """The pixel rows of a screenshot more than half painted in ``color``."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    data = image.load()

    def near(rgb):
        return all(abs(a - b) <= tolerance for a, b in zip(rgb, color))

    return [y for y in range(height) if sum(near(data[x, y]) for x in range(0, width, 4)) > width / 8]


SELECTED = (255, 213, 79)  # #ffd54f, style.css's selected row
LEFT_ONLY, RIGHT_ONLY = (185, 230, 189), (245, 181, 181)  # the diff's rows: only the left right / only the right right


def column_texts(page, key: str) -> list[str]:
    index = page.evaluate(
        f"() => [...document.querySelectorAll('#sample-table th')].findIndex(th => th.dataset.key === {key!r})"
    )
    return page.locator(f"#sample-table tbody tr td:nth-child({index + 1})").all_inner_texts()


def search(page, text: str) -> None:
    if page.input_value("#f-search") == text:
        return
    before = page.get_attribute("#sample-table", "data-loaded")
    page.fill("#f-search", text)
    page.wait_for_function("b => document.getElementById('sample-table').dataset.loaded !== b", arg=before)


def test_the_list_shows_problem_answer_and_gold_searches_sorts_and_opens_the_detail_beside_it(page, runs):
    from playwright.sync_api import expect

    open_samples_of_the_eval_run(page)
    rows = pd.read_parquet(runs / "sweep" / "models" / "m--A" / "samples.parquet")
    choose(page, "#f-mode", "elastic")
    choose(page, "#f-budget", "4+40")
    expect(page.locator("#sample-table tbody tr")).to_have_count(6)  # 3 problems × 2 samples
    cell = rows[(rows["mode"] == "elastic") & (rows["think_budget"] == 4)].sort_values(["problem_id", "sample_index"])
    assert column_texts(page, "extracted_answer") == cell["extracted_answer"].tolist() == ["2"] * 6  # A boxes 2
    assert column_texts(page, "gold") == cell["gold"].tolist() == ["2", "2", "3", "3", "2", "2"]
    statements = column_texts(page, "problem")
    assert all(f"What is {i} + {i}?" in text for i, text in zip((0, 0, 1, 1, 2, 2), statements))

    search(page, "what is 1 + 1")  # the problem's text, any case
    expect(page.locator("#sample-count")).to_have_text("2 samples · 0 correct · 2 forced")
    search(page, "3")  # q1's gold
    assert column_texts(page, "problem_id") == ["q1", "q1"]
    search(page, ".*")  # plain text, never a pattern
    expect(page.locator("#sample-count")).to_have_text("0 samples · 0 correct · 0 forced")
    search(page, "")

    choose(page, "#f-budget", "")
    page.click("#sample-table th[data-key=think_tokens]")
    expect(page.locator("#sample-table th[data-key=think_tokens]")).to_have_attribute("aria-sort", "ascending")
    elastic = rows[rows["mode"] == "elastic"]
    assert [int(t) for t in column_texts(page, "think_tokens")] == sorted(elastic["think_tokens"])
    page.click("#sample-table th[data-key=think_tokens]")
    expect(page.locator("#sample-table th[data-key=think_tokens]")).to_have_attribute("aria-sort", "descending")
    assert [int(t) for t in column_texts(page, "think_tokens")] == sorted(elastic["think_tokens"], reverse=True)
    page.click("#sample-table th[data-key=gold]")  # strings sort too: the golds 2 before 3
    assert column_texts(page, "gold") == sorted(elastic["gold"])

    row = page.locator("#sample-table tbody tr >> nth=3")
    row.click()
    expect(page.locator("#sample-detail .sample")).to_have_count(1)
    listing, detail = page.locator(".listing").bounding_box(), page.locator("#sample-detail").bounding_box()
    assert detail["x"] >= listing["x"] + listing["width"] - 1  # beside the list, not below its rows
    assert detail["y"] < listing["y"] + 100
    band = painted_rows(page.locator(".listing").screenshot(), SELECTED)
    box, top = row.bounding_box(), page.locator(".listing").bounding_box()["y"]
    assert (
        band and abs(band[0] - (box["y"] - top)) <= 2 and abs(len(band) - box["height"]) <= 3
    )  # that row, and only it


def test_search_is_plain_case_insensitive_text_for_any_query(page, runs):
    """Whatever is typed, the list keeps exactly the rows whose problem, answer, gold or id holds it."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    open_samples_of_the_eval_run(page)
    listed = page.evaluate("() => api('list', {run: document.getElementById('f-run').value})")["rows"]

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.text(alphabet="Wwhat is 0123+?.*[](){}\\^$|<>&\"' ", max_size=12))
    def holds(text):
        search(page, text)
        needle = text[:200].lower()
        expected = sum(
            any(
                needle in str(r[k]).lower()
                for k in ("problem", "extracted_answer", "gold", "problem_id")
                if r[k] is not None
            )
            for r in listed
        )
        assert int(page.get_attribute("#sample-count", "data-total")) == expected
        assert page.locator("#sample-table tbody img, #sample-table tbody script").count() == 0

    holds()


def test_a_link_reopens_the_same_view(browser, page, runs):
    from playwright.sync_api import expect

    open_samples_of_the_eval_run(page)
    choose(page, "#f-mode", "elastic")
    choose(page, "#f-correct", "false")
    search(page, "what is 1")
    page.click("#sample-table th[data-key=sample_index]")
    page.click("#sample-table th[data-key=sample_index]")  # descending
    page.click("#sample-table tbody tr >> nth=1")
    expect(page.locator("#sample-detail .sample")).to_have_count(1)
    shown = page.locator("#sample-detail .sample strong").inner_text()
    link = page.url
    assert "#samples?" in link and "sort=sample_index" in link

    other = browser.new_page()
    errors = []
    other.on("pageerror", lambda error: errors.append(str(error)))
    try:
        other.goto(link)
        other.wait_for_selector("body[data-ready='1']", timeout=30_000)
        expect(other.locator("#tab-samples")).to_be_visible()
        assert other.input_value("#f-mode") == "elastic" and other.input_value("#f-correct") == "false"
        assert other.input_value("#f-search") == "what is 1"
        expect(other.locator("#sample-table th[data-key=sample_index]")).to_have_attribute("aria-sort", "descending")
        expect(other.locator("#sample-detail .sample strong")).to_have_text(shown)
        expect(other.locator("#sample-table tbody tr.selected")).to_have_count(1)
        assert other.url == link
    finally:
        other.close()
    assert errors == []


def test_any_link_is_read_as_data_never_as_markup_or_code(browser, url):
    """A hash from anywhere (hypothesis writes them) opens the page or its default, and nothing in it runs."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    page = browser.new_page()
    errors, dialogs = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    names = st.sampled_from(
        [
            "run",
            "model",
            "mode",
            "budget",
            "q",
            "sort",
            "desc",
            "sample",
            "page",
            "x",
            "dataset",
            "left_run",
            "show",
            "problem",
            "smooth",
            "log",
            "<img src=x onerror=alert(1)>",
        ]
    )
    values = st.one_of(
        st.text(max_size=40),
        st.sampled_from(
            [
                "<img src=x onerror=alert(1)>",
                "__proto__",
                "constructor",
                "-1",
                "1e309",
                "NaN",
                "0",
                "999999999",
                '["a"]',
                "x" * 6000,
            ]
        ),
    )
    tabs = st.sampled_from(["samples", "curves", "compare", "training", "nope", ""])

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(tabs, st.dictionaries(names, values, max_size=5))
    def opens(tab, params):
        from urllib.parse import urlencode

        page.goto(f"{url}#{tab}?{urlencode(params)}")
        page.reload()
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        assert page.locator("body img, main script").count() == 0 and dialogs == [] and errors == []
        assert page.locator("#error").is_hidden()

    try:
        opens()
    finally:
        page.close()


def test_a_curve_point_opens_the_samples_of_its_budget(page, runs):
    from playwright.sync_api import expect

    shown = [t["name"] for t in traces(page, "curves")]
    index = shown.index("sweep · m/B · toy · elastic")
    point = page.locator(f"#curves .scatterlayer .trace >> nth={index}").locator(".points path >> nth=1")  # t = 4
    box = point.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.locator("#tab-samples")).to_be_visible()
    expect(page.locator("#sample-count")).to_have_text("6 samples · 2 correct · 6 forced")  # B: right on q1 only
    assert (page.input_value("#f-model"), page.input_value("#f-mode"), page.input_value("#f-budget")) == (
        "m/B",
        "elastic",
        "4+40",
    )
    assert set(column_texts(page, "model")) == {"m/B"}


def line_colors(page, plot: str) -> list[tuple]:
    """The colours Plotly gave each line of ``plot``, as (r, g, b)."""
    hexes = page.evaluate(f"() => document.getElementById({plot!r})._fullData.map(t => t.line.color)")
    return [
        tuple(int(h[i : i + 2], 16) for i in (1, 3, 5))
        if h.startswith("#")
        else tuple(int(float(v)) for v in h[h.index("(") + 1 : -1].split(",")[:3])
        for h in hexes
    ]


def drawn_lines(page, plot: str) -> int:
    """How many of ``plot``'s line colours are on its screenshot (each on 0.05% of the pixels or more)."""
    counts, size = pixels(page.locator(f"#{plot}").screenshot())
    return sum(share(counts, size, color, tolerance=12) > 0.0002 for color in set(line_colors(page, plot)))


def color_at_point(page, plot: str, trace: int, point: int) -> set[tuple]:
    """The colours of the screenshot's 7×7 pixels around where ``plot`` should draw that data point."""
    import io

    from PIL import Image

    x, y = (
        page.evaluate(f"""() => {{ const gd = document.getElementById({plot!r}), l = gd._fullLayout, t = gd.data[{trace}];
        return [l.xaxis._offset + l.xaxis.d2p(t.x[{point}]), l.yaxis._offset + l.yaxis.d2p(t.y[{point}])]; }}""")
    )
    image = Image.open(io.BytesIO(page.locator(f"#{plot}").screenshot())).convert("RGB")
    return {image.getpixel((round(x) + dx, round(y) + dy)) for dx in range(-3, 4) for dy in range(-3, 4)}


def test_the_curves_chart_is_drawn(page):
    # 6 lines, of which 3 lie on others (the eval run repeats the sweep's A; every truncate line is at 0)
    assert drawn_lines(page, "curves") >= 3
    names = [t["name"] for t in traces(page, "curves")]
    b = names.index("sweep · m/B · toy · elastic")
    assert line_colors(page, "curves")[b] in color_at_point(
        page, "curves", b, 1
    )  # B's point at 33% is where it belongs


def test_the_diff_keeps_the_samples_one_side_got_right_and_opens_them(page, runs):
    from playwright.sync_api import expect

    page.click("button[data-tab=compare]")
    page.wait_for_selector("#tab-compare[data-loaded]")

    def run_of(side, text):
        return page.locator(f"#{side}-run option", has_text=text).get_attribute("value")

    picks = [
        ("#left-run", run_of("left", "sweep (sweep)")),
        ("#left-model", "m/B"),
        ("#right-run", run_of("right", "m--A")),
    ]
    picks += [
        (f"#{side}-{name}", value)
        for side in ("left", "right")
        for name, value in (("mode", "elastic"), ("budget", "4+40"))
    ]
    for control, value in picks:  # one after another, without waiting for what each choice loads
        page.select_option(control, value)
    settled(page)
    for control, value in picks:
        expect(page.locator(control)).to_have_value(value)
    diff = page.locator("#diff-table tbody tr")
    expect(diff).to_have_count(6)  # 3 problems × 2 samples, keyed by problem and sample
    expect(page.locator("#diff-table tbody tr.left-only")).to_have_count(2)  # q1: B right, A wrong
    expect(page.locator("#diff-table tbody tr.right-only")).to_have_count(4)  # q0, q2: A right, B wrong
    counts, size = pixels(page.locator("#diff-table").screenshot())
    assert share(counts, size, LEFT_ONLY) > 0.02 and share(counts, size, RIGHT_ONLY) > 0.02  # both kinds coloured
    page.select_option("#d-filter", "left")  # B right on q1, A wrong there
    expect(diff).to_have_count(2)
    expect(page.locator("#diff-table tbody tr td:nth-child(2)")).to_have_text(["q1", "q1"])
    counts, size = pixels(page.locator("#diff-table").screenshot())
    assert share(counts, size, LEFT_ONLY) > 0.02 and share(counts, size, RIGHT_ONLY) == 0
    page.select_option("#d-filter", "right")  # A right on q0 and q2, B wrong
    expect(page.locator("#diff-table tbody tr td:nth-child(2)")).to_have_text(["q0", "q0", "q2", "q2"])
    page.click("#diff-table tbody tr >> nth=2")
    expect(page.locator("#tab-compare")).to_have_attribute("data-loaded", "toy/q2")
    expect(page.locator("#right-samples .sample.right")).to_have_count(2)
    expect(page.locator("#left-samples .sample.wrong")).to_have_count(2)
    assert "show=right" in page.url and "problem=q2" in page.url


def settled(page) -> None:
    """Wait until no load of the page is in flight (the page names them in body[data-loading])."""
    page.wait_for_function("() => document.body.dataset.loading === undefined")


class Held:
    """Replies held back: the requests whose URL ``wanted`` accepts wait until ``release`` lets them go on."""

    def __init__(self, page, wanted):
        self.page, self.routes, self.seen = page, [], []
        page.route(lambda url: wanted(url), self._hold)

    def _hold(self, route):
        self.seen.append(route.request.url)
        self.routes.append(route)

    def wait(self, count=1) -> None:
        for _ in range(600):
            if len(self.seen) >= count:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"no request was held: {self.seen}")

    def release(self) -> None:
        """Let the held requests go on, and return once their replies are in and the page had time to use them."""
        from playwright.sync_api import Error

        for route in self.routes:
            try:
                route.continue_()
                reply = route.request.response()  # None where the page aborted it (a newer load superseded it)
                if reply is not None:
                    reply.finished()
            except Error:  # aborted before it went on
                pass
        self.routes = []
        self.page.evaluate("() => new Promise(done => setTimeout(done, 200))")  # the page's tasks after the reply


def query_of(url: str) -> dict:
    from urllib.parse import parse_qs, urlsplit

    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def test_a_late_list_reply_never_sets_back_the_diff_or_the_problem_chosen_meanwhile(page, runs):
    """The right side moves to a run whose list comes back late; the user picks a problem meanwhile. When the
    list comes, the diff is of the sides chosen and the problem stays the one the user picked."""
    from playwright.sync_api import expect

    page.click("button[data-tab=compare]")
    page.wait_for_selector("#tab-compare[data-loaded]")
    settled(page)

    def run_of(side, text):
        return page.locator(f"#{side}-run option", has_text=text).get_attribute("value")

    sweep_id, eval_id = run_of("left", "sweep (sweep)"), run_of("right", "m--A")
    page.select_option("#left-model", "m/B")
    for side in ("left", "right"):
        page.select_option(f"#{side}-mode", "elastic")
        page.select_option(f"#{side}-budget", "4+40")
    settled(page)
    expect(page.locator("#diff-table tbody tr.same")).to_have_count(6)  # m/B on both sides: every sample the same
    held = Held(page, lambda url: "/api/list" in url and query_of(url).get("run") == eval_id)
    page.select_option("#right-run", eval_id)  # its list is held back
    page.select_option("#right-mode", "elastic")
    page.select_option("#right-budget", "4+40")
    held.wait()
    page.select_option("#c-problem", "q2")  # chosen while the list is out
    expect(page.locator("#tab-compare")).to_have_attribute("data-loaded", "toy/q2")
    held.release()
    settled(page)
    expect(page.locator("#c-problem")).to_have_value("q2")
    expect(page.locator("#right-run")).to_have_value(eval_id)
    expect(page.locator("#diff-table tbody tr")).to_have_count(6)
    expect(page.locator("#diff-table tbody tr.left-only")).to_have_count(2)  # the diff of B against A, not a stale one
    expect(page.locator("#diff-table tbody tr.right-only")).to_have_count(4)
    expect(page.locator("#right-samples .sample strong")).to_contain_text(
        ["toy q2 · sample 0 · m/A", "toy q2 · sample 1 · m/A"]
    )
    link = query_of(page.url.replace("#compare?", "?"))
    assert (link["problem"], link["right_run"], link["left_model"]) == ("q2", eval_id, "m/B")
    assert sweep_id != eval_id


def test_a_late_sample_reply_never_replaces_the_sample_clicked_after_it(page, runs):
    from playwright.sync_api import expect

    open_samples_of_the_eval_run(page)
    choose(page, "#f-mode", "elastic")
    choose(page, "#f-budget", "8+40")
    held = Held(page, lambda url: "/api/samples" in url and query_of(url).get("sample_index") == "0")
    page.click("#sample-table tbody tr >> nth=0")  # q0, sample 0: its reply is held back
    held.wait()
    page.click("#sample-table tbody tr >> nth=1")  # q0, sample 1
    card = page.locator("#sample-detail .sample strong")
    expect(card).to_contain_text("toy q0 · sample 1 ·")
    held.release()
    settled(page)
    expect(card).to_have_count(1)
    expect(card).to_contain_text("toy q0 · sample 1 ·")
    expect(page.locator("#sample-table tbody tr.selected td:nth-child(4)")).to_have_text("1")
    assert query_of(page.url.replace("#samples?", "?"))["sample"] == page.get_attribute("#sample-detail", "data-shown")


def test_a_links_smoothing_never_overrides_a_choice_made_while_the_metrics_load(browser, url):
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        held = Held(page, lambda address: "/api/metrics" in address)
        page.goto(f"{url}#training?smooth=0.5")
        held.wait()
        assert page.input_value("#t-smooth") == "0.5"  # the link's value, until the user moves it
        page.fill("#t-smooth", "0.2")
        held.release()
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        page.wait_for_function("() => document.getElementById('training-plots').dataset.drawn === '0.2/false'")
        assert page.input_value("#t-smooth") == "0.2" and "smooth=0.2" in page.url
    finally:
        page.close()
    assert errors == []


def test_training_charts_smooth_and_switch_to_a_log_scale(page, runs):
    page.click("button[data-tab=training]")
    page.wait_for_selector("#metric-kl .main-svg")
    metrics = pd.read_parquet(
        runs / "train" / "metrics.parquet"
    )  # kl moves between the two steps (flat metrics are not drawn)
    linear = page.locator("#metric-kl").screenshot()
    page.fill("#t-smooth", "0.5")
    page.wait_for_function("() => document.getElementById('training-plots').dataset.drawn === '0.5/false'")
    smoothed, raw = traces(page, "metric-kl")
    first, second = metrics["kl"].tolist()
    assert smoothed["y"] == pytest.approx(
        [first, 0.5 * first + 0.5 * second]
    )  # EMA by hand: s1 = y1, s2 = .5 s1 + .5 y2
    assert raw["y"] == pytest.approx([first, second])
    page.check("#t-log")
    page.wait_for_function("() => document.getElementById('training-plots').dataset.drawn === '0.5/true'")
    assert page.evaluate("() => document.getElementById('metric-kl').layout.yaxis.type") == "log"
    assert page.locator("#metric-kl").screenshot() != linear  # the picture changed, not only the data
    assert "smooth=0.5" in page.url and "log=1" in page.url


def test_a_bundle_opens_from_disk_without_e1(browser, runs, tmp_path):
    """`e1 view ... --bundle OUT`, then OUT/index.html from file://: the curves, the list, a sample's texts
    and the diff, with every request the page makes answered from the folder."""
    from playwright.sync_api import expect

    out = tmp_path / "share"
    made = subprocess.run(
        [sys.executable, "-m", "e1", "view", "sweep", "sweep/models/m--A", "train", "--bundle", str(out)],
        check=False,
        cwd=runs,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    assert f"open {out / 'index.html'}" in made.stdout
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert {p.split("/")[0] for p in files} == {"index.html", "e1-bundle.json", "static", "data"}
    assert not [p for p in files if p.endswith(".parquet") or p.endswith(".json") and p != "e1-bundle.json"]

    page = browser.new_page()
    errors, requests = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    try:
        page.goto((out / "index.html").as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        expect(page.locator("#runs-line")).to_contain_text("3 runs")
        assert "sweep · m/B · toy · elastic" in [t["name"] for t in traces(page, "curves")]
        assert drawn_lines(page, "curves") >= 3
        open_samples_of_the_eval_run(page)
        expect(page.locator("#sample-count")).to_have_text("36 samples · 12 correct · 18 forced")
        choose(page, "#f-mode", "elastic")
        choose(page, "#f-budget", "8+40")
        page.click("#sample-table tbody tr >> nth=0")
        rows = pd.read_parquet(runs / "sweep" / "models" / "m--A" / "samples.parquet").set_index(
            ["problem_id", "sample_index", "mode", "think_budget"]
        )
        card = page.locator("#sample-detail .sample")
        expect(card.locator("pre.think-text")).to_have_text(rows.loc[("q0", 0, "elastic", 8)]["think_text"])
        expect(card.locator(".cut.forced")).to_have_count(1)
        expect(page.locator("#sample-detail .problem-text")).to_have_text(rows.loc[("q0", 0, "elastic", 8)]["prompt"])
        page.click("button[data-tab=compare]")
        page.wait_for_selector("#tab-compare[data-loaded]")
        expect(page.locator("#diff-table tbody tr")).not_to_have_count(0)
        page.click("button[data-tab=training]")
        page.wait_for_selector("#metric-kl .main-svg")
    finally:
        page.close()
    assert errors == []
    assert requests and all(r.startswith("file://") for r in requests)  # nothing asked of a server

    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    quiet = type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda self, *args: None})
    static = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(quiet, directory=str(out)))  # any static server
    threading.Thread(target=static.serve_forever, daemon=True).start()
    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{static.server_address[1]}/index.html#samples")
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        expect(page.locator("#tab-samples")).to_be_visible()
        expect(page.locator("#sample-table tbody tr")).not_to_have_count(0)
    finally:
        page.close()
        static.shutdown()
