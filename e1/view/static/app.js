// e1 view: the page. Data comes from /api/* (see e1/view/routes.py); charts are Plotly.
// Every text from a run is put in the page as text (textContent), never parsed as HTML.
"use strict";

const state = { runs: [], points: [], names: {}, lists: {}, page: 0, pageSize: 50, sort: null, selected: null, shown: [],
                rendered: 0, wantedProblem: undefined, metricRuns: null, tab: null };
const $ = (id) => document.getElementById(id);
const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
const shortModel = (m) => state.names[m] ?? String(m || "");

// The shortest tail of each model path that tells it from the others: base/checkpoints/step_4 and
// e1/checkpoints/step_2 stay apart, Salesforce/E1-Math-1.5B stays whole.
function modelNames(models) {
  const parts = models.map((m) => String(m).split("/").filter(Boolean));
  const names = {};
  for (let k = 1; ; k++) {
    const tails = parts.map((p) => p.slice(-Math.max(k, 2)).join("/"));
    if (new Set(tails).size === new Set(models).size || parts.every((p) => p.length <= k)) {
      models.forEach((m, i) => { names[m] = tails[i]; });
      return names;
    }
  }
}
const budgetLabel = (t, s) => `t=${t} s=${s}`;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function api(path, params = {}, signal = undefined) {
  if (window.e1Bundle) return bundleApi(path, params);
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  const response = await fetch(`/api/${path}?${query}`, { signal });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ---- loads: every load of a view goes through load(lane, work). A newer load of the same lane (the list, a
// sample's detail, the diff, one problem side by side) supersedes the older one: its requests are aborted and
// whatever it awaits is dropped when it comes back, so a late reply never overwrites what a newer choice shows or
// chose. body[data-loading] names the lanes in flight (tests wait for it to clear).
class Superseded extends Error {}
const lanes = new Map();

function load(lane, work) {
  lanes.get(lane)?.abort();
  const ticket = new AbortController();
  lanes.set(lane, ticket);
  const current = () => lanes.get(lane) === ticket;
  const wait = (promise) => promise.then((value) => {
    if (!current()) throw new Superseded(lane);
    return value;
  }, (err) => { throw current() ? err : new Superseded(lane); });
  const get = (path, params) => wait(api(path, params, ticket.signal));
  showLoading();
  return Promise.resolve().then(() => work({ get, wait })).finally(() => {
    if (current()) lanes.delete(lane);
    showLoading();
  }).catch((err) => {
    if (!(err instanceof Superseded)) throw err;
  });
}

function showLoading() {
  if (lanes.size) document.body.dataset.loading = [...lanes.keys()].join(" ");
  else delete document.body.dataset.loading;
}

// A user's choice runs its handler at once (its load starts before the event returns); an error is shown, never
// left unhandled.
function on(node, event, handler) {
  node[`on${event}`] = (...args) => {
    try {
      return Promise.resolve(handler(...args)).catch(showError);
    } catch (err) {
      return showError(err);
    }
  };
}

// A sample kept by a filter: each field given ("" or absent: any) equals the row's, as the server's filter does.
const FILTER_COLUMNS = { model: "model", dataset: "dataset", mode: "mode", think: "think_budget", solve: "solve_budget",
                         correct: "correct", forced: "forced", problem_id: "problem_id", sample_index: "sample_index" };
function matches(row, filter) {
  return Object.entries(FILTER_COLUMNS).every(([name, column]) => {
    const wanted = filter[name];
    return wanted === "" || wanted === null || wanted === undefined || String(row[column]) === String(wanted);
  });
}

// The same answers from a bundle (e1 view --bundle): data/index.js, then one data/r<run>/p<k>.js per problem opened.
async function bundleApi(path, params) {
  const index = await e1Bundle.get("index");
  if (path === "runs" || path === "curves" || path === "metrics") return index[path];
  if (path === "list") return index.lists[params.run];
  const k = (index.problems[params.run] || {})[`${params.dataset}\u0000${params.problem_id}`];
  if (k === undefined) throw new Error("this problem is not in the bundle");
  const found = await e1Bundle.get(`r${Number(params.run)}/p${Number(k)}`);
  const { run, text, ...where } = params;
  if (path === "samples") return { rows: found.rows.filter((row) => matches(row, where)) };
  const cell = where, problem = { dataset: where.dataset, problem_id: where.problem_id };
  for (const chosen of [cell, problem]) {  // the cell's prompt, else any of the problem's, as the server does
    const stored = found.rows.find((row) => matches(row, chosen) && row.prompt);
    if (stored) return { text: stored.prompt, source: "prompt" };
  }
  return found.problem;
}

// ---- deep links: the hash names the tab and its choices (#samples?run=1&mode=elastic&q=...) ----
const TABS = ["curves", "samples", "compare", "training"];
const LINK_MAX = 4000, VALUE_MAX = 500;
function readLink() {
  const hash = location.hash.slice(1, LINK_MAX);
  const [tab, query = ""] = hash.split(/\?(.*)/s);
  const params = {};
  for (const [key, value] of new URLSearchParams(query)) params[key] = value.slice(0, VALUE_MAX);
  return TABS.includes(tab) ? { tab, params } : { tab: null, params: {} };
}
function writeLink(tab, params) {
  if (state.tab !== tab) return;  // a load that ends after the user moved to another tab
  const kept = Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined && v !== false);
  const hash = `#${tab}` + (kept.length ? `?${new URLSearchParams(kept)}` : "");
  if (location.hash !== hash) history.replaceState(null, "", hash);
}
function choose(select, value) {  // a value from a link is taken only when it is one of the select's options
  if (value === undefined || ![...select.options].some((option) => option.value === value)) return false;
  select.value = value;
  return true;
}

function fill(select, values, labels) {
  const previous = select.value;
  select.replaceChildren(...values.map((value, i) => el("option", { value }, labels ? labels[i] : value)));
  if (values.includes(previous)) select.value = previous;
}

function showError(err) {
  $("error").hidden = false;
  $("error").textContent = `error: ${err.message || err}`;
}

// ---- tabs ----
function showTab(name, link = {}) {
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const section of document.querySelectorAll("main section")) section.hidden = section.id !== `tab-${name}`;
  state.tab = name;
  const open = { curves: openCurves, samples: openSamples, compare: openCompare, training: openTraining }[name];
  return Promise.resolve(open(link)).then(() => {
    for (const plot of document.querySelectorAll(`#tab-${name} .js-plotly-plot`)) Plotly.Plots.resize(plot);
  }).catch(showError);
}

const sampleRuns = () => state.runs.filter((run) => run.facets.samples > 0);
const runById = (id) => state.runs.find((run) => String(run.id) === String(id));
const listOf = (runId) => (state.lists[runId] ??= api("list", { run: runId }));

async function main() {
  state.runs = await api("runs");
  state.points = await api("curves");
  const models = [...new Set([...state.runs.flatMap((run) => run.facets.models), ...state.points.map((p) => p.model)])];
  state.names = modelNames(models.filter(Boolean));
  const kinds = state.runs.map((run) => `${run.name} (${run.kind}${run.error ? ", unreadable" : ""})`).join(", ");
  $("runs-line").textContent = `${state.runs.length} run${state.runs.length === 1 ? "" : "s"}: ${kinds}`;
  const bad = state.runs.filter((run) => run.error);  // shown as bad; the others load as usual
  $("bad-runs").hidden = bad.length === 0;
  $("bad-runs").textContent = bad.map((run) => `cannot read ${run.name}: ${run.error}`).join("\n");
  const has = { curves: state.points.length > 0, samples: sampleRuns().length > 0,
                compare: sampleRuns().length > 0, training: state.runs.some((run) => run.metrics) };
  for (const button of document.querySelectorAll("#tabs button")) {
    button.hidden = !has[button.dataset.tab];
    on(button, "click", () => showTab(button.dataset.tab));
  }
  const link = readLink();
  const first = has[link.tab] ? link.tab : ["curves", "samples", "training"].find((name) => has[name]) || "samples";
  await showTab(first, link.tab === first ? link.params : {});
  window.addEventListener("hashchange", () => {  // a link pasted or edited by hand
    const next = readLink();
    if (next.tab && has[next.tab]) showTab(next.tab, next.params);
  });
  document.body.dataset.ready = "1";
}

// ---- curves ----
function openCurves(link = {}) {
  if (!$("curve-dataset").options.length) {
    const datasets = [...new Set(state.points.map((p) => p.dataset))].sort();
    fill($("curve-dataset"), ["", ...datasets], ["all", ...datasets]);
    for (const id of ["curve-x", "curve-dataset"]) on($(id), "change", drawCurves);
  }
  choose($("curve-x"), link.x);
  choose($("curve-dataset"), link.dataset);
  return drawCurves();
}

async function drawCurves() {
  const xKey = $("curve-x").value, dataset = $("curve-dataset").value;
  writeLink("curves", { x: xKey === "mean_total_tokens" ? "" : xKey, dataset });
  const manyRuns = new Set(state.points.map((p) => p.run)).size > 1;
  const lines = new Map();
  for (const p of state.points) {
    if (dataset && p.dataset !== dataset) continue;
    const key = [p.run, p.model, p.dataset, p.mode].join("\u0000");
    if (!lines.has(key)) lines.set(key, []);
    lines.get(key).push(p);
  }
  const traces = [...lines.values()].map((points) => curveTrace(points, xKey, manyRuns));
  const layout = {
    margin: { t: 20, r: 20 }, hovermode: "closest", legend: { orientation: "h", y: -0.18 },
    xaxis: { title: { text: $("curve-x").selectedOptions[0].text }, type: xKey === "mean_total_tokens" ? "log" : "linear" },
    yaxis: { title: { text: "accuracy (%)" }, rangemode: "tozero" },
  };
  const plot = await Plotly.react("curves", traces, layout, { responsive: true, displaylogo: false });
  if (!plot.dataset.clicks) {  // a point opens the samples of its cell
    plot.dataset.clicks = "1";
    plot.on("plotly_click", (event) => {
      const point = event.points[0], p = point.data.cells[point.pointNumber];
      showTab("samples", { run: String(p.run_id), model: p.model, dataset: p.dataset, mode: p.mode,
                           budget: `${p.think_budget}+${p.solve_budget}` });
    });
  }
}

function curveTrace(points, xKey, manyRuns) {
  points.sort((a, b) => a[xKey] - b[xKey] || a.think_budget - b.think_budget);
  const p0 = points[0];
  const name = [manyRuns ? p0.run : null, shortModel(p0.model) || null, p0.dataset, p0.mode].filter(Boolean).join(" · ");
  const gap = (p, side) => (p[side] === null || p[side] === undefined ? 0 : 100 * Math.abs(p[side] - p.accuracy));
  return {
    type: "scatter", mode: "lines+markers", name, cells: points, x: points.map((p) => p[xKey]), y: points.map((p) => 100 * p.accuracy),
    error_y: { type: "data", symmetric: false, thickness: 1, width: 3,
               array: points.map((p) => gap(p, "accuracy_ci_high")), arrayminus: points.map((p) => gap(p, "accuracy_ci_low")) },
    customdata: points.map((p) => [p.run, p.model, p.dataset, p.mode, budgetLabel(p.think_budget, p.solve_budget),
                                   p.samples_per_problem, p.problems, pct(p.accuracy_ci_low), pct(p.accuracy_ci_high),
                                   p.mean_total_tokens, pct(p.forced_rate), pct(p.think_rate), pct(p.empty_think_rate),
                                   pct(p.prefilled_rate), pct(p.unopened_rate)]),
    hovertemplate: "<b>%{customdata[2]}</b> · %{customdata[3]} · %{customdata[4]}<br>run %{customdata[0]}<br>"
      + "model %{customdata[1]}<br>accuracy %{y:.1f}% (95% CI %{customdata[7]} to %{customdata[8]})<br>"
      + "n = %{customdata[5]} samples × %{customdata[6]} problems<br>mean tokens %{customdata[9]:.1f}, "
      + "forced %{customdata[10]}<br>thought %{customdata[11]} · empty %{customdata[12]} · "
      + "prefilled %{customdata[13]} · unopened %{customdata[14]}<extra></extra>",
  };
}

// ---- one sample, as the browser and the side-by-side view show it ----
function cutMarker(row) {
  if (row.forced) {
    const exit = String(row.mode).includes("exit=") ? " (after the mode's exit text)" : "";
    return el("div", { class: "cut forced", title: "e1 inserted the end-of-thinking marker here" },
      `✂ </think> forced by e1 here${exit}: thinking reached t = ${row.think_budget} without ending`);
  }
  if (row.think_end === "prefilled") return el("div", { class: "cut natural" }, "thinking closed in the prompt: none was written");
  if (row.think_end === "unopened") return el("div", { class: "cut open" }, `thinking never opened (finish: ${row.finish_reason})`);
  if (row.solve_tokens > 0 || row.solution_text) return el("div", { class: "cut natural" }, "</think> written by the model");
  return el("div", { class: "cut open" }, `thinking never ended (finish: ${row.finish_reason})`);
}

function sampleCard(row) {
  const head = `${row.dataset} ${row.problem_id} · sample ${row.sample_index} · ${shortModel(row.model)} · ${row.mode} · `
    + `${budgetLabel(row.think_budget, row.solve_budget)} · ${row.correct ? "correct" : "wrong"}`;
  const answers = el("table", { class: "answers" },
    el("tr", {}, el("td", {}, "extracted answer"), el("td", { class: "extracted" }, row.extracted_answer ?? "(none)")),
    el("tr", {}, el("td", {}, "reference (gold)"), el("td", { class: "gold" }, row.gold ?? "")),
    el("tr", {}, el("td", {}, "reward"), el("td", {}, row.reward)));
  if (row.tests_passed !== null && row.tests_passed !== undefined) {
    answers.append(el("tr", {}, el("td", {}, "tests passed"), el("td", { class: "tests" }, pct(row.tests_passed))),
      el("tr", {}, el("td", {}, "first failure"), el("td", { class: "failure" }, row.first_failure ?? "none")));
  }
  return el("article", { class: `sample ${row.correct ? "right" : "wrong"}`, "data-problem": row.problem_id,
                         "data-sample": row.sample_index },
    el("strong", {}, head),
    el("h4", {}, `thinking: ${row.think_tokens} tokens`), el("pre", { class: "think-text" }, row.think_text ?? ""),
    cutMarker(row),
    el("h4", {}, `solution: ${row.solve_tokens} tokens (finish: ${row.finish_reason})`),
    el("pre", { class: "solution-text" }, row.solution_text ?? ""), answers);
}

async function problemBlock(get, runId, dataset, problemId, cell = {}) {
  const found = await get("problem", { run: runId, dataset, problem_id: problemId, ...cell });
  return el("div", { class: "problem" }, el("div", { class: "source" }, found.source),
    found.text === null ? null : el("pre", { class: "problem-text" }, found.text));
}

// ---- sample browser: the run's list, filtered, searched and sorted here; the detail beside it ----
const SORT_KEYS = ["dataset", "problem_id", "problem", "sample_index", "model", "mode", "think_budget", "solve_budget",
                   "extracted_answer", "gold", "think_tokens", "solve_tokens", "forced", "correct"];
const SEARCH_MAX = 200;
const sampleKey = (row) => JSON.stringify([row.dataset, row.problem_id, row.sample_index, row.model, row.mode,
                                           row.think_budget, row.solve_budget]);

async function openSamples(link = {}) {
  if (!$("f-run").options.length) {
    const runs = sampleRuns();
    fill($("f-run"), runs.map((run) => String(run.id)), runs.map((run) => `${run.name} (${run.kind})`));
    on($("f-run"), "change", () => { fillFacets(); state.selected = null; return renderList(0); });
    for (const id of ["f-model", "f-dataset", "f-mode", "f-budget", "f-correct", "f-forced"]) on($(id), "change", () => renderList(0));
    on($("f-search"), "input", () => renderList(0));
    on($("prev"), "click", () => renderList(state.page - 1));
    on($("next"), "click", () => renderList(state.page + 1));
    for (const th of document.querySelectorAll("#sample-table th[data-key]")) on(th, "click", () => sortBy(th.dataset.key));
    fillFacets();
  }
  if (choose($("f-run"), link.run)) fillFacets();
  for (const name of ["model", "dataset", "mode", "budget", "correct", "forced"]) {
    if (link.run !== undefined || link[name] !== undefined) $(`f-${name}`).value = "";
    choose($(`f-${name}`), link[name]);
  }
  if (link.q !== undefined) $("f-search").value = link.q.slice(0, SEARCH_MAX);
  if (link.sort !== undefined) state.sort = SORT_KEYS.includes(link.sort) ? { key: link.sort, desc: link.desc === "1" } : null;
  if (link.sample !== undefined || link.run !== undefined) state.selected = link.sample ?? null;
  const page = /^[0-9]{1,6}$/.test(link.page ?? "") ? Number(link.page) : state.page;
  if (!(await renderList(page))) return;  // a newer choice reloaded the list meanwhile
  const chosen = state.shown.find((row) => sampleKey(row) === state.selected);  // the link's, or one clicked since
  if (chosen) await showSample($("f-run").value, chosen);
}

function fillFacets() {
  const facets = runById($("f-run").value).facets;
  fill($("f-model"), ["", ...facets.models], ["all", ...facets.models.map(shortModel)]);
  fill($("f-dataset"), ["", ...facets.datasets], ["all", ...facets.datasets]);
  fill($("f-mode"), ["", ...facets.modes], ["all", ...facets.modes]);
  fill($("f-budget"), ["", ...facets.budgets.map(([t, s]) => `${t}+${s}`)], ["all", ...facets.budgets.map(([t, s]) => budgetLabel(t, s))]);
}

function browserFilter() {
  const [think, solve] = $("f-budget").value ? $("f-budget").value.split("+") : ["", ""];
  const run = runById($("f-run").value);
  return { run: $("f-run").value, model: run.kind === "sweep" ? $("f-model").value : "", dataset: $("f-dataset").value,
           mode: $("f-mode").value, think, solve, correct: $("f-correct").value, forced: $("f-forced").value };
}

// Plain text, case-insensitive, over the problem, the model's answer and the gold: never a pattern.
function searched(rows, text) {
  const needle = text.slice(0, SEARCH_MAX).toLowerCase();
  if (!needle) return rows;
  return rows.filter((row) => [row.problem, row.extracted_answer, row.gold, row.problem_id]
    .some((value) => value !== null && value !== undefined && String(value).toLowerCase().includes(needle)));
}

function compareValues(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;  // missing values last, either way
  if (b === null || b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "boolean" && typeof b === "boolean") return Number(a) - Number(b);
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

function sortBy(key) {
  state.sort = state.sort?.key === key ? (state.sort.desc ? null : { key, desc: true }) : { key, desc: false };
  return renderList(0);
}

function renderList(page) {
  return load("list", async ({ wait }) => showList(page, await wait(listOf(browserFilter().run))));
}

function showList(page, body) {
  const where = browserFilter();
  let rows = searched(body.rows.filter((row) => matches(row, where)), $("f-search").value);
  if (state.sort) {
    const { key, desc } = state.sort;
    const missing = (row) => row[key] === null || row[key] === undefined;
    rows = rows.map((row, i) => [row, i]).sort(([a, i], [b, j]) =>
      (missing(a) || missing(b) ? compareValues(a[key], b[key]) : (desc ? -1 : 1) * compareValues(a[key], b[key])) || i - j)
      .map(([row]) => row);
  }
  for (const th of document.querySelectorAll("#sample-table th[data-key]")) {
    if (state.sort?.key === th.dataset.key) th.setAttribute("aria-sort", state.sort.desc ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
  const pages = Math.max(1, Math.ceil(rows.length / state.pageSize));
  state.page = Math.min(Math.max(0, page), pages - 1);
  state.shown = rows.slice(state.page * state.pageSize, (state.page + 1) * state.pageSize);
  const count = $("sample-count");
  count.textContent = `${rows.length} samples · ${rows.filter((row) => row.correct).length} correct · `
    + `${rows.filter((row) => row.forced).length} forced` + (body.truncated ? ` (the first ${body.rows.length} of ${body.total} listed)` : "");
  count.dataset.total = rows.length;
  $("page-info").textContent = `page ${state.page + 1} of ${pages}`;
  $("prev").disabled = state.page === 0;
  $("next").disabled = state.page + 1 >= pages;
  $("sample-table").tBodies[0].replaceChildren(...state.shown.map((row) => sampleRow(row, where.run)));
  $("sample-table").dataset.loaded = String(++state.rendered);
  linkSamples();
  return true;
}

function linkSamples() {
  const { run, think, solve, ...where } = browserFilter();
  writeLink("samples", { run, ...where, budget: $("f-budget").value, q: $("f-search").value, sort: state.sort?.key,
                         desc: state.sort?.desc ? "1" : "", page: state.page ? String(state.page) : "",
                         sample: state.selected });
}

function sampleRow(row, runId) {
  const cells = [row.dataset, row.problem_id, row.problem ?? "", row.sample_index, shortModel(row.model), row.mode,
                 row.think_budget, row.solve_budget, row.extracted_answer ?? "", row.gold ?? "", row.think_tokens,
                 row.solve_tokens, row.forced ? "yes" : "", row.correct ? "yes" : "no"];
  const preview = new Set([2, 8, 9]);
  const tr = el("tr", {}, ...cells.map((cell, i) => el("td", preview.has(i) ? { class: "preview", title: String(cell) } : {}, cell)));
  if (sampleKey(row) === state.selected) tr.classList.add("selected");
  on(tr, "click", () => {
    for (const other of tr.parentNode.children) other.classList.remove("selected");
    tr.classList.add("selected");
    state.selected = sampleKey(row);
    linkSamples();
    return showSample(runId, row);
  });
  return tr;
}

function showSample(runId, row) {
  const key = { run: runId, model: row.model, dataset: row.dataset, problem_id: row.problem_id, mode: row.mode,
                think: row.think_budget, solve: row.solve_budget, sample_index: row.sample_index, text: "true" };
  if (runById(runId).kind !== "sweep") key.model = "";
  return load("sample", async ({ get }) => {
    const [full, problem] = await Promise.all([get("samples", key), problemBlock(get, runId, row.dataset, row.problem_id,
      { model: key.model, mode: row.mode, think: row.think_budget, solve: row.solve_budget })]);
    $("sample-detail").replaceChildren(problem, ...full.rows.map(sampleCard));
    $("sample-detail").dataset.shown = sampleKey(row);
  });
}

// ---- side by side, and the diff of the two sides sample by sample ----
function sideControls(side, choice) {
  const box = $(`${side}-controls`);
  const runs = sampleRuns();
  const make = (name) => el("select", { id: `${side}-${name}` });
  box.replaceChildren(el("h3", {}, side === "left" ? "left" : "right"),
    ...["run", "model", "mode", "budget"].map((name) => el("label", {}, `${name} `, make(name))));
  fill($(`${side}-run`), runs.map((run) => String(run.id)), runs.map((run) => `${run.name} (${run.kind})`));
  $(`${side}-run`).value = String(choice.run);
  const refill = () => {
    const facets = runById($(`${side}-run`).value).facets;
    fill($(`${side}-model`), facets.models, facets.models.map(shortModel));
    fill($(`${side}-mode`), facets.modes);
    fill($(`${side}-budget`), facets.budgets.map(([t, s]) => `${t}+${s}`), facets.budgets.map(([t, s]) => budgetLabel(t, s)));
  };
  refill();
  for (const name of ["model", "mode", "budget"]) choose($(`${side}-${name}`), choice[name]);
  on($(`${side}-run`), "change", () => { refill(); return loadProblems(); });
  for (const name of ["model", "mode", "budget"]) on($(`${side}-${name}`), "change", () => loadProblems());
}

// First the two models of one sweep (base vs E1), else two modes of one run, else the next run.
function defaultSides() {
  const [a, b] = sampleRuns();
  const budgets = a.facets.budgets.map(([t, s]) => `${t}+${s}`);
  const left = { run: a.id, model: a.facets.models[0], mode: a.facets.modes[0], budget: budgets[Math.floor(budgets.length / 2)] };
  if (a.facets.models.length > 1) return [left, { ...left, model: a.facets.models[1] }];
  if (a.facets.modes.length > 1 || !b) return [left, { ...left, mode: a.facets.modes[1] ?? left.mode }];
  return [left, { ...left, run: b.id, model: b.facets.models[0] }];
}

function sideFilter(side) {
  const [think, solve] = ($(`${side}-budget`).value || "+").split("+");
  const run = runById($(`${side}-run`).value);
  return { run: String(run.id), model: run.kind === "sweep" ? $(`${side}-model`).value : "", mode: $(`${side}-mode`).value, think, solve };
}

function openCompare(link = {}) {
  const linked = (side) => ({ run: link[`${side}_run`], model: link[`${side}_model`], mode: link[`${side}_mode`],
                              budget: link[`${side}_budget`] });
  if (!$("left-controls").children.length) {
    const [left, right] = defaultSides();
    sideControls("left", left);
    sideControls("right", right);
    on($("c-dataset"), "change", () => loadProblems());
    on($("d-filter"), "change", () => loadProblems());
    on($("c-problem"), "change", () => pickProblem());
    const step = (delta) => {
      const select = $("c-problem");
      return pickProblem(select.options[Math.min(select.options.length - 1, Math.max(0, select.selectedIndex + delta))]?.value);
    };
    on($("c-prev"), "click", () => step(-1));
    on($("c-next"), "click", () => step(1));
  }
  state.wantedProblem = link.problem;  // chosen once the problem list is in, unless the user picks one first
  for (const side of ["left", "right"]) {
    const want = linked(side);
    if (want.run !== undefined && runById(want.run) && sampleRuns().includes(runById(want.run))) sideControls(side, want);
  }
  choose($("d-filter"), link.show);
  return loadProblems(link.dataset);
}

function pickProblem(problemId = $("c-problem").value) {  // the user's choice: no link's problem overrides it
  state.wantedProblem = undefined;
  choose($("c-problem"), problemId);
  return loadComparison();
}

const DIFFS = { left: (l, r) => l && !r, right: (l, r) => !l && r, differ: (l, r) => l !== r, both: (l, r) => l && r,
                neither: (l, r) => !l && !r };
const DIFF_SHOWN = 1000;

// The diff of the two sides and the problem list: a new choice of side, dataset or filter reloads them.
function loadProblems(wantedDataset = undefined) {
  const datasets = [...new Set(["left", "right"].flatMap((side) => runById($(`${side}-run`).value).facets.datasets))].sort();
  fill($("c-dataset"), datasets);
  choose($("c-dataset"), wantedDataset);
  linkCompare();
  const dataset = $("c-dataset").value;
  return load("diff", async ({ wait }) => {
    const [left, right] = await Promise.all(["left", "right"].map(async (side) => {
      const { run, ...where } = sideFilter(side);
      return (await wait(listOf(run))).rows.filter((row) => matches(row, { ...where, dataset }));
    }));
    showDiff(left, right);
    return loadComparison();
  });
}

function showDiff(left, right) {
  const rightBy = new Map(right.map((row) => [`${row.problem_id}\u0000${row.sample_index}`, row]));
  const keep = DIFFS[$("d-filter").value] ?? (() => true);
  const pairs = left.map((row) => [row, rightBy.get(`${row.problem_id}\u0000${row.sample_index}`)])
    .filter(([l, r]) => r !== undefined && keep(l.correct, r.correct));
  $("d-count").textContent = `${pairs.length} sample${pairs.length === 1 ? "" : "s"} in both`
    + (pairs.length > DIFF_SHOWN ? ` (the first ${DIFF_SHOWN} shown)` : "");
  $("diff-table").tBodies[0].replaceChildren(...pairs.slice(0, DIFF_SHOWN).map(([l, r]) => diffRow(l, r)));
  const ids = (rows) => [...new Set(rows.map((row) => String(row.problem_id)))];
  const shared = $("d-filter").value ? ids(pairs.map(([l]) => l)) : ids(left).filter((id) => ids(right).includes(id));
  fill($("c-problem"), shared.length || $("d-filter").value ? shared : [...new Set([...ids(left), ...ids(right)])]);
  choose($("c-problem"), state.wantedProblem);
}

function diffRow(left, right) {
  const mark = (correct) => (correct ? "right" : "wrong");
  const kind = left.correct && !right.correct ? "left-only" : !left.correct && right.correct ? "right-only" : "same";
  const tr = el("tr", { class: kind, "data-problem": left.problem_id },
    ...[left.dataset, left.problem_id, left.sample_index, left.extracted_answer ?? "", mark(left.correct),
        right.extracted_answer ?? "", mark(right.correct), left.gold ?? ""].map((cell) => el("td", {}, cell)));
  on(tr, "click", () => {
    for (const other of tr.parentNode.children) other.classList.remove("selected");
    tr.classList.add("selected");
    return pickProblem(String(left.problem_id));
  });
  return tr;
}

function loadComparison() {
  const dataset = $("c-dataset").value, problemId = $("c-problem").value;
  linkCompare();
  const filters = ["left", "right"].map(sideFilter);
  return load("problem", async ({ get }) => {
    if (!problemId) {
      $("tab-compare").dataset.loaded = `${dataset}/`;
      return;
    }
    const sides = await Promise.all(filters.map((filter) => get("samples", { ...filter, dataset, problem_id: problemId, text: "true" })));
    const { run: leftRun, ...leftCell } = filters[0];
    showComparison(dataset, problemId, sides, await problemBlock(get, leftRun, dataset, problemId, leftCell));
  });
}

function showComparison(dataset, problemId, sides, problem) {
  $("c-problem-text").replaceChildren(problem);
  ["left", "right"].forEach((side, i) => {
    const rows = sides[i].rows;
    $(`${side}-samples`).replaceChildren(el("p", { class: "count" }, `${rows.length} sample${rows.length === 1 ? "" : "s"}, `
      + `${rows.filter((row) => row.correct).length} correct`), ...rows.map(sampleCard));
  });
  $("tab-compare").dataset.loaded = `${dataset}/${problemId}`;
}

function linkCompare() {
  const link = { dataset: $("c-dataset").value, problem: $("c-problem").value, show: $("d-filter").value };
  for (const side of ["left", "right"]) {
    for (const name of ["run", "model", "mode", "budget"]) link[`${side}_${name}`] = $(`${side}-${name}`).value;
  }
  writeLink("compare", link);
}

// ---- training: metrics by step, smoothed (an exponential moving average) or on a log scale ----
function smoothed(values, weight) {
  let last = null;
  return values.map((value) => {
    if (value === null || value === undefined || !Number.isFinite(value)) return null;
    last = last === null ? value : weight * last + (1 - weight) * value;
    return last;
  });
}

function openTraining(link = {}) {
  const weight = Number(link.smooth);  // the link's choices first: a choice made while the metrics load stands
  if (link.smooth !== undefined && Number.isFinite(weight)) $("t-smooth").value = String(Math.min(0.95, Math.max(0, weight)));
  if (link.log !== undefined) $("t-log").checked = link.log === "1";
  on($("t-smooth"), "input", () => drawTraining());
  on($("t-log"), "change", () => drawTraining());
  if (state.metricRuns !== null) return drawTraining();
  return load("metrics", async ({ get }) => {
    state.metricRuns = await get("metrics");
    return drawTraining();
  });
}

async function drawTraining() {
  if (state.metricRuns === null) return;  // drawn once the metrics are in, with the choices made by then
  const runs = state.metricRuns, weight = Number($("t-smooth").value), log = $("t-log").checked;
  $("t-smooth-value").textContent = weight.toFixed(2);
  writeLink("training", { smooth: weight ? String(weight) : "", log: log ? "1" : "" });
  const measured = (column) => runs.some((run) => run.rows.some((row) => row[column] !== null && row[column] !== undefined));
  const values = (column) => runs.flatMap((run) => run.rows.map((row) => row[column])).filter((v) => v !== null && v !== undefined);
  // a metric with the same value at every step (two or more) is a flat line: named below the charts, not drawn
  const flat = (column) => { const seen = values(column); return seen.length > 1 && seen.every((v) => v === seen[0]); };
  const measuredColumns = [...new Set(runs.flatMap((run) => run.columns))].filter((column) => column !== "step" && measured(column));
  const flatColumns = measuredColumns.filter(flat);
  const columns = measuredColumns.filter((column) => !flatColumns.includes(column));
  const lastStep = Math.max(1, ...runs.flatMap((run) => run.rows.map((row) => row.step)));
  const phases = columns.filter((column) => column.endsWith("_s"));
  let box = $("training-plots").firstChild;
  if (!box) $("training-plots").replaceChildren(box = el("div", { class: "plots" }), el("p", { class: "note", id: "flat-metrics" }));
  $("flat-metrics").textContent =
    flatColumns.length ? `the same at every step (not drawn): ${flatColumns.map((c) => `${c} ${values(c)[0]}`).join(", ")}` : "";
  const charts = columns.filter((column) => !phases.includes(column)).map((column) => [column, [column]]);
  if (phases.length) charts.push(["seconds per phase", phases]);
  for (const [title, series] of charts) {
    const id = `metric-${title.replace(/\W+/g, "-")}`;
    let div = document.getElementById(id);
    if (!div) box.append(div = el("div", { class: "plot", id }));
    const traces = runs.flatMap((run) => series.filter((column) => run.columns.includes(column)).flatMap((column) => {
      const x = run.rows.map((row) => row.step), y = run.rows.map((row) => row[column]);
      const name = series.length > 1 ? (runs.length > 1 ? `${run.run} · ${column}` : column) : run.run;
      const line = { type: "scatter", mode: "lines+markers", x, y: weight ? smoothed(y, weight) : y, name, raw: y };
      return weight ? [line, { type: "scatter", mode: "lines", x, y, name: `${name} (raw)`, opacity: 0.3, showlegend: false,
                               hoverinfo: "skip" }] : [line];
    }));
    await Plotly.react(div, traces, { title: { text: title }, margin: { t: 40, r: 10 },
      xaxis: { title: { text: "step" }, tick0: 0, dtick: Math.max(1, Math.ceil(lastStep / 10)) },
      yaxis: { type: log ? "log" : "linear" }, showlegend: runs.length > 1 || series.length > 1 },
      { responsive: true, displaylogo: false });
  }
  $("training-plots").dataset.drawn = `${weight}/${log}`;
}

main().catch(showError);
