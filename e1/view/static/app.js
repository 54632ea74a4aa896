// e1 view: the page. Data comes from /api/* (see e1/view/routes.py); charts are Plotly.
// Every text from a run is put in the page as text (textContent), never parsed as HTML.
"use strict";

const state = { runs: [], points: [], names: {}, page: 0, pageSize: 50, drawn: {}, request: 0, compared: 0 };
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

async function api(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  const response = await fetch(`/api/${path}?${query}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
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
function showTab(name) {
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === name);
  for (const section of document.querySelectorAll("main section")) section.hidden = section.id !== `tab-${name}`;
  const draw = { curves: drawCurves, samples: initSamples, compare: initCompare, training: initTraining }[name];
  if (!state.drawn[name]) {
    state.drawn[name] = true;
    return Promise.resolve(draw()).catch(showError);
  }
  for (const plot of document.querySelectorAll(`#tab-${name} .js-plotly-plot`)) Plotly.Plots.resize(plot);
  return Promise.resolve();
}

const sampleRuns = () => state.runs.filter((run) => run.facets.samples > 0);
const runById = (id) => state.runs.find((run) => String(run.id) === String(id));

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
    button.onclick = () => showTab(button.dataset.tab);
  }
  const first = ["curves", "samples", "training"].find((name) => has[name]) || "samples";
  await showTab(first);
  document.body.dataset.ready = "1";
}

// ---- curves ----
function drawCurves() {
  const datasets = [...new Set(state.points.map((p) => p.dataset))].sort();
  if (!$("curve-dataset").options.length) {
    fill($("curve-dataset"), ["", ...datasets], ["all", ...datasets]);
    $("curve-x").onchange = $("curve-dataset").onchange = drawCurves;
  }
  const xKey = $("curve-x").value, dataset = $("curve-dataset").value;
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
  return Plotly.react("curves", traces, layout, { responsive: true, displaylogo: false });
}

function curveTrace(points, xKey, manyRuns) {
  points.sort((a, b) => a[xKey] - b[xKey] || a.think_budget - b.think_budget);
  const p0 = points[0];
  const name = [manyRuns ? p0.run : null, shortModel(p0.model) || null, p0.dataset, p0.mode].filter(Boolean).join(" · ");
  const gap = (p, side) => (p[side] === null || p[side] === undefined ? 0 : 100 * Math.abs(p[side] - p.accuracy));
  return {
    type: "scatter", mode: "lines+markers", name, x: points.map((p) => p[xKey]), y: points.map((p) => 100 * p.accuracy),
    error_y: { type: "data", symmetric: false, thickness: 1, width: 3,
               array: points.map((p) => gap(p, "accuracy_ci_high")), arrayminus: points.map((p) => gap(p, "accuracy_ci_low")) },
    customdata: points.map((p) => [p.run, p.model, p.dataset, p.mode, budgetLabel(p.think_budget, p.solve_budget),
                                   p.samples_per_problem, p.problems, pct(p.accuracy_ci_low), pct(p.accuracy_ci_high),
                                   p.mean_total_tokens, pct(p.forced_rate)]),
    hovertemplate: "<b>%{customdata[2]}</b> · %{customdata[3]} · %{customdata[4]}<br>run %{customdata[0]}<br>"
      + "model %{customdata[1]}<br>accuracy %{y:.1f}% (95% CI %{customdata[7]} to %{customdata[8]})<br>"
      + "n = %{customdata[5]} samples × %{customdata[6]} problems<br>mean tokens %{customdata[9]:.1f}, "
      + "forced %{customdata[10]}<extra></extra>",
  };
}

// ---- one sample, as the browser and the side-by-side view show it ----
function cutMarker(row) {
  if (row.forced) {
    const exit = String(row.mode).includes("exit=") ? " (after the mode's exit text)" : "";
    return el("div", { class: "cut forced", title: "e1 inserted the end-of-thinking marker here" },
      `✂ </think> forced by e1 here${exit}: thinking reached t = ${row.think_budget} without ending`);
  }
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

async function problemBlock(runId, dataset, problemId, cell = {}) {
  const found = await api("problem", { run: runId, dataset, problem_id: problemId, ...cell });
  return el("div", { class: "problem" }, el("div", { class: "source" }, found.source),
    found.text === null ? null : el("pre", { class: "problem-text" }, found.text));
}

// ---- sample browser ----
function initSamples() {
  const runs = sampleRuns();
  fill($("f-run"), runs.map((run) => String(run.id)), runs.map((run) => `${run.name} (${run.kind})`));
  $("f-run").onchange = () => { fillFacets(); return loadPage(0); };
  for (const id of ["f-model", "f-dataset", "f-mode", "f-budget", "f-correct", "f-forced"]) $(id).onchange = () => loadPage(0);
  $("prev").onclick = () => loadPage(state.page - 1);
  $("next").onclick = () => loadPage(state.page + 1);
  fillFacets();
  return loadPage(0);
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
  return { run: $("f-run").value, model: $("f-model").value, dataset: $("f-dataset").value, mode: $("f-mode").value,
           think, solve, correct: $("f-correct").value, forced: $("f-forced").value };
}

async function loadPage(page) {
  const mine = ++state.request;
  const where = browserFilter();
  const body = await api("samples", { ...where, offset: Math.max(0, page) * state.pageSize, limit: state.pageSize });
  if (mine !== state.request) return;  // a newer filter was chosen meanwhile
  state.page = Math.max(0, page);
  const pages = Math.max(1, Math.ceil(body.total / state.pageSize));
  const count = $("sample-count");
  count.textContent = `${body.total} samples · ${body.correct} correct · ${body.forced} forced`;
  count.dataset.total = body.total;
  $("page-info").textContent = `page ${state.page + 1} of ${pages}`;
  $("prev").disabled = state.page === 0;
  $("next").disabled = state.page + 1 >= pages;
  $("sample-table").tBodies[0].replaceChildren(...body.rows.map((row) => sampleRow(row, where.run)));
  $("sample-table").dataset.loaded = String(state.request);
}

function sampleRow(row, runId) {
  const cells = [row.dataset, row.problem_id, row.sample_index, shortModel(row.model), row.mode, row.think_budget,
                 row.solve_budget, row.think_tokens, row.solve_tokens, row.forced ? "yes" : "", row.correct ? "yes" : "no"];
  const tr = el("tr", {}, ...cells.map((cell) => el("td", {}, cell)));
  tr.onclick = () => {
    for (const other of tr.parentNode.children) other.classList.remove("selected");
    tr.classList.add("selected");
    return showSample(runId, row).catch(showError);
  };
  return tr;
}

async function showSample(runId, row) {
  const key = { run: runId, model: row.model, dataset: row.dataset, problem_id: row.problem_id, mode: row.mode,
                think: row.think_budget, solve: row.solve_budget, sample_index: row.sample_index, text: "true" };
  const [full, problem] = await Promise.all([api("samples", key), problemBlock(runId, row.dataset, row.problem_id,
    { model: row.model, mode: row.mode, think: row.think_budget, solve: row.solve_budget })]);
  $("sample-detail").replaceChildren(problem, ...full.rows.map(sampleCard));
  $("sample-detail").scrollIntoView({ block: "nearest" });
}

// ---- side by side ----
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
  for (const name of ["model", "mode", "budget"]) {
    const select = $(`${side}-${name}`);
    if ([...select.options].some((option) => option.value === choice[name])) select.value = choice[name];
  }
  $(`${side}-run`).onchange = () => { refill(); return loadProblems(); };
  for (const name of ["model", "mode", "budget"]) $(`${side}-${name}`).onchange = () => loadProblems();
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
  return { run: run.id, model: run.kind === "sweep" ? $(`${side}-model`).value : "", mode: $(`${side}-mode`).value, think, solve };
}

function initCompare() {
  const [left, right] = defaultSides();
  sideControls("left", left);
  sideControls("right", right);
  $("c-dataset").onchange = () => loadProblems();
  $("c-problem").onchange = () => loadComparison();
  const step = (delta) => {
    const select = $("c-problem");
    select.selectedIndex = Math.min(select.options.length - 1, Math.max(0, select.selectedIndex + delta));
    return loadComparison();
  };
  $("c-prev").onclick = () => step(-1);
  $("c-next").onclick = () => step(1);
  return loadProblems();
}

async function loadProblems() {
  const datasets = [...new Set(["left", "right"].flatMap((side) => runById($(`${side}-run`).value).facets.datasets))].sort();
  fill($("c-dataset"), datasets);
  const dataset = $("c-dataset").value;
  const [left, right] = await Promise.all(["left", "right"].map((side) => api("problems", { ...sideFilter(side), dataset })));
  const both = left.filter((id) => right.includes(id));
  fill($("c-problem"), both.length ? both : [...new Set([...left, ...right])]);
  return loadComparison();
}

async function loadComparison() {
  const mine = ++state.compared;
  const dataset = $("c-dataset").value, problemId = $("c-problem").value;
  if (!problemId) return;
  const sides = await Promise.all(["left", "right"].map((side) =>
    api("samples", { ...sideFilter(side), dataset, problem_id: problemId, text: "true" })));
  const { run: leftRun, ...leftCell } = sideFilter("left");
  const problem = await problemBlock(leftRun, dataset, problemId, leftCell);
  if (mine !== state.compared) return;
  $("c-problem-text").replaceChildren(problem);
  ["left", "right"].forEach((side, i) => {
    const rows = sides[i].rows;
    $(`${side}-samples`).replaceChildren(el("p", { class: "count" }, `${rows.length} sample${rows.length === 1 ? "" : "s"}, `
      + `${rows.filter((row) => row.correct).length} correct`), ...rows.map(sampleCard));
  });
  $("tab-compare").dataset.loaded = `${dataset}/${problemId}`;
}

// ---- training ----
async function initTraining() {
  const runs = await api("metrics");
  const measured = (column) => runs.some((run) => run.rows.some((row) => row[column] !== null && row[column] !== undefined));
  const values = (column) => runs.flatMap((run) => run.rows.map((row) => row[column])).filter((v) => v !== null && v !== undefined);
  // a metric with the same value at every step (two or more) is a flat line: named below the charts, not drawn
  const flat = (column) => { const seen = values(column); return seen.length > 1 && seen.every((v) => v === seen[0]); };
  const measuredColumns = [...new Set(runs.flatMap((run) => run.columns))].filter((column) => column !== "step" && measured(column));
  const flatColumns = measuredColumns.filter(flat);
  const columns = measuredColumns.filter((column) => !flatColumns.includes(column));
  const lastStep = Math.max(1, ...runs.flatMap((run) => run.rows.map((row) => row.step)));
  const phases = columns.filter((column) => column.endsWith("_s"));
  const box = el("div", { class: "plots" });
  const flatNote = el("p", { class: "note", id: "flat-metrics" },
    flatColumns.length ? `the same at every step (not drawn): ${flatColumns.map((c) => `${c} ${values(c)[0]}`).join(", ")}` : "");
  $("training-plots").replaceChildren(box, flatNote);
  const charts = columns.filter((column) => !phases.includes(column)).map((column) => [column, [column]]);
  if (phases.length) charts.push(["seconds per phase", phases]);
  for (const [title, series] of charts) {
    const div = el("div", { class: "plot", id: `metric-${title.replace(/\W+/g, "-")}` });
    box.append(div);
    const traces = runs.flatMap((run) => series.filter((column) => run.columns.includes(column)).map((column) => ({
      type: "scatter", mode: "lines+markers", x: run.rows.map((row) => row.step), y: run.rows.map((row) => row[column]),
      name: series.length > 1 ? (runs.length > 1 ? `${run.run} · ${column}` : column) : run.run,
    })));
    await Plotly.newPlot(div, traces, { title: { text: title }, margin: { t: 40, r: 10 }, xaxis: { title: { text: "step" }, tick0: 0, dtick: Math.max(1, Math.ceil(lastStep / 10)) },
                                        showlegend: runs.length > 1 || series.length > 1 }, { responsive: true, displaylogo: false });
  }
}

main().catch(showError);
