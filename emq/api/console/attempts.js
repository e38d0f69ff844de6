// EMQ web console: the attempt log, the latest dead and failing jobs and redeliveries
// (docs/concepts/attempts.md). Loaded after app.js and uses its helpers (call, topicPath, poll,
// state, el, $, when, enc, fail). The job view shows a job's attempts as a timeline (each
// attempt a row with a bar as long as it took); the DLQ view lists the topic's latest dead and
// failing jobs with their last error, and starts, follows and cancels redeliveries as it does
// replays.
"use strict";

const attempts = { polling: false, redeliveries: false };

const at = (ms) => (ms ? new Date(ms).toLocaleString() : "—");

async function loadAttempts() {
  const job = state.job;
  if (!job || state.view !== "job") return false;
  let body;
  try {
    body = await call("GET", `${topicPath(job.tenant, job.topic)}/jobs/${enc(job.id)}/attempts`);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    $("#attempt-timeline").replaceChildren();
    $("#attempts-status").textContent = e.status === 404 ? "no attempts recorded yet" : e.describe();
    return e.status === 404; // (recorded with the next checkpoint: look again)
  }
  renderTimeline(body.attempts);
  $("#attempts-status").textContent =
    `${body.attempts.length} attempt(s); kept ${body.retention_s} s after each`;
  return true; // a job may be attempted again (a retry, a redelivery): followed while shown
}

function renderTimeline(rows) {
  const longest = Math.max(1, ...rows.map((a) => a.duration_ms));
  $("#attempt-timeline").replaceChildren(...rows.map((a) => {
    const ok = a.status >= 200 && a.status < 300;
    const answer = a.status ? `HTTP ${a.status}` : a.outcome;
    const headers = Object.entries(a.headers || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
    const bar = el("span", { class: `attempt-bar ${ok ? "ok" : "failed"}` });
    bar.style.width = `${Math.max(2, Math.round(120 * a.duration_ms / longest))}px`; // (CSSOM: CSP allows)
    return el("li", { class: `attempt ${ok ? "ok" : "failed"}`, data: { n: String(a.attempt) } },
      el("span", { class: "attempt-n" }, `#${a.attempt}`), " ",
      el("span", { class: "attempt-at" }, at(a.started_at_ms)), " ", bar, " ",
      el("span", { class: "attempt-took" }, `${a.duration_ms} ms`), " ",
      el("strong", { class: "attempt-answer" }, answer),
      a.detail ? el("span", { class: "attempt-detail" }, ` ${a.detail}`) : "",
      headers ? el("span", { class: "attempt-headers note" }, ` (${headers})`) : "",
      a.response_excerpt !== undefined
        ? el("pre", { class: "attempt-excerpt" }, a.response_excerpt) : "");
  }));
}

$("#job-form").addEventListener("submit", () => {
  // app.js's own listener ran first and set state.job.
  $("#attempt-timeline").replaceChildren();
  $("#attempts-status").textContent = "";
  if (attempts.polling) return;
  attempts.polling = true;
  poll(loadAttempts, state.generation).catch(fail).finally(() => { attempts.polling = false; });
});

// ------------------------------------------------------------------ the DLQ view's topic

async function loadRecent() {
  const ref = state.dlq.ref;
  if (!ref) return;
  const path = `${topicPath(ref.tenant, ref.topic)}/jobs`;
  const [dead, failing] = await Promise.all([
    call("GET", `${path}?state=dead&limit=10`), call("GET", `${path}?state=retry_wait&limit=10`)]);
  const rows = [...dead.jobs, ...failing.jobs].sort((a, b) => b.at_ms - a.at_ms);
  $("#recent-jobs tbody").replaceChildren(...rows.map((j) => el("tr", { data: { id: j.id } },
    el("td", { class: "job-id" }, j.id), el("td", { class: "recent-state" }, j.state),
    el("td", {}, at(j.at_ms)), el("td", { class: "num" }, j.attempts),
    el("td", {}, j.status ?? "—"), el("td", { class: "recent-error" }, j.last_error ?? ""))));
}

async function loadRedeliveries() {
  const ref = state.dlq.ref;
  if (!ref || state.view !== "dlq") return false;
  const body = await call("GET", `${topicPath(ref.tenant, ref.topic)}/redeliveries?limit=10`);
  const rows = body.redeliveries;
  $("#redeliveries").hidden = rows.length === 0;
  $("#redeliveries tbody").replaceChildren(...rows.map((r) => {
    const done = r.replayed + r.skipped;
    const bar = el("progress", { max: String(Math.max(1, r.total)), value: String(done) });
    const cancel = r.state === "running"
      ? el("button", { class: "redelivery-cancel", onclick: () => cancelRedelivery(r.id) }, "Cancel")
      : "";
    return el("tr", { data: { id: r.id } }, el("td", {}, r.id),
      el("td", { class: "redelivery-state" }, r.state), el("td", {}, bar),
      el("td", { class: "num redelivery-done" }, `${r.replayed} of ${r.total}`),
      el("td", { class: "num" }, r.remaining), el("td", { class: "num" }, `${r.rate}/s`),
      el("td", {}, when(r.created_at)), el("td", {}, cancel));
  }));
  return rows.some((r) => r.state === "running");
}

function watchRedeliveries() {
  if (attempts.redeliveries) return;
  attempts.redeliveries = true;
  poll(loadRedeliveries, state.generation).finally(() => { attempts.redeliveries = false; });
}

async function startRedelivery() {
  const ref = state.dlq.ref;
  const since = $("#redeliver-since").value;
  if (!since) {
    showError("choose the time to redeliver from first");
    return;
  }
  const body = { since: new Date(since).getTime() / 1000 };
  const raw = $("#redeliver-rate").value.trim();
  if (raw) body.rate = Number(raw);
  try {
    const r = await call("POST", `${topicPath(ref.tenant, ref.topic)}/redeliveries`, body);
    $("#redeliver-status").textContent = `redelivery ${r.id}: ${r.total} jobs at ${r.rate}/s`;
    await loadRedeliveries();
    watchRedeliveries();
  } catch (e) {
    fail(e);
  }
}

async function cancelRedelivery(id) {
  const ref = state.dlq.ref;
  try {
    await call("DELETE", `${topicPath(ref.tenant, ref.topic)}/redeliveries/${enc(id)}`);
    $("#redeliver-status").textContent = `redelivery ${id} cancelled`;
    await loadRedeliveries();
  } catch (e) {
    fail(e);
  }
}

$("#dlq-form").addEventListener("submit", () => {
  $("#redeliver").disabled = false;
  $("#redeliver-status").textContent = "";
  loadRecent().catch(fail);
  loadRedeliveries().then((running) => { if (running) watchRedeliveries(); }).catch(fail);
});
$("#redeliver").addEventListener("click", startRedelivery);
