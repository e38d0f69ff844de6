// EMQ web console: plain JavaScript, no build step, no third-party code, no external requests.
// The token lives in sessionStorage (this tab only) and goes out as "Authorization: Bearer";
// it is never put in a URL. Live views poll: one request per view at a time, the next one
// starting at least POLL_MS after the previous one started, and only while the view is shown.
"use strict";

const POLL_MS = 1000;
const CHART_S = 60; // seconds of delivered/s kept per topic for the charts
const TOKEN_KEY = "emq.token";
const $ = (sel) => document.querySelector(sel);

const state = { token: null, tenant: null, admin: false, view: null, generation: 0, job: null,
  dlq: { rows: [], cursor: null, ref: null }, series: new Map() };

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, body, path) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "http_error";
    this.field = err.field;
    this.path = path;
  }
  describe() {
    const field = this.field ? ` (field ${this.field})` : "";
    return `${this.status} ${this.code}: ${this.message}${field}`;
  }
}

async function call(method, path, body) {
  const ns = $("#namespace").value;
  const sep = path.includes("?") ? "&" : "?";
  const url = path.startsWith("/v1/tenants") || path.startsWith("/v1/topics") ||
    path.startsWith("/v1/workers") ? `${path}${sep}namespace=${encodeURIComponent(ns)}` : path;
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(url, { method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => null);
  if (!r.ok) {
    const e = new ApiError(r.status, data, path);
    if (r.status === 401) signOut(`Signed out: the API refused the token (${e.describe()}).`);
    throw e;
  }
  return data;
}

const enc = encodeURIComponent;
const topicPath = (t, topic) => `/v1/tenants/${enc(t)}/topics/${enc(topic)}`;

// ------------------------------------------------------------------ small DOM helpers

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "data") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
}

// An error stays until the next action; one set by a poll goes away when a poll succeeds.
function showError(message, fromPoll = false) {
  const box = $("#error");
  box.textContent = message || "";
  box.hidden = !message;
  box.dataset.fromPoll = String(fromPoll);
}

function fail(e, fromPoll = false) {
  if (e instanceof ApiError) showError(e.describe(), fromPoll);
  else if (e instanceof TypeError && /fetch/i.test(e.message)) {
    showError(`The API could not be reached: ${e.message}`, fromPoll);
  } else showError(`Console error: ${e.message}`, fromPoll);
}

const fmt = (n, digits = 1) => (n === null || n === undefined ? "—" : Number(n).toFixed(digits));
// Times come as epoch seconds; an ISO string is shown as the API wrote it.
const when = (s) => (!s ? "—" : typeof s === "number" ? new Date(s * 1000).toLocaleString() : s);

// ------------------------------------------------------------------ sign in / out

async function signIn(token) {
  state.token = token;
  try {
    await call("GET", "/v1/tenants");
    state.admin = true;
    state.tenant = null;
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) {
      state.token = null;
      if (!(e instanceof ApiError && e.status === 401)) fail(e);
      return false;
    }
    state.admin = false; // a tenant token reads "<tenant>.<secret>"
    state.tenant = token.slice(0, token.lastIndexOf("."));
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  document.body.classList.toggle("is-admin", state.admin);
  $("#who").textContent = state.admin ? "admin" : `tenant ${state.tenant}`;
  for (const id of ["#nav", "#signout", "#ns-label"]) $(id).hidden = false;
  for (const form of ["#job-form", "#dlq-form"]) {
    if (state.tenant) $(form).elements.tenant.value = state.tenant;
  }
  showView("topics");
  return true;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  Object.assign(state, { token: null, tenant: null, admin: false, job: null });
  state.series.clear();
  for (const id of ["#nav", "#signout", "#ns-label"]) $(id).hidden = true;
  $("#who").textContent = "";
  showView("signin");
  showError(message);
}

// ------------------------------------------------------------------ views and polling

const VIEWS = { topics: pollTopics, fleet: pollFleet, job: pollJob, tenants: loadTenants,
  plan: loadPlan };
const ONCE = new Set(["tenants", "plan"]); // loaded when shown (and on request), not polled

function showView(name) {
  state.view = name;
  state.generation += 1; // stops the previous view's poll loop
  showError("");
  for (const s of document.querySelectorAll("main > section")) {
    s.hidden = s.id !== `view-${name}`;
  }
  for (const b of document.querySelectorAll("#nav button")) {
    b.classList.toggle("active", b.dataset.view === name);
  }
  const load = VIEWS[name];
  if (ONCE.has(name)) load().catch(fail);
  else if (load) poll(load, state.generation);
}

// One request in flight per view; the next starts POLL_MS after the last one started.
async function poll(load, generation) {
  while (generation === state.generation && state.token) {
    const started = performance.now();
    if (!document.hidden) {
      try {
        const more = await load();
        if (generation === state.generation && $("#error").dataset.fromPoll === "true") {
          showError("");
        }
        if (more === false) return; // nothing (more) to poll
      } catch (e) {
        if (generation === state.generation) fail(e, true);
      }
    }
    const wait = Math.max(0, POLL_MS - (performance.now() - started));
    await new Promise((done) => setTimeout(done, wait));
  }
}

// ------------------------------------------------------------------ topics

async function pollTopics() {
  const data = await call("GET", "/v1/topics");
  const now = data.at;
  const names = $("#topic-names");
  names.replaceChildren(...data.topics.map((t) => el("option", { value: t.topic })));
  const body = $("#topics tbody");
  const keep = new Set();
  for (const t of data.topics) {
    const key = `${t.namespace}/${t.tenant}/${t.topic}`;
    keep.add(key);
    const series = state.series.get(key) || [];
    series.push([now, t.delivered_per_s || 0]);
    while (series.length && series[0][0] < now - CHART_S) series.shift();
    state.series.set(key, series);
    let row = body.querySelector(`tr[data-key="${CSS.escape(key)}"]`);
    if (!row) {
      row = topicRow(t, key);
      body.append(row);
    }
    fillTopicRow(row, t);
    drawChart(row.querySelector("canvas"), series, t.qps, now);
  }
  for (const row of [...body.rows]) if (!keep.has(row.dataset.key)) row.remove();
  for (const key of [...state.series.keys()]) if (!keep.has(key)) state.series.delete(key);
  $("#topics-at").textContent = `${data.topics.length} topics${data.truncated ? " (first shown)" : ""}` +
    ` · ${new Date(now * 1000).toLocaleTimeString()}`;
}

function topicRow(t, key) {
  const cells = ["tenant", "topic", "qps num", "rate num", "chart", "backlog num", "delayed num",
    "p99 num", "endpoints", "state"].map((c) => el("td", { class: c }));
  const row = el("tr", { data: { key, tenant: t.tenant, topic: t.topic } }, ...cells);
  row.querySelector(".chart").append(el("canvas", { width: 240, height: 40 }));
  if (state.admin) {
    const qps = el("input", { class: "new-qps", type: "number", min: 1, value: t.qps,
      title: "new quota (jobs/s)" });
    const set = el("button", { class: "set-qps", onclick: () =>
      patchTopic(t, { qps: Number(qps.value) }, `quota of ${t.topic} set to ${qps.value}/s`) },
    "Set quota");
    const pause = el("button", { class: "toggle-pause", onclick: () =>
      patchTopic(t, { paused: row.dataset.paused !== "true" }, null) });
    row.append(el("td", { class: "admin" }, qps, " ", set, " ", pause));
  }
  return row;
}

function fillTopicRow(row, t) {
  const cell = (c) => row.querySelector(`.${c}`);
  const backlog = Object.values(t.backlog || {}).reduce((a, b) => a + b, 0);
  cell("tenant").textContent = t.tenant;
  cell("topic").textContent = t.topic;
  cell("qps").textContent = t.qps;
  cell("rate").textContent = fmt(t.delivered_per_s);
  cell("backlog").textContent = backlog;
  cell("backlog").title = Object.entries(t.backlog || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
  cell("delayed").textContent = t.delayed;
  // p99 enqueue->delivery latency: shown when the API reports it for the topic.
  cell("p99").textContent = latency(t.p99_ms);
  cell("p99").title = t.p50_ms === undefined || t.p50_ms === null ? "no delivery in the last minute"
    : `p50 ${latency(t.p50_ms)}, p99 ${latency(t.p99_ms)} over the last ${t.latency_window_s} s (enqueue to delivery)`;
  fillEndpoints(cell("endpoints"), t);
  cell("state").textContent = t.paused ? "paused" : "no";
  cell("state").classList.toggle("is-paused", t.paused);
  row.dataset.paused = String(t.paused);
  const pause = row.querySelector(".toggle-pause");
  if (pause) pause.textContent = t.paused ? "Resume" : "Pause";
}

// Per-endpoint flow control (README "Endpoint flow control"): each endpoint a worker follows,
// its state and current rate, why in the tooltip; a disabled one can be re-enabled (admin).
function fillEndpoints(cellEl, t) {
  const rows = t.endpoint_status || [];
  if (!rows.length) {
    cellEl.textContent = t.endpoints && (t.endpoints.adaptive || t.endpoints.disable_after)
      ? "all open" : "—";
    return;
  }
  cellEl.replaceChildren(...rows.map((s) => {
    const text = `${s.endpoint} ${s.state}` + (s.state === "disabled" ? "" : ` ${fmt(s.rate_qps)}/s`);
    const line = el("div", { class: `endpoint is-${s.state}`, title: s.reason || s.state }, text);
    if (s.state === "disabled" && state.admin) {
      line.append(" ", el("button", { class: "enable-endpoint", onclick: () =>
        enableEndpoint(t, s.endpoint) }, "Enable"));
    }
    return line;
  }));
}

async function enableEndpoint(t, endpoint) {
  try {
    await call("POST", `${topicPath(t.tenant, t.topic)}/endpoints/enable`, { endpoint });
    showError("");
    $("#topics-at").textContent = `${endpoint} of ${t.topic} re-enabled`;
  } catch (e) {
    fail(e);
  }
}

// Milliseconds below a second, seconds above (a backlog draining at the quota waits long).
const latency = (ms) => (ms === undefined || ms === null ? "—"
  : ms < 1000 ? `${fmt(ms, 0)} ms` : `${fmt(ms / 1000, 1)} s`);

async function patchTopic(t, change, done) {
  try {
    const topic = await call("PATCH", topicPath(t.tenant, t.topic), change);
    showError("");
    const verb = topic.paused ? "paused" : "resumed";
    $("#topics-at").textContent = done || `${t.topic} ${verb}`;
  } catch (e) {
    fail(e);
  }
}

function drawChart(canvas, series, quota, now) {
  const ratio = window.devicePixelRatio || 1;
  const w = 240, h = 40;
  if (canvas.width !== w * ratio) {
    canvas.width = w * ratio;
    canvas.height = h * ratio;
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
  }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  const top = Math.max(quota * 1.2, ...series.map((p) => p[1]), 1);
  const x = (t) => w - ((now - t) / CHART_S) * w;
  const y = (v) => h - 2 - (v / top) * (h - 4);
  g.strokeStyle = "#c2410c"; // the quota
  g.setLineDash([4, 3]);
  g.beginPath();
  g.moveTo(0, y(quota));
  g.lineTo(w, y(quota));
  g.stroke();
  g.setLineDash([]);
  if (series.length < 2) return;
  g.beginPath();
  series.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
  g.strokeStyle = "#2563eb";
  g.lineWidth = 1.5;
  g.stroke();
  g.lineTo(x(series[series.length - 1][0]), h);
  g.lineTo(x(series[0][0]), h);
  g.fillStyle = "rgba(37, 99, 235, 0.12)";
  g.fill();
}

// ------------------------------------------------------------------ tenants and fleet (admin)

async function loadTenants() {
  const data = await call("GET", "/v1/tenants");
  $("#tenants tbody").replaceChildren(...data.tenants.map((t) =>
    el("tr", { data: { tenant: t.tenant } }, el("td", {}, t.tenant), el("td", {}, t.name),
      el("td", {}, when(t.created_at)), el("td", { class: "caps" }, caps(t.qps_caps)))));
}

// A tenant's caps over its topics per namespace (tenant quota), e.g. "online 300/s".
function caps(qpsCaps) {
  const shown = Object.entries(qpsCaps || {}).map(([ns, q]) => `${ns} ${q}/s`);
  return shown.length ? shown.join(", ") : "—";
}

async function pollFleet() {
  const f = await call("GET", "/v1/workers");
  $("#fleet-summary").textContent = `leader ${f.leader || "none"} · generation ${f.generation}` +
    ` · assigned ${when(f.assigned_at)} · ${f.workers.length} workers`;
  $("#workers tbody").replaceChildren(...f.workers.map((w) => el("tr", { data: { worker: w.id } },
    el("td", {}, w.id), el("td", {}, w.host), el("td", { class: "num" }, w.pid),
    el("td", { class: "num" }, w.weight), el("td", {}, w.leader ? "leader" : ""),
    el("td", { class: "num groups" }, w.group_count),
    el("td", { class: "num rate" }, fmt(w.delivered_per_s)),
    el("td", { class: "owned" }, w.groups.map((g) => `${g.group}@${g.epoch}`).join(", ")))));
  $("#orphans").textContent = f.orphans.length
    ? f.orphans.map((o) => `${o.group} (last ${o.worker || "unowned"})`).join(", ") : "none";
}

// ------------------------------------------------------------------ the latest capacity plan (admin)

// SVG's namespace, as the HTML parser gives it to an <svg> element.
const SVG = (() => {
  const holder = document.createElement("div");
  holder.innerHTML = "<svg></svg>";
  return holder.firstChild.namespaceURI;
})();
const COLORS = { offered: "#2563eb", served: "#16a34a", capacity: "#111", spare: "#999",
  backlog: "#dc2626", quota: "#7c7c7c", proposed: "#c2410c" };

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

const big = (n, digits = 1) => (n === null || n === undefined ? "—"
  : Math.abs(n) >= 1000 ? Math.round(n).toLocaleString("en") : Number(n).toFixed(digits));
const seconds = (s) => (s === null || s === undefined || s <= 0 ? "—"
  : s < 60 ? `${Math.round(s)} s` : s < 3600 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`);
const day = (epoch) => new Date(epoch * 1000).toISOString().slice(0, 16).replace("T", " ");

// A line chart over time: lines [{key, values, fill?}], levels [{key, value, dash?}].
function timeChart(t, lines, levels, { width = 900, height = 200 } = {}) {
  const pad = { left: 56, right: 10, top: 8, bottom: 22 };
  const n = Math.min(t.length, ...lines.map((l) => l.values.length));
  const top = Math.max(1, ...levels.map((l) => l.value),
    ...lines.flatMap((l) => l.values.slice(0, n))) * 1.08;
  const t0 = t[0] ?? 0, t1 = t[n - 1] ?? 1;
  const x = (v) => pad.left + ((v - t0) / Math.max(1, t1 - t0)) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / top) * (height - pad.top - pad.bottom);
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  for (const f of [0, 0.5, 1]) {
    chart.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(top * f / 1.08),
      y2: y(top * f / 1.08), stroke: "#eee" }),
    svg("text", { x: pad.left - 6, y: y(top * f / 1.08) + 4, "text-anchor": "end" },
      big(top * f / 1.08, top < 10 ? 1 : 0)));
  }
  if (n > 0) {
    chart.append(svg("text", { x: pad.left, y: height - 6 }, `${day(t0)} UTC`),
      svg("text", { x: width - pad.right, y: height - 6, "text-anchor": "end" }, `${day(t1)} UTC`));
  }
  for (const line of lines) {
    if (n < 1) break;
    const pts = line.values.slice(0, n).map((v, i) => `${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`);
    if (line.fill) {
      const area = `${x(t0).toFixed(1)},${y(0)} ${pts.join(" ")} ${x(t[n - 1]).toFixed(1)},${y(0)}`;
      chart.append(svg("polygon", { points: area, fill: COLORS[line.key], "fill-opacity": 0.25 }));
    }
    chart.append(svg("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[line.key],
      "stroke-width": 1.2, class: `series-${line.key}` }));
  }
  for (const level of levels) {
    chart.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(level.value),
      y2: y(level.value), stroke: COLORS[level.key], "stroke-width": 1.2,
      "stroke-dasharray": level.dash || "", class: `level-${level.key}` }));
  }
  return chart;
}

function legend(items) {
  return el("div", { class: "legend" }, ...items.map(([key, text]) => el("span", { class: key }, text)));
}

async function loadPlan() {
  watchRollout(state.generation).catch(fail);
  let p;
  try {
    p = await call("GET", "/v1/plans/latest");
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 404) throw e;
    $("#plan-body").hidden = true;
    $("#plan-at").textContent = "";
    $("#plan-source").textContent = "";
    $("#plan-empty").hidden = false;
    $("#plan-empty").textContent = `${e.message}. A plan is stored here when it is reviewed or ` +
      "applied (emq plan apply [--dry-run] PLAN.json).";
    return;
  }
  $("#plan-empty").hidden = true;
  $("#plan-body").hidden = false;
  $("#plan-at").textContent = `generated ${p.generated_at || "—"}`;
  const h = p.history || {};
  const span = h.first_s && h.end_s ? `, ${day(h.first_s)} to ${day(h.end_s)} UTC` : "";
  $("#plan-source").textContent = `${p.id}: stored ${when(p.stored_at)} by ` +
    `${p.source === "publish" ? "POST /v1/plans" : p.source === "apply" ? "emq plan apply" : "emq plan apply --dry-run"}` +
    ` · ${p.topics} planned topics from ${big(h.rows, 0)} topic-intervals (${big(h.days)} days${span})` +
    ` · ${p.kept} plan(s) kept`;
  renderPlanCards(p);
  renderPlanCharts(p);
  renderPlanDiff(p.diff);
}

function renderPlanCards(p) {
  const f = p.fleet || {};
  const pct = (v) => `${Math.round(100 * (v || 0))}%`;
  const cards = [
    ["workers", f.workers, `${f.active_workers} + ${f.spare_workers} spare at ${big(f.worker_qps, 0)}/s`],
    ["Redis shards", f.redis_shards, `${big(f.redis_ops_per_s, 0)} ops/s`],
    ["peak offered", `${big(f.peak_offered_rps)}/s`, `p99 ${big(f.p99_offered_rps)}/s`],
    ["demand", `${big(f.demand_qps)}/s`, `headroom ${(p.parameters || {}).headroom ?? "—"}`],
    ["sum of quotas", big(f.proposed_quota_sum, 0), `now ${big(f.current_quota_sum, 0)}`],
    ["groups", big(f.proposed_groups, 0), `now ${big(f.current_groups, 0)}`],
    ["peak utilisation", pct(f.peak_utilisation), `mean ${pct(f.mean_utilisation)}`],
  ];
  $("#plan-cards").replaceChildren(...cards.map(([label, value, note]) =>
    el("div", { class: "card", data: { card: label } }, el("div", { class: "label" }, label),
      el("div", { class: "value" }, value ?? "—"), el("div", { class: "note" }, note))));
}

function renderPlanCharts(p) {
  const s = p.series || {};
  const fleet = s.fleet || { t: [] };
  const f = p.fleet || {};
  const none = () => el("p", { class: "note" }, "This plan has no series (made by an older emq plan run).");
  if (!fleet.t.length) {
    $("#plan-fleet-chart").replaceChildren(none());
    $("#plan-backlog-chart").replaceChildren();
  } else {
    const capacity = f.capacity_qps || 0;
    const spare = capacity + (f.spare_workers || 0) * (f.worker_qps || 0);
    $("#plan-fleet-chart").replaceChildren(
      legend([["offered", "offered jobs/s"], ["served", "servable at the planned quotas"],
        ["capacity", `${f.active_workers} workers`], ["spare", `${f.workers} workers (with spare)`]]),
      timeChart(fleet.t, [{ key: "offered", values: fleet.offered_rps || [] },
        { key: "served", values: fleet.served_rps || [] }],
      [{ key: "capacity", value: capacity }, { key: "spare", value: spare, dash: "4 3" }]));
    $("#plan-backlog-chart").replaceChildren(legend([["backlog", "queued jobs (replay)"]]),
      timeChart(fleet.t, [{ key: "backlog", values: fleet.replayed_backlog || [], fill: true }], [],
        { height: 140 }));
  }
  $("#plan-topics").replaceChildren(...(s.topics || []).map((c) => el("figure",
    { data: { topic: `${c.namespace}/${c.tenant}/${c.topic}` } },
    el("figcaption", {}, `${c.namespace}/${c.tenant}/${c.topic}: planned quota ${big(c.proposed_qps, 0)}/s`),
    legend([["offered", "offered jobs/s"], ["quota", "quota then"], ["proposed", "planned quota"],
      ["backlog", "replay backlog (jobs, own scale below)"]]),
    timeChart(c.t, [{ key: "offered", values: c.rate || [] }, { key: "quota", values: c.quota || [] }],
      [{ key: "proposed", value: c.proposed_qps || 0, dash: "6 3" }], { height: 150 }),
    timeChart(c.t, [{ key: "backlog", values: c.backlog || [], fill: true }], [], { height: 80 }))));
  if (!(s.topics || []).length) $("#plan-topics").replaceChildren(el("p", { class: "note" }, "none"));
}

function renderPlanDiff(d) {
  const c = d.counts;
  $("#plan-counts").textContent = `${c.raise} to raise, ${c.lower} to lower, ` +
    `${c["needs-force"]} lower by more than half (need --force), ${c.unchanged} unchanged, ` +
    `${c.unknown} unknown` + (d.truncated ? ` · the ${d.limit} largest changes shown` : "");
  const note = { raise: "raise", lower: "lower", "needs-force": "needs --force",
    unknown: "unknown topic", unchanged: "unchanged" };
  $("#plan-diff tbody").replaceChildren(...d.changes.map((r) => el("tr",
    { data: { topic: `${r.namespace}/${r.tenant}/${r.topic}`, action: r.action } },
    el("td", {}, `${r.namespace}/${r.tenant}/${r.topic}`),
    el("td", { class: "num" }, r.current_qps ?? "—"), el("td", { class: "num" }, r.current_groups ?? "—"),
    el("td", { class: "num planned" }, r.qps), el("td", { class: "num" }, r.groups),
    el("td", { class: "num" }, r.change_pct === null ? "—" : `${r.change_pct > 0 ? "+" : ""}${r.change_pct}%`),
    el("td", { class: `action action-${r.action}` }, note[r.action] || r.action),
    el("td", { class: "num" }, big(r.p99_rps)), el("td", { class: "num" }, seconds(r.max_wait_s)))));
}

$("#plan-refresh").addEventListener("click", () => loadPlan().then(() => showError("")).catch(fail));

// ------------------------------------------------------------------ the latest rollout (admin)

// emq plan apply --canary records its progress in the API; shown above the plan and followed
// every POLL_MS while it runs and the Plan view is shown.
async function watchRollout(generation) {
  while (generation === state.generation && state.view === "plan" && state.token) {
    let r;
    try {
      r = await call("GET", "/v1/rollouts/latest");
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 404) throw e;
      $("#rollout").hidden = true;
      return;
    }
    if (generation !== state.generation) return;
    renderRollout(r);
    if (r.state !== "running") return;
    await new Promise((done) => setTimeout(done, POLL_MS));
  }
}

function renderRollout(r) {
  const topics = r.topics || [];
  $("#rollout").hidden = false;
  $("#rollout").dataset.state = r.state;
  $("#rollout-state").textContent = `${r.id}: ${r.state}${r.phase ? ` · ${r.phase}` : ""}`;
  $("#rollout-progress").max = Math.max(1, topics.length);
  $("#rollout-progress").value = r.topics_done;
  $("#rollout-count").textContent = `${r.topics_done} of ${topics.length} topics live and healthy`;
  $("#rollout-summary").textContent = `${r.plan}: canary ${r.canary_pct}% then ${r.steps} ` +
    `step(s), each watched ${seconds(r.watch_s)}; started ${when(r.created_at)} by ${r.actor}` +
    (r.reason ? ` · ${r.reason}` : "");
  const fig = (v) => (Number.isInteger(v) ? String(v) : big(v, 2));
  const figures = (s) => (s ? Object.entries(s).map(([k, v]) => `${k} ${fig(v)}`).join(", ") : "");
  const breaches = (bs) => (bs || []).map((b) => `${b.signal} ${fig(b.figure)} ${b.op} ${fig(b.limit)}`)
    .join("; ");
  $("#rollout-topics tbody").replaceChildren(...topics.map((t) => el("tr",
    { data: { topic: t.name, status: t.status } },
    el("td", {}, t.step === 0 ? "canary" : `step ${t.step}`), el("td", {}, t.name),
    el("td", { class: "num" }, t.before.qps), el("td", { class: "num planned" }, t.after.qps),
    el("td", { class: "status" }, t.status), el("td", { class: "note" }, figures(t.signals)),
    el("td", { class: "breaches" }, breaches(t.breaches)))));
}

// ------------------------------------------------------------------ a job's status

$("#job-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  state.job = { tenant: f.tenant.value.trim(), topic: f.topic.value.trim(), id: f.id.value.trim() };
  $("#job-result").replaceChildren(el("p", { class: "note" }, "looking up…"));
  showView("job");
});

const WAITING = new Set(["delayed", "queued", "buffered", "in_flight", "retry_wait"]);

async function pollJob() {
  const job = state.job;
  if (!job) return false;
  const out = $("#job-result");
  let data;
  try {
    data = await call("GET", `${topicPath(job.tenant, job.topic)}/jobs/${enc(job.id)}`);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    // aiohttp's own 404 (message "Not Found") means no route: this API has no job status.
    const noRoute = e.status === 404 && e.message === "Not Found";
    out.replaceChildren(el("p", { class: "error", id: "job-error" }, noRoute
      ? "This API does not answer job status (404 for the route GET /v1/tenants/{t}/topics/{topic}/jobs/{id}); upgrade the API to look jobs up."
      : e.describe()));
    return false;
  }
  const reason = data.reason;
  const rows = [["job", data.id], ["topic", data.topic], ["state", data.state],
    ["reason", reason ? reason.code : "—"], ["detail", reason ? reason.detail : "—"]];
  if (reason && reason.until) rows.push(["until", when(reason.until)]);
  out.replaceChildren(
    el("dl", { id: "job-status" }, ...rows.flatMap(([k, v]) =>
      [el("dt", {}, k), el("dd", { class: `job-${k}` }, v)])),
    el("pre", {}, JSON.stringify(data, null, 2)));
  return WAITING.has(data.state); // a waiting job is followed live; a settled one is final
}

// ------------------------------------------------------------------ dead letters

$("#dlq-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  state.dlq = { rows: [], cursor: null, ref: { tenant: f.tenant.value.trim(), topic: f.topic.value.trim() } };
  loadDlq().catch(fail);
});

async function loadDlq() {
  const { ref, cursor } = state.dlq;
  const query = `?limit=100${cursor ? `&cursor=${enc(cursor)}` : ""}`;
  $("#dlq-status").textContent = "";
  try {
    const page = await call("GET", `${topicPath(ref.tenant, ref.topic)}/dlq${query}`);
    state.dlq.rows.push(...page.dead);
    state.dlq.cursor = page.next_cursor;
    showError("");
  } catch (e) {
    state.dlq.rows = [];
    renderDlq();
    throw e;
  }
  renderDlq();
}

function renderDlq() {
  const filter = $("#dlq-filter").value.trim().toLowerCase();
  const shown = state.dlq.rows.filter((d) => !filter ||
    [d.error, d.status, d.job_id, d.id, d.job && d.job.url].some((v) =>
      String(v ?? "").toLowerCase().includes(filter)));
  $("#dlq tbody").replaceChildren(...shown.map((d) => el("tr", { data: { id: d.id } },
    el("td", {}, el("input", { type: "checkbox", class: "pick", value: d.id })),
    el("td", {}, d.id), el("td", { class: "job-id" }, d.job_id ?? "(unreadable)"),
    el("td", {}, when(d.failed_at)), el("td", { class: "num" }, d.attempts),
    el("td", {}, d.status ?? "—"), el("td", {}, d.error ?? ""),
    el("td", {}, d.job ? d.job.url : ""))));
  const loaded = state.dlq.ref !== null;
  $("#dlq-replay-selected").disabled = !loaded || shown.length === 0;
  $("#dlq-replay-all").disabled = !loaded || state.dlq.rows.length === 0;
  $("#dlq-more").hidden = !state.dlq.cursor;
  $("#dlq-all").checked = false;
  $("#dlq-status").textContent = loaded
    ? `${shown.length} shown of ${state.dlq.rows.length} loaded${state.dlq.cursor ? " (more)" : ""}` : "";
}

async function replay(ids) {
  const { ref } = state.dlq;
  try {
    const r = await call("POST", `${topicPath(ref.tenant, ref.topic)}/dlq/replay`,
      ids ? { ids } : { limit: 100000 });
    state.dlq = { rows: [], cursor: null, ref };
    await loadDlq();
    $("#dlq-status").textContent = `replayed ${r.replayed}; ${$("#dlq-status").textContent}`;
  } catch (e) {
    fail(e);
  }
}

$("#dlq-filter").addEventListener("input", renderDlq);
$("#dlq-more").addEventListener("click", () => loadDlq().catch(fail));
$("#dlq-all").addEventListener("change", (ev) => {
  for (const box of document.querySelectorAll("#dlq .pick")) box.checked = ev.target.checked;
});
$("#dlq-replay-selected").addEventListener("click", () => {
  const ids = [...document.querySelectorAll("#dlq .pick:checked")].map((b) => b.value);
  if (ids.length) replay(ids);
  else showError("select dead letters to replay first");
});
$("#dlq-replay-all").addEventListener("click", () => replay(null));

// ------------------------------------------------------------------ wiring

$("#signin").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const input = $("#token");
  if (await signIn(input.value.trim())) input.value = "";
  else if (!$("#error").textContent) showError("The API refused this token (401).");
});
$("#signout").addEventListener("click", () => signOut(""));
$("#namespace").addEventListener("change", () => {
  state.series.clear();
  $("#topics tbody").replaceChildren();
  showView(state.view);
});
for (const b of document.querySelectorAll("#nav button")) {
  b.addEventListener("click", () => showView(b.dataset.view));
}

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) signIn(saved);
else showView("signin");
